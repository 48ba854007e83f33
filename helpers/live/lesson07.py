"""Live picture of notebook 07: causal tiled attention, one tile per slider step.

``tile_explorer(tokens, queries, keys, values, tile_size=2)`` shows, after each tile, the scaled scores computed
so far (the live tile outlined in red) and each query row's running maximum m_i and running sum ell_i.
``tile_snapshots`` is the data behind it, one dict per tile, for printing and for tests.
"""

from __future__ import annotations

import math

import torch
from matplotlib.patches import Rectangle

from ..efficient import iter_tile_steps
from ..plotting import Bars, Heatmap, new_figure
from ..widgets import LiveFigure, int_slider

__all__ = ["tile_snapshots", "final_row_statistics", "tile_explorer"]


def _scaled_scores(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    return queries @ keys.T / math.sqrt(keys.shape[-1])  # (T, d_k) @ (d_k, T) -> (T, T)


def tile_snapshots(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, *,
                   tile_size: int) -> list[dict]:
    """The state of causal tiled attention after every tile, for ``(T, d)`` queries, keys and values.

    Each snapshot holds ``rows`` and ``cols`` (the tile's query rows and key columns, ranges), ``scores``
    ``(T, T)``: the scaled scores computed so far (``nan`` where not computed yet, or in the future), and
    ``running_max``, ``running_sum`` ``(T,)``: each row's m_i and ell_i so far (``nan`` for rows not started).
    """
    for name, tensor in (("queries", queries), ("keys", keys), ("values", values)):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 2:
            raise ValueError(f"{name} must be a (num_tokens, features) tensor, got {getattr(tensor, 'shape', tensor)}")
    num_tokens = queries.shape[0]
    scores = _scaled_scores(queries, keys)
    future = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(diagonal=1)
    seen = torch.full((num_tokens, num_tokens), float("nan"))
    running_max = torch.full((num_tokens,), float("nan"))
    running_sum = torch.full((num_tokens,), float("nan"))
    snapshots = []
    for step in iter_tile_steps(queries, keys, values, is_causal=True, tile_size=tile_size):
        rows, cols = step.query_rows, step.key_cols
        block = scores[rows.start:rows.stop, cols.start:cols.stop]
        seen[rows.start:rows.stop, cols.start:cols.stop] = block.masked_fill(
            future[rows.start:rows.stop, cols.start:cols.stop], float("nan"))
        running_max[rows.start:rows.stop] = step.running_max
        running_sum[rows.start:rows.stop] = step.running_sum
        snapshots.append({"rows": rows, "cols": cols, "scores": seen.clone(),
                          "running_max": running_max.clone(), "running_sum": running_sum.clone()})
    return snapshots


def final_row_statistics(queries: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's true maximum and softmax denominator over the keys it may see (causal): ``(T,)`` each."""
    scores = _scaled_scores(queries, keys)
    num_tokens = scores.shape[0]
    future = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(diagonal=1)
    row_max = scores.masked_fill(future, float("-inf")).amax(dim=-1)
    row_sum = torch.exp(scores - row_max[:, None]).masked_fill(future, 0.0).sum(dim=-1)
    return row_max, row_sum


def _show_rows(bars: Bars, values: torch.Tensor, live_rows: range) -> None:
    # nan = row not started yet: hide its bar and number; paint the live tile's rows red
    bars.update(torch.nan_to_num(values, nan=0.0))
    for index, (bar, value) in enumerate(zip(bars.bars, values.tolist())):
        bar.set_visible(not math.isnan(value))
        bar.set_color(bars.highlight_color if index in live_rows else bars.color)
        bars.texts[index].set_visible(not math.isnan(value))


def tile_explorer(tokens, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, *,
                  tile_size: int = 2, step: int | None = None) -> LiveFigure:
    """A slider over the tiles of causal tiled attention on ``(T, d)`` queries, keys and values.

    Left: the scaled scores s_ij / sqrt(d_k) computed so far, the live tile outlined in red. Right: each
    query row's running max m_i and running sum ell_i after that tile (black ticks: their final values).
    ``step`` is the tile shown first (default: the middle one). The returned figure has ``snapshots``,
    ``score_map``, ``max_bars`` and ``sum_bars`` for inspection.
    """
    queries, keys, values = (t.detach().cpu().float() for t in (queries, keys, values))
    snapshots = tile_snapshots(queries, keys, values, tile_size=tile_size)
    if len(tokens) != queries.shape[0]:
        raise ValueError(f"tokens must have one entry per query row ({queries.shape[0]}), got {len(tokens)}")
    step = (len(snapshots) + 1) // 2 if step is None else step
    if not 1 <= step <= len(snapshots):
        raise ValueError(f"step must be in [1, {len(snapshots)}], got {step}")
    final_max, final_sum = final_row_statistics(queries, keys)
    all_scores = _scaled_scores(queries, keys)
    num_tokens = len(tokens)

    fig = new_figure(11, 5, ncols=2, nrows=2)
    grid = fig.axes[0].get_subplotspec().get_gridspec()
    for ax in (fig.axes[0], fig.axes[2]):  # the left column becomes one tall axes
        fig.delaxes(ax)
    max_ax, sum_ax = list(fig.axes)
    score_ax = fig.add_subplot(grid[:, 0])
    score_map = Heatmap(score_ax, snapshots[0]["scores"], tokens, tokens, cmap="coolwarm",
                        vmin=float(all_scores.min()), vmax=float(all_scores.max()),
                        colorbar_label="scaled score $s_{ij}/\\sqrt{d_k}$")
    live_tile = score_ax.add_patch(Rectangle((-0.5, -0.5), tile_size, tile_size, fill=False, edgecolor="red",
                                             linewidth=3, clip_on=False, zorder=5))
    max_bars = Bars(max_ax, torch.zeros(num_tokens), tokens, annotate=True, xlabel="",
                    ylabel="running max $m_i$",
                    ylim=(min(0.0, float(final_max.min())) - 0.3, float(final_max.max()) + 0.6))
    sum_bars = Bars(sum_ax, torch.zeros(num_tokens), tokens, annotate=True, xlabel="query token",
                    ylabel="running sum $\\ell_i$", ylim=(0.0, float(final_sum.max()) + 1.0))
    max_ax.scatter(range(num_tokens), final_max, marker="_", s=300, color="black", zorder=3)
    sum_ax.scatter(range(num_tokens), final_sum, marker="_", s=300, color="black", zorder=3)
    max_ax.set_title("red: the rows of the live tile; black ticks: final values", fontsize=10)

    def redraw(step: int) -> None:
        state = snapshots[step - 1]
        rows, cols = state["rows"], state["cols"]
        score_map.update(state["scores"], title=f"Tile {step} of {len(snapshots)}: query rows {rows.start}–"
                                                f"{rows.stop - 1} × key columns {cols.start}–{cols.stop - 1}")
        for row in score_map.texts:  # no numbers in the cells not computed yet
            for text in row:
                text.set_visible(text.get_text() != "nan")
        live_tile.set_xy((cols.start - 0.5, rows.start - 0.5))
        live_tile.set_width(len(cols))
        live_tile.set_height(len(rows))
        _show_rows(max_bars, state["running_max"], rows)
        _show_rows(sum_bars, state["running_sum"], rows)

    view = LiveFigure(fig, redraw, {"step": int_slider("tile", step, 1, len(snapshots))}, animated=[live_tile])
    view.snapshots, view.score_map, view.max_bars, view.sum_bars = snapshots, score_map, max_bars, sum_bars
    return view
