"""The live tile picture of notebook 07 and its schematic: they show what tiled attention really computes."""

from __future__ import annotations

import math

import pytest
import torch
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle

from helpers.diagrams._draw import PALETTE
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
    view = tile_explorer(TOKENS, *qkv, tile_size=2)  # tiles count from 0, like rows
    assert view.controls["step"].value == 4 and repr(view) == "LiveFigure(step=4)"
    assert (view.controls["step"].min, view.controls["step"].max) == (0, 9)
    assert view.initial_png == bytes(view.image.value)
    state = view.snapshots[4]
    assert (state["rows"], state["cols"]) == (range(4, 6), range(2, 4))
    heights = bar_heights(view.sum_bars)
    assert int(heights.isfinite().sum()) == 6, "rows 0-5 have started, 6-7 not yet"


@pytest.mark.parametrize("step", [0, 3, 4, 9])
def test_picture_shows_exactly_the_state_of_that_tile(qkv, step):
    view = tile_explorer(TOKENS, *qkv, tile_size=2, step=0)
    before = bytes(view.image.value)
    view.controls["step"].value = step
    state = view.snapshots[step]
    shown = torch.as_tensor(view.score_map.image.get_array().filled(float("nan")))
    torch.testing.assert_close(shown, state["scores"], equal_nan=True)
    torch.testing.assert_close(bar_heights(view.max_bars), state["running_max"], equal_nan=True)
    torch.testing.assert_close(bar_heights(view.sum_bars), state["running_sum"], equal_nan=True)
    rows, cols = state["rows"], state["cols"]
    assert view.score_map.ax.get_title() == (f"Step {step} (of steps 0–9): the tile of query rows {rows.start}–"
                                             f"{rows.stop - 1} × key columns {cols.start}–{cols.stop - 1}")
    for index, bar in enumerate(view.sum_bars.bars):  # the live tile's rows red, the finished rows grey
        if bar.get_visible():
            red = bar.get_facecolor()[0] > 0.6 and bar.get_facecolor()[2] < 0.3
            assert red == (index in rows), index
            if index not in rows:
                assert to_hex(bar.get_facecolor()) == PALETTE["context"] and bool(state["finished"][index]), index
    if step != 0:
        assert bytes(view.image.value) != before, "the picture did not change"


def test_last_tile_holds_the_true_row_statistics(qkv):
    queries, keys, _ = qkv
    view = tile_explorer(TOKENS, *qkv, tile_size=2, step=9)
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
        tile_explorer(TOKENS, *qkv, step=10)
    with pytest.raises(ValueError, match="queries"):
        tile_snapshots(qkv[0][None], *qkv[1:], tile_size=2)


@pytest.mark.parametrize("num_tokens, tile_size, query_block, key_block, tiles", [
    (8, 2, 2, 1, 10), (37, 8, 3, 1, 15), (5, 8, 0, 0, 1), (10, 4, 2, 2, 6)])
def test_tiles_diagram_is_sized_by_its_arguments(num_tokens, tile_size, query_block, key_block, tiles):
    fig = tiles_diagram(num_tokens, tile_size, query_block, key_block)
    ax = fig.axes[0]
    order = [(q, k) for q in range(math.ceil(num_tokens / tile_size)) for k in range(q + 1)]
    live = order.index((query_block, key_block))  # counted from 0, like rows
    first_row = query_block * tile_size
    assert ax.get_title().startswith(f"Step {live} (of steps 0–{tiles - 1}): the tile of query rows {first_row}–")
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


def test_tiles_diagram_tells_masked_cells_from_tiles_never_computed():
    from matplotlib.colors import to_hex

    from helpers.diagrams._draw import PALETTE
    from helpers.diagrams.tiles import _LIVE, _MASKED
    fig = tiles_diagram(8, 2, 2, 1)
    s_x, s_y = fig.score_origin
    cells = {(round(p.get_x() - s_x), round(p.get_y() - s_y)): p for p in fig.axes[0].patches
             if isinstance(p, Rectangle) and p.get_width() == 1 and p.get_height() == 1 and p.get_fill()
             and 0 <= p.get_x() - s_x < 8 and 0 <= p.get_y() - s_y < 8}
    assert len(cells) == 64
    colours = {key: to_hex(p.get_facecolor()) for key, p in cells.items()}
    hatched = {key for key, p in cells.items() if p.get_hatch() == "////"}
    dotted = {key for key, p in cells.items() if p.get_hatch() == "...."}
    assert len(hatched) == 24                                  # 6 tiles wholly in the future, never computed
    assert len(dotted) == 14 and all(colours[key] == PALETTE["scores"] for key in dotted)  # folded in, discarded
    assert all(c // 2 > r // 2 for c, r in hatched)            # (x, y) = (key column, query row)
    masked = {key for key, colour in colours.items() if colour == _MASKED}
    assert masked == {(1, 0), (3, 2)}                          # inside diagonal tiles 0 and 2, already computed
    assert list(colours.values()).count(_LIVE) == 4            # the live 2 x 2 tile
    assert list(colours.values()).count(PALETTE["scores"]) == 14  # tiles 0-3, less their 2 masked cells
    assert fig.get_figwidth() <= 12.0


def test_tiles_diagram_draws_values_and_accumulators():
    fig = tiles_diagram(8, 2, 2, 1, d_k=4, d_v=3)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "Vᵀ" in texts and "(3, 8)" in texts and "(4, 8)" in texts and "accumulator" in texts


def test_explorer_marks_masked_cells_only_once_their_tile_is_computed(qkv):
    view = tile_explorer(TOKENS, *qkv, tile_size=2, step=0)
    ax = view.score_map.ax
    grey = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_fill() and not p.get_hatch()
            and p.get_width() == 1]
    hatched = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_hatch()]
    assert len(hatched) == 24 and len(grey) == 4               # 4 masked cells, one per diagonal tile
    assert sum(p.get_visible() for p in grey) == 1             # tile 0 computed: only its masked cell
    view.controls["step"].value = 9
    assert all(p.get_visible() for p in grey)


# --- checks moved here from the lesson --------------------------------------------------------------------
@pytest.mark.parametrize("is_causal", [True, False])
@pytest.mark.parametrize("tile_size", [1, 8, 64])
def test_tiled_attention_on_batches_of_heads_equals_the_formula_and_sdpa(is_causal, tile_size):
    import torch.nn.functional as F

    from helpers.attention import scaled_dot_product_attention
    from helpers.efficient import tiled_attention
    generator = torch.Generator().manual_seed(0)
    queries, keys, values = (torch.randn(2, 3, 37, 16, generator=generator) for _ in range(3))  # (B, H, T, D)
    mask = causal_mask(37) if is_causal else None
    expected, _ = scaled_dot_product_attention(queries, keys, values, mask=mask)
    got = tiled_attention(queries, keys, values, is_causal=is_causal, tile_size=tile_size)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(queries, keys, values, is_causal=is_causal),
                               atol=1e-5, rtol=1e-4)


def test_fast_layer_loads_state_dicts_both_ways_and_has_the_same_gradients():
    from helpers.efficient import FastMultiHeadAttention
    from helpers.modules import MultiHeadAttention
    torch.manual_seed(1)
    kwargs = dict(d_in=64, d_out=64, context_length=128, dropout=0.1, num_heads=4, qkv_bias=True)
    big, big_fast = MultiHeadAttention(**kwargs).eval(), FastMultiHeadAttention(**kwargs).eval()
    big_fast.load_state_dict(big.state_dict())
    x = torch.randn(3, 100, 64, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(big_fast(x), big(x), atol=1e-5, rtol=1e-4)
    big.load_state_dict(big_fast.state_dict())
    big(x).square().sum().backward()
    big_fast(x).square().sum().backward()
    for p_slow, p_fast in zip(big.parameters(), big_fast.parameters()):
        torch.testing.assert_close(p_fast.grad, p_slow.grad, atol=1e-4, rtol=1e-4)
    assert len(list(big_fast.parameters())) == 8


def test_builds_the_weights_tells_fused_kernels_from_the_math_path():
    import torch.nn.functional as F

    from helpers.efficient import aten_ops_called, builds_the_weights
    q = k = v = torch.randn(1, 2, 16, 8)
    with torch.no_grad():
        assert not builds_the_weights(aten_ops_called(F.scaled_dot_product_attention, q, k, v, is_causal=True))
        assert builds_the_weights(aten_ops_called(F.scaled_dot_product_attention, q, k, v, is_causal=True,
                                                  dropout_p=0.5))


def test_measure_time_and_scaling_plot():
    from helpers.live.lesson07 import measure_time_ms, scaling_plot
    assert measure_time_ms(lambda: torch.ones(10).sum(), repeats=2) >= 0.0
    from helpers.live.lesson07 import measure_times
    times = measure_times(lambda x: {"SDPA": lambda: x.sum(), "other": lambda: x.cumsum(0)},
                          lambda n, device: (torch.ones(n, device=device),), (8, 16), repeats=2)
    assert set(times) == {"SDPA", "other"} and all(len(v) == 2 for v in times.values())
    sizes = (64, 128, 256)
    fig = scaling_plot(sizes, {n: [1.0, 4.0, 16.0] for n in ("explicit", "SDPA", "tiled")})
    (time_ax,) = fig.axes  # time only: the memory panel is section 5's figure, not drawn twice
    assert time_ax.get_xlabel() == "number of tokens T" and time_ax.get_ylabel() == "milliseconds per call"
    # both slopes: quadratic and linear growth to compare with
    assert [t.get_text() for t in time_ax.texts] == ["slope 2: ∝ T²", "slope 1: ∝ T"]
    assert figure_to_png(fig)[:4] == b"\x89PNG"


def test_memory_plot_draws_the_three_paths_as_the_time_plot_does():
    from helpers.live.lesson07 import memory_plot, scaling_plot
    sizes, peak = (64, 128, 256), {n: [1.0, 2.0 * (i + 1), 4.0 ** (i + 1)] for i, n in
                                   enumerate(("explicit", "SDPA", "tiled"))}
    (ax,) = memory_plot(sizes, peak).axes
    (time_ax,) = scaling_plot(sizes, peak).axes   # the same drawing, with the time panel's labels
    assert [line.get_label() for line in ax.get_lines()[:3]] == ["explicit", "SDPA", "tiled"]
    for mine, theirs in zip(ax.get_lines(), time_ax.get_lines()):
        assert list(mine.get_ydata()) == list(theirs.get_ydata())
    assert ax.get_title() == "Peak memory, counted on the CPU (log-log)" != time_ax.get_title()
    assert [t.get_text() for t in ax.texts] == ["slope 2: ∝ T²", "slope 1: ∝ T"]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="peak_mib"):
        memory_plot(sizes, {"explicit": [1.0], "SDPA": [1.0], "tiled": [1.0]})
    with pytest.raises(TypeError, match="peak_mib"):
        memory_plot(sizes, [1.0, 2.0])


def test_explorer_never_shows_what_a_row_has_not_seen_yet(qkv):
    """No final-value marks: at step 3 nothing in the picture gives away the maximum that step 4 brings."""
    view = tile_explorer(TOKENS, *qkv, tile_size=2, step=3)
    for ax in (view.max_bars.ax, view.sum_bars.ax):
        assert not ax.collections, "markers of final values are back"
    state = view.snapshots[3]
    assert state["finished"].tolist() == [True, True, True, True, False, False, False, False]
    seen = state["scores"][4]
    assert not bool(seen[2:].isfinite().any())  # "brown" and "fox" are not shown to "jumps" before step 4
    # the prediction in the lesson: m_4 after step 4 is the largest of -0.14, 2.65, 0.69; l_4 shrinks
    after = view.snapshots[4]
    scores = qkv[0] @ qkv[1].T / 2.0
    assert round(float(after["running_max"][4]), 2) == round(float(scores[4, :4].max()), 2) == 2.65
    assert float(after["running_sum"][4]) < float(state["running_sum"][4])


def test_rows_are_finished_block_by_block(qkv):
    snapshots = tile_snapshots(*qkv, tile_size=2)
    for step, snap in enumerate(snapshots):
        started = snap["running_max"].isfinite()
        live = torch.zeros(8, dtype=torch.bool)
        live[snap["rows"].start:snap["rows"].stop] = True
        assert bool((started == (live | snap["finished"])).all()), step  # a started row is live or finished
    assert bool(snapshots[-1]["finished"].all())


def test_timing_runs_on_one_thread_takes_the_median_and_restores_the_thread_setting():
    from helpers.live.lesson07 import measure_time_ms_each
    before = torch.get_num_threads()
    seen = []
    calls = iter([0.0, 0.0, 0.0, 0.05, 0.0])  # warm-up, then 4 timed calls: one slowed by 50 ms
    import time as _time

    def path():
        seen.append(torch.get_num_threads())
        _time.sleep(next(calls))
    ms = measure_time_ms_each({"p": path}, repeats=4)["p"]
    assert set(seen) == {1} and torch.get_num_threads() == before
    assert ms < 25.0  # the median ignores the one slow run

    def broken():
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError):
        measure_time_ms_each({"b": broken}, threads=1)
    assert torch.get_num_threads() == before  # restored after an error too
