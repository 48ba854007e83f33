"""Live picture and measuring plumbing of notebook 07: causal tiled attention, one tile per slider step.

``tile_explorer(tokens, queries, keys, values, tile_size=2)`` shows, after each step (one tile per step, counted
from 0), the scaled scores computed so far (the live tile outlined in red) and each query row's running maximum m_i
and running sum ell_i. ``tile_snapshots`` is the data behind it, one dict per step, for printing and for tests.
``measure_time_ms`` and ``scaling_plot`` time the three ways of computing attention and draw the times;
``memory_plot`` draws their peak memory.
"""

from __future__ import annotations

import math
import statistics
import time

import torch
from matplotlib.patches import Patch, Rectangle

from ..diagrams._draw import PALETTE
from ..diagrams.tiles import _LIVE, _MASKED as _MASKED_CELL
from ..efficient import iter_tile_steps
from ..plotting import Bars, Heatmap, new_figure
from ..widgets import LiveFigure, int_slider

__all__ = ["tile_snapshots", "final_row_statistics", "tile_explorer", "measure_time_ms_each", "measure_time_ms",
           "measure_times",
           "scaling_plot"]


def _scaled_scores(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    return queries @ keys.T / math.sqrt(keys.shape[-1])  # (T, d_k) @ (d_k, T) -> (T, T)


def tile_snapshots(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, *,
                   tile_size: int) -> list[dict]:
    """The state of causal tiled attention after every tile, for ``(T, d)`` queries, keys and values.

    Each snapshot holds ``rows`` and ``cols`` (the tile's query rows and key columns, ranges), ``scores``
    ``(T, T)``: the scaled scores computed so far (``nan`` where not computed yet, or in the future),
    ``running_max``, ``running_sum`` ``(T,)``: each row's m_i and ell_i so far (``nan`` for rows not started), and
    ``finished`` ``(T,)``: whether the row's last tile has been folded in (its context vector is written).
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
    finished = torch.zeros(num_tokens, dtype=torch.bool)
    snapshots = []
    for step in iter_tile_steps(queries, keys, values, is_causal=True, tile_size=tile_size):
        rows, cols = step.query_rows, step.key_cols
        block = scores[rows.start:rows.stop, cols.start:cols.stop]
        seen[rows.start:rows.stop, cols.start:cols.stop] = block.masked_fill(
            future[rows.start:rows.stop, cols.start:cols.stop], float("nan"))
        running_max[rows.start:rows.stop] = step.running_max
        running_sum[rows.start:rows.stop] = step.running_sum
        finished[rows.start:rows.stop] = step.done
        snapshots.append({"rows": rows, "cols": cols, "scores": seen.clone(), "running_max": running_max.clone(),
                          "running_sum": running_sum.clone(), "finished": finished.clone()})
    return snapshots


def final_row_statistics(queries: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's true maximum and softmax denominator over the keys it may see (causal): ``(T,)`` each."""
    scores = _scaled_scores(queries, keys)
    num_tokens = scores.shape[0]
    future = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(diagonal=1)
    row_max = scores.masked_fill(future, float("-inf")).amax(dim=-1)
    row_sum = torch.exp(scores - row_max[:, None]).masked_fill(future, 0.0).sum(dim=-1)
    return row_max, row_sum


_FINISHED = PALETTE["context"]  # rows whose context vector z_i is written, as in the diagram
# One visual code with the tiles diagram: red marks the live tile (filled there, outlined here, where the cells show
# their scores), cells masked to -inf are the same grey, and the scores' scale holds neither red nor that grey.
_SCORE_CMAP = "BrBG"  # diverging, brown below 0, teal above, near white at 0


def _show_rows(bars: Bars, values: torch.Tensor, live_rows: range, finished: torch.Tensor) -> None:
    # nan = row not started yet: hide its bar; paint the live tile's rows red and the finished rows grey
    bars.update(torch.nan_to_num(values, nan=0.0))
    for index, (bar, value) in enumerate(zip(bars.bars, values.tolist())):
        bar.set_visible(not math.isnan(value))
        live = index in live_rows
        bar.set_color(bars.highlight_color if live else _FINISHED if bool(finished[index]) else bars.color)
        bar.set_edgecolor("#525252" if bool(finished[index]) and not live else "none")


def _tile_of_each_cell(num_tokens: int, tile_size: int) -> list[list[int | None]]:
    """For causal tiles visited row block by row block: the index of the tile that computes each cell, or None."""
    num_blocks = math.ceil(num_tokens / tile_size)
    order = [(qb, kb) for qb in range(num_blocks) for kb in range(qb + 1)]
    return [[order.index((r // tile_size, c // tile_size)) if c // tile_size <= r // tile_size else None
             for c in range(num_tokens)] for r in range(num_tokens)]


def tile_explorer(tokens, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, *,
                  tile_size: int = 2, step: int | None = None) -> LiveFigure:
    """A slider over the steps of causal tiled attention on ``(T, d)`` queries, keys and values, one tile a step.

    Left: the scaled scores s_ij / sqrt(d_k) computed so far (colours centred on 0), the live tile outlined in red,
    cells masked inside a diagonal tile in grey (as in the tiles diagram), tiles never computed hatched. Right: each query row's running max
    m_i and running sum ell_i after that step: the live tile's rows in red, rows already finished in grey (rows are
    taken block by block, so a started row is either live or finished; no final values are drawn, so the picture
    never shows what a row has not seen yet). Steps count from 0; ``step`` is
    the one shown first (default: the middle one). The returned figure has ``snapshots``, ``score_map``,
    ``max_bars`` and ``sum_bars`` for inspection.
    """
    queries, keys, values = (t.detach().cpu().float() for t in (queries, keys, values))
    snapshots = tile_snapshots(queries, keys, values, tile_size=tile_size)
    if len(tokens) != queries.shape[0]:
        raise ValueError(f"tokens must have one entry per query row ({queries.shape[0]}), got {len(tokens)}")
    step = (len(snapshots) - 1) // 2 if step is None else step
    if not 0 <= step < len(snapshots):
        raise ValueError(f"step must be in [0, {len(snapshots) - 1}], got {step}")
    final_max, final_sum = final_row_statistics(queries, keys)
    all_scores = _scaled_scores(queries, keys)
    num_tokens = len(tokens)
    limit = float(all_scores.abs().max())  # a diverging scale centred on 0

    fig = new_figure(11, 5.2, ncols=2, nrows=2)
    grid = fig.axes[0].get_subplotspec().get_gridspec()
    for ax in (fig.axes[0], fig.axes[2]):  # the left column becomes one tall axes
        fig.delaxes(ax)
    max_ax, sum_ax = list(fig.axes)
    score_ax = fig.add_subplot(grid[:, 0])
    score_map = Heatmap(score_ax, snapshots[0]["scores"], tokens, tokens, cmap=_SCORE_CMAP, vmin=-limit, vmax=limit,
                        colorbar_label="scaled score $s_{ij}/\\sqrt{d_k}$")
    tile_of = _tile_of_each_cell(num_tokens, tile_size)
    masked_cells = []  # (tile index, patch): computed, then masked to -inf; shown once their tile is reached
    for r in range(num_tokens):
        for c in range(r + 1, num_tokens):
            if tile_of[r][c] is None:  # the whole tile is in the future: never computed
                score_ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, facecolor="white", edgecolor="#bdbdbd",
                                             hatch="////", linewidth=0, zorder=2.1))
            else:
                masked_cells.append((tile_of[r][c], score_ax.add_patch(
                    Rectangle((c - 0.5, r - 0.5), 1, 1, facecolor=_MASKED_CELL, linewidth=0, zorder=2.1))))
    live_tile = score_ax.add_patch(Rectangle((-0.5, -0.5), tile_size, tile_size, fill=False, edgecolor=_LIVE,
                                             linewidth=3, clip_on=False, zorder=5))
    score_ax.legend(handles=[Patch(facecolor=_MASKED_CELL, label="computed, then masked to $-\\infty$"),
                             Patch(facecolor="white", edgecolor="#bdbdbd", hatch="////", label="never computed"),
                             Patch(facecolor="white", edgecolor="#525252", label="not reached yet")],
                    loc="upper right", fontsize=8.5, framealpha=1.0)
    # fixed axes for the whole walk: a running max lies between the lowest visible score and the largest row maximum
    lowest = float(all_scores.masked_fill(torch.ones_like(all_scores, dtype=torch.bool).triu(1), float("inf")).min())
    max_bars = Bars(max_ax, torch.zeros(num_tokens), tokens, xlabel="", highlight_color=_LIVE,
                    ylabel="running max $m_i$", ylim=(min(0.0, lowest) - 0.3, float(final_max.max()) + 0.4))
    sum_bars = Bars(sum_ax, torch.zeros(num_tokens), tokens, xlabel="query token", highlight_color=_LIVE,
                    ylabel="running sum $\\ell_i$", ylim=(0.0, float(final_sum.max()) + 0.5))
    max_ax.legend(handles=[Patch(color=max_bars.highlight_color, label="rows of the live tile"),
                           Patch(facecolor=_FINISHED, edgecolor="#525252", label="rows finished")],
                  loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2, fontsize=9, frameon=False)

    def redraw(step: int) -> None:
        state = snapshots[step]
        rows, cols = state["rows"], state["cols"]
        score_map.update(state["scores"], title=f"Step {step} (of steps 0–{len(snapshots) - 1}): the tile of "
                                                f"query rows {rows.start}–{rows.stop - 1} × key columns "
                                                f"{cols.start}–{cols.stop - 1}")
        for i, row in enumerate(score_map.texts):  # numbers only where computed; dark text on pale colours
            for j, text in enumerate(row):
                value = float(state["scores"][i, j])
                text.set_visible(not math.isnan(value))
                text.set_color("white" if abs(value) > 0.6 * limit else "black")
        for tile, patch in masked_cells:
            patch.set_visible(tile <= step)
        live_tile.set_xy((cols.start - 0.5, rows.start - 0.5))
        live_tile.set_width(len(cols))
        live_tile.set_height(len(rows))
        _show_rows(max_bars, state["running_max"], rows, state["finished"])
        _show_rows(sum_bars, state["running_sum"], rows, state["finished"])

    view = LiveFigure(fig, redraw, {"step": int_slider("step", step, 0, len(snapshots) - 1)},
                      animated=[live_tile, *(patch for _, patch in masked_cells)])
    view.snapshots, view.score_map, view.max_bars, view.sum_bars = snapshots, score_map, max_bars, sum_bars
    return view


# --- section 5: time and memory as T grows ----------------------------------------------------------------
def measure_time_ms_each(paths: dict, device: torch.device | str = "cpu", repeats: int = 9,
                         threads: int | None = 1) -> dict:
    """The median wall-clock time of each function of no arguments in ``paths``, in milliseconds.

    Every function is called once to warm up, then timed ``repeats`` times in turns (each round times every
    function once), so that a burst of load from other programs slows all of them alike instead of one. The
    median ignores the rounds slowed the most. ``threads``: the number of CPU threads PyTorch may use while timing
    (default 1: on a shared machine, other programs take fewer of them away mid-run); the setting in force before
    is restored afterwards, also on an error; ``None`` leaves it as it is. On a GPU, PyTorch returns before the GPU
    has finished its work; ``torch.cuda.synchronize()`` waits for it, so that the clock measures the work and not
    only the launch. Returns ``{key: ms}`` for the keys of ``paths``.
    """
    synchronize = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        for path in paths.values():
            path()
        times: dict = {key: [] for key in paths}
        for _ in range(repeats):
            for key, path in paths.items():
                synchronize()
                start = time.perf_counter()
                path()
                synchronize()
                times[key].append((time.perf_counter() - start) * 1000)
    finally:
        torch.set_num_threads(previous_threads)
    return {key: statistics.median(values) for key, values in times.items()}


def measure_time_ms(path, device: torch.device | str = "cpu", repeats: int = 9, threads: int | None = 1) -> float:
    """The median of ``repeats`` wall-clock times of ``path()``, in milliseconds (see :func:`measure_time_ms_each`)."""
    return measure_time_ms_each({"path": path}, device, repeats, threads)["path"]


def measure_times(paths_for, inputs_for, sizes, device: torch.device | str = "cpu", relative_to: str = "SDPA",
                  repeats: int = 9, threads: int | None = 1) -> dict[str, list[float]]:
    """Time every path at every length, print each as a multiple of ``relative_to``'s time, return the ms.

    ``inputs_for(num_tokens, device)`` makes the inputs of one length; ``paths_for(*inputs)`` returns
    ``{name: function of no arguments}``. All paths at all lengths are timed in turns by
    :func:`measure_time_ms_each` (median of ``repeats`` on ``threads`` CPU threads), under ``torch.no_grad()``.
    Returns ``{name: [ms at each length]}``.
    """
    device = torch.device(device)
    paths = {(name, num_tokens): path for num_tokens in sizes
             for name, path in paths_for(*inputs_for(num_tokens, device)).items()}
    with torch.no_grad():
        medians = measure_time_ms_each(paths, device, repeats, threads)
    time_ms: dict[str, list[float]] = {}
    for (name, _), ms in medians.items():
        time_ms.setdefault(name, []).append(ms)
    others = [name for name in time_ms if name != relative_to]
    used = threads if threads is not None else torch.get_num_threads()
    where = f"{device.type}, {used} CPU thread(s)" if device.type == "cpu" else device.type
    print(f"time as a multiple of {relative_to}'s at the same T (median of {repeats}, on {where})")
    print(f"{'T':>5} " + " ".join(f"{name:>9}" for name in others))
    for i, num_tokens in enumerate(sizes):
        print(f"{num_tokens:>5} " + " ".join(f"{time_ms[name][i] / time_ms[relative_to][i]:>9.1f}" for name in others))
    return time_ms


def _slope_triangle(ax, x0: float, y0: float, slope: int, text: str) -> None:
    # a right triangle on log-log axes: one doubling of T along the bottom, 2**slope up the side
    x1, y1 = 2 * x0, y0 * 2**slope
    ax.plot([x0, x1, x1, x0], [y0, y0, y1, y0], color="gray", linewidth=1)
    ax.text(x1 * 1.06, (y0 * y1) ** 0.5, text, color="gray", va="center", fontsize=9)


def memory_plot(sizes, peak_mib: dict):
    """Peak memory of each path (``peak_mib``: name -> one value per size) against T, log-log, with slope triangles."""
    if not isinstance(peak_mib, dict):
        raise TypeError(f"peak_mib must be a dict of path name -> values, got {type(peak_mib).__name__}")
    for name in ("explicit", "SDPA", "tiled"):
        if len(peak_mib.get(name, ())) != len(sizes):
            raise ValueError(f"peak_mib must map {name!r} to one value per size ({len(sizes)}), got "
                             f"{len(peak_mib.get(name, ()))}")
    fig = new_figure(5.4, 4)
    _draw_panels(sizes, {"memory": (fig.axes[0], peak_mib)})
    return fig


def _draw_panels(sizes, panels: dict) -> None:
    for kind, (ax, measured) in panels.items():
        for name, marker in (("explicit", "o"), ("SDPA", "s"), ("tiled", "^")):
            ax.loglog(sizes, measured[name], marker=marker, label=name)
        slopes = (2, 1)
        top = max(max(values) for values in measured.values())
        bottom = min(min(values) for values in measured.values())
        ax.set_ylim(bottom / 2, top * 3)
        y0 = top * 3 / 2**3.3
        for slope in slopes:  # stacked in the empty upper left corner, clear of the data
            _slope_triangle(ax, sizes[0] * 1.05, y0, slope, f"slope {slope}: ∝ T{'²' if slope == 2 else ''}")
            y0 /= 5
        ax.set_xlabel("number of tokens T")
        ax.legend(loc="lower right")
        if kind == "time":
            ax.set_ylabel("milliseconds per call")
            ax.set_title("Time per call, this machine (log-log)")
        else:
            ax.set_ylabel("peak MiB of tensors created")
            ax.set_title("Peak memory, counted on the CPU (log-log)")


def scaling_plot(sizes, time_ms: dict):
    """Time per call of each path (``time_ms``: name -> one value per size) against T, log-log, with slope triangles.
    Its memory counterpart is :func:`memory_plot`."""
    fig = new_figure(5.4, 4)
    _draw_panels(sizes, {"time": (fig.axes[0], time_ms)})
    return fig
