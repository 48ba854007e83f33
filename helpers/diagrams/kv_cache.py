"""One decoding step with a KV cache, as a picture.

:func:`kv_cache_step_diagram` draws the newest token ``x_t`` projected to one query ``q_t`` and one new row of
``K`` and of ``V``; the rows above come from the cache. The query meets every key: one row of scores
``(1, T_k)``, one row of weights, one context vector ``z_t``. The arrows into the scores and into ``z_t`` leave
brackets beside the whole of ``K`` and of ``V`` (cached rows and the new one). The sizes come from the arguments.
"""

from __future__ import annotations

from matplotlib.patches import Rectangle

from ..plotting import CourseFigure
from ._draw import PALETTE, arrow, diagram_canvas, label, tensor_grid

__all__ = ["kv_cache_step_diagram"]

_NEW = "#e6550d"   # outline of what this step computes
_GRID_FONT = 13     # names and shapes of the tensors, legible at the notebook's width


def _outline(ax, x: float, y: float, rows: int, cols: int) -> None:
    ax.add_patch(Rectangle((x, y), cols, rows, fill=False, edgecolor=_NEW, linewidth=2.5, zorder=3))


def kv_cache_step_diagram(num_cached: int = 4, d_in: int = 4, head_dim: int = 3) -> CourseFigure:
    """``num_cached`` tokens already in the cache, the new token at position ``num_cached``."""
    for name, value in (("num_cached", num_cached), ("d_in", d_in), ("head_dim", head_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    num_keys = num_cached + 1
    width = d_in + 2 * head_dim + num_keys + 19
    height = num_keys + 9
    fig, ax = diagram_canvas(width, height)
    top = 3.0                                  # row of the query and the scores
    cache_top = top + 3.5                      # first row of K and V
    new_row = cache_top + num_cached           # the row this step adds
    # the new token
    tensor_grid(ax, 0.5, new_row, 1, d_in, name="", shape_text=f"(1, {d_in})", fontsize=_GRID_FONT)
    label(ax, 0.5 + d_in / 2, new_row - 0.6, "new token $x_t$", fontsize=12, fontweight="bold")
    # the query
    qx = d_in + 4.0
    tensor_grid(ax, qx, top, 1, head_dim, color=PALETTE["queries"], name="$q_t = x_t W_q$",
                shape_text=f"(1, {head_dim})", fontsize=_GRID_FONT)
    _outline(ax, qx, top, 1, head_dim)
    arrow(ax, (0.5 + d_in, new_row + 0.2), (qx, top + 0.8), "$W_q$", fontsize=12, text_offset=(-0.6, 0.0))
    # the cache: K and V, the new row outlined
    kx, vx = qx, qx + head_dim + 2.5
    for x, color, name in ((kx, PALETTE["keys"], "$K$"), (vx, PALETTE["values"], "$V$")):
        tensor_grid(ax, x, cache_top, num_keys, head_dim, color=color, shape_text=f"({num_keys}, {head_dim})",
                    fontsize=_GRID_FONT)
        label(ax, x - 0.8, cache_top + num_keys / 2, name, fontsize=13, fontweight="bold")  # left of the block
        _outline(ax, x, new_row, 1, head_dim)
    for x in (kx, vx):   # one dashed box per tensor, so the gap between K and V stays free for the K^T arrow
        ax.add_patch(Rectangle((x - 0.15, cache_top - 0.15), head_dim + 0.3, num_cached + 0.05,
                               fill=False, edgecolor="#3182bd", linewidth=1.5, linestyle="--"))
    label(ax, (kx + vx + head_dim) / 2, new_row + 3.0, f"dashed: from the cache (positions 0 to {num_cached - 1})",
          fontsize=12, color="#3182bd")
    arrow(ax, (0.5 + d_in, new_row + 0.5), (kx, new_row + 0.5), "$W_k$", fontsize=12)
    # x_t W_v: under K, then up between K and V and into V's new row
    gap_x = kx + head_dim + 1.6
    ax.plot([d_in, d_in, gap_x, gap_x], [new_row + 1.1, new_row + 1.9, new_row + 1.9,
            new_row + 0.5], color="#252525", linewidth=1.2)
    arrow(ax, (gap_x, new_row + 0.5), (vx, new_row + 0.5))
    label(ax, (d_in + gap_x) / 2, new_row + 2.35, "$W_v$", fontsize=12)   # under the line, off the border
    # scores, weights, context: one row each
    sx = vx + head_dim + 3.0
    tensor_grid(ax, sx, top, 1, num_keys, color=PALETTE["scores"],
                name="scores $q_t K^\\top / \\sqrt{d_\\mathrm{head}}$", shape_text=f"(1, {num_keys})",
                fontsize=_GRID_FONT)
    arrow(ax, (qx + head_dim, top + 0.5), (sx, top + 0.5))
    k_bar = kx + head_dim + 0.6
    ax.plot([kx + head_dim + 0.2, k_bar, k_bar, kx + head_dim + 0.2], [cache_top, cache_top, cache_top + num_keys,
            cache_top + num_keys], color="#252525", linewidth=1.2)   # a bracket beside all of K, touching it
    arrow(ax, (k_bar, cache_top), (sx + 0.5, top + 1.1), "$K^\\top$", fontsize=12, text_offset=(0.0, -0.1))
    wy = top + 3.5
    tensor_grid(ax, sx, wy, 1, num_keys, color=PALETTE["weights"], name="weights $a_t$ (softmax)",
                shape_text=f"(1, {num_keys})", fontsize=_GRID_FONT)
    arrow(ax, (sx + num_keys / 2, top + 2.0), (sx + num_keys / 2, wy - 0.6))
    zy = wy + 3.5
    tensor_grid(ax, sx, zy, 1, head_dim, color=PALETTE["context"], name="$z_t = a_t V$",
                shape_text=f"(1, {head_dim})", fontsize=_GRID_FONT)
    # into z_t from the upper right, clear of its name above the grid
    arrow(ax, (sx + num_keys - 0.5, wy + 1.5), (sx + head_dim + 0.1, zy + 0.3))
    bar_x = vx + head_dim + 0.7
    ax.plot([vx + head_dim + 0.3, bar_x, bar_x, vx + head_dim + 0.3], [cache_top, cache_top, cache_top + num_keys,
            cache_top + num_keys], color="#252525", linewidth=1.2)   # a bracket beside all of V, touching it
    arrow(ax, (bar_x, cache_top + num_keys / 2), (sx, zy + 0.5))
    for x, y, rows, cols in ((sx, top, 1, num_keys), (sx, wy, 1, num_keys), (sx, zy, 1, head_dim)):
        _outline(ax, x, y, rows, cols)
    label(ax, width / 2, 0.8, f"One decoding step: 1 query, 1 new key and value, {num_keys} keys in all "
                              f"(orange: computed in this step, for the new token at position $t$ = {num_cached})",
          fontsize=11)
    return fig
