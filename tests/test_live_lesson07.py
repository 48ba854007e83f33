"""The live tile picture of notebook 07 and its schematic: they show what tiled attention really computes."""

from __future__ import annotations

import math

import pytest
import torch
from matplotlib.patches import Rectangle

from helpers.diagrams.tiles import tiles_diagram
from helpers.efficient import iter_tile_steps
from helpers.live.lesson07 import final_row_statistics, tile_explorer, tile_snapshots
from helpers.masks import causal_mask
from helpers.plotting import figure_to_png

TOKENS = ["The", "quick", "brown", "fox", "jumps", "over", "lazy", "dogs"]


@pytest.fixture
def qkv():
    torch.manual_seed(7)  # the lesson's eight tokens
    return torch.randn(3, 8, 4).unbind(0)


def bar_heights(bars):
    return torch.tensor([bar.get_height() if bar.get_visible() else float("nan") for bar in bars.bars])


def test_snapshots_follow_iter_tile_steps(qkv):
    queries, keys, values = qkv
    snapshots = tile_snapshots(queries, keys, values, tile_size=2)
    steps = list(iter_tile_steps(queries, keys, values, is_causal=True, tile_size=2))
    assert len(snapshots) == len(steps) == 10  # 1 + 2 + 3 + 4 tiles on or below the diagonal
    scores = queries @ keys.T / 2.0
    for snap, step in zip(snapshots, steps):
        assert (snap["rows"], snap["cols"]) == (step.query_rows, step.key_cols)
        rows = slice(step.query_rows.start, step.query_rows.stop)
        torch.testing.assert_close(snap["running_max"][rows], step.running_max)
        torch.testing.assert_close(snap["running_sum"][rows], step.running_sum)
        seen = snap["scores"]
        assert not bool(seen.isfinite()[causal_mask(8)].any()), "a future score is shown"
        computed = seen.isfinite()
        torch.testing.assert_close(seen[computed], scores[computed])
    assert int(snapshots[-1]["scores"].isfinite().sum()) == 36  # the whole lower triangle, diagonal included


def test_explorer_opens_on_a_middle_tile_with_both_statistics(qkv):
    view = tile_explorer(TOKENS, *qkv, tile_size=2)
    assert view.controls["step"].value == 5 and repr(view) == "LiveFigure(step=5)"
    assert view.initial_png == bytes(view.image.value)
    state = view.snapshots[4]
    assert (state["rows"], state["cols"]) == (range(4, 6), range(2, 4))
    heights = bar_heights(view.sum_bars)
    assert int(heights.isfinite().sum()) == 6, "rows 0-5 have started, 6-7 not yet"


@pytest.mark.parametrize("step", [1, 4, 5, 10])
def test_picture_shows_exactly_the_state_of_that_tile(qkv, step):
    view = tile_explorer(TOKENS, *qkv, tile_size=2, step=1)
    before = bytes(view.image.value)
    view.controls["step"].value = step
    state = view.snapshots[step - 1]
    shown = torch.as_tensor(view.score_map.image.get_array().filled(float("nan")))
    torch.testing.assert_close(shown, state["scores"], equal_nan=True)
    torch.testing.assert_close(bar_heights(view.max_bars), state["running_max"], equal_nan=True)
    torch.testing.assert_close(bar_heights(view.sum_bars), state["running_sum"], equal_nan=True)
    rows, cols = state["rows"], state["cols"]
    assert view.score_map.ax.get_title() == (f"Tile {step} of 10: query rows {rows.start}–{rows.stop - 1} × "
                                             f"key columns {cols.start}–{cols.stop - 1}")
    for index, bar in enumerate(view.sum_bars.bars):  # the live tile's rows are painted
        if bar.get_visible():
            red = bar.get_facecolor()[0] > 0.6 and bar.get_facecolor()[2] < 0.3
            assert red == (index in rows), index
    if step != 1:
        assert bytes(view.image.value) != before, "the picture did not change"


def test_last_tile_holds_the_true_row_statistics(qkv):
    queries, keys, _ = qkv
    view = tile_explorer(TOKENS, *qkv, tile_size=2, step=10)
    final_max, final_sum = final_row_statistics(queries, keys)
    torch.testing.assert_close(bar_heights(view.max_bars), final_max)
    torch.testing.assert_close(bar_heights(view.sum_bars), final_sum)
    # the softmax denominator, computed the plain way
    scores = (queries @ keys.T / math.sqrt(4)).masked_fill(causal_mask(8), float("-inf"))
    torch.testing.assert_close(final_sum, torch.exp(scores - scores.amax(-1, keepdim=True)).sum(-1))


def test_explorer_checks_its_input(qkv):
    with pytest.raises(ValueError, match="tokens"):
        tile_explorer(TOKENS[:7], *qkv)
    with pytest.raises(ValueError, match="step"):
        tile_explorer(TOKENS, *qkv, step=11)
    with pytest.raises(ValueError, match="queries"):
        tile_snapshots(qkv[0][None], *qkv[1:], tile_size=2)


@pytest.mark.parametrize("num_tokens, tile_size, query_block, key_block, tiles", [
    (8, 2, 2, 1, 10), (37, 8, 3, 1, 15), (5, 8, 0, 0, 1), (10, 4, 2, 2, 6)])
def test_tiles_diagram_is_sized_by_its_arguments(num_tokens, tile_size, query_block, key_block, tiles):
    fig = tiles_diagram(num_tokens, tile_size, query_block, key_block)
    ax = fig.axes[0]
    order = [(q, k) for q in range(math.ceil(num_tokens / tile_size)) for k in range(q + 1)]
    live = order.index((query_block, key_block)) + 1
    assert ax.get_title().startswith(f"Tile {live} of {tiles}: query rows {query_block * tile_size}–")
    # one unit square per score cell of S (plus Q, K^T and the two statistics columns)
    cells = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() == 1 and p.get_height() == 1
             and p.get_fill()]
    assert len(cells) >= num_tokens * num_tokens
    assert fig.get_figwidth() <= 12.0
    assert figure_to_png(fig)[:4] == b"\x89PNG"


def test_tiles_diagram_refuses_a_future_tile_and_bad_sizes():
    with pytest.raises(ValueError, match="above the diagonal"):
        tiles_diagram(8, 2, 1, 2)
    tiles_diagram(8, 2, 1, 2, is_causal=False)  # allowed without the causal mask
    with pytest.raises(ValueError, match="query_block"):
        tiles_diagram(8, 2, 4, 0)
    with pytest.raises(ValueError, match="tile_size"):
        tiles_diagram(8, 0, 0, 0)


def test_tiles_diagram_colours_done_live_and_skipped_tiles():
    from matplotlib.colors import to_hex

    from helpers.diagrams._draw import PALETTE
    from helpers.diagrams.tiles import _LIVE, _SKIPPED
    ax = tiles_diagram(8, 2, 2, 1).axes[0]
    cells = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() == 1 and p.get_height() == 1
             and p.get_fill()]
    colours = [to_hex(p.get_facecolor()) for p in cells]
    assert colours.count(_LIVE) == 4                   # the live 2 x 2 tile
    assert colours.count(PALETTE["scores"]) == 4 * 4 - 2  # tiles 1-4, less the masked cell of tiles 1 and 3
    assert colours.count(_SKIPPED) == 28               # the 6 skipped tiles plus the 4 masked diagonal cells
