"""The tiles of flash attention: the (T, T) score matrix cut into blocks, one block computed at a time.

``tiles_diagram(num_tokens, tile_size, query_block, key_block)`` draws the queries Q down the left, the keys as
Kᵀ along the top, the score matrix S cut into ``tile_size`` x ``tile_size`` tiles (those already folded in, the
live one, those still to come, and, for causal attention, those above the diagonal that are never computed),
and per query row the two running statistics m_i and ell_i, with the rows the live tile updates highlighted.
"""

from __future__ import annotations

import math

from matplotlib.patches import Patch, Rectangle

from ..plotting import CourseFigure
from ._draw import PALETTE, arrow, diagram_canvas, label, tensor_grid

__all__ = ["tiles_diagram"]

_LIVE = "#ef3b2c"       # the tile being computed (a deeper shade of the scores' colour)
_LATER = "#ffffff"      # tiles not reached yet
_SKIPPED = "#d9d9d9"    # causal: tiles wholly in the future, never computed


def _tile_order(num_blocks: int, is_causal: bool) -> list[tuple[int, int]]:
    """(query block, key block) pairs in the order tiled attention visits them."""
    return [(qb, kb) for qb in range(num_blocks) for kb in range(num_blocks) if not (is_causal and kb > qb)]


def tiles_diagram(num_tokens: int = 8, tile_size: int = 2, query_block: int = 2, key_block: int = 1, *,
                  is_causal: bool = True, d_k: int = 2) -> CourseFigure:
    """Schematic of tiled attention while tile (``query_block``, ``key_block``) is being folded in.

    Sizes are in tokens: ``num_tokens`` rows and columns of S, tiles of ``tile_size`` (the last may be
    shorter); ``d_k`` is the width drawn for Q and Kᵀ. Blocks count from 0.
    """
    for name, value in (("num_tokens", num_tokens), ("tile_size", tile_size), ("d_k", d_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    num_blocks = math.ceil(num_tokens / tile_size)
    for name, value in (("query_block", query_block), ("key_block", key_block)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < num_blocks:
            raise ValueError(f"{name} must be an int in [0, {num_blocks}), got {value!r}")
    if is_causal and key_block > query_block:
        raise ValueError(f"key_block {key_block} lies above the diagonal of query_block {query_block}: "
                         "causal attention never computes that tile")
    order = _tile_order(num_blocks, is_causal)
    live_index = order.index((query_block, key_block))
    rows = range(query_block * tile_size, min((query_block + 1) * tile_size, num_tokens))
    cols = range(key_block * tile_size, min((key_block + 1) * tile_size, num_tokens))

    T = num_tokens
    s_x, s_y = d_k + 2.5, d_k + 2.5                 # top-left corner of S
    stats_x = s_x + T + 3.0                          # the m_i and ell_i columns
    fig, ax = diagram_canvas(stats_x + 6.5, s_y + T + 4.6)

    # Q down the left and K^T along the top, the live tile's rows and columns highlighted.
    tensor_grid(ax, 0.5, s_y, T, d_k, color=PALETTE["queries"], name="Q", shape_text=f"({T}, {d_k})")
    tensor_grid(ax, s_x, 0.8, d_k, T, color=PALETTE["keys"], name="", shape_text="")
    label(ax, s_x - 0.4, 0.8 + d_k / 2, "Kᵀ", fontsize=10, fontweight="bold", ha="right")
    label(ax, s_x + T + 0.3, 0.8 + d_k / 2, f"({d_k}, {T})", fontsize=8.5, color="#525252", ha="left")
    ax.add_patch(Rectangle((0.5, s_y + rows.start), d_k, len(rows), fill=False, edgecolor=_LIVE, linewidth=2.5))
    ax.add_patch(Rectangle((s_x + cols.start, 0.8), len(cols), d_k, fill=False, edgecolor=_LIVE, linewidth=2.5))

    # S, tile by tile.
    for qb in range(num_blocks):
        for kb in range(num_blocks):
            r0, r1 = qb * tile_size, min((qb + 1) * tile_size, T)
            c0, c1 = kb * tile_size, min((kb + 1) * tile_size, T)
            if is_causal and kb > qb:
                face = _SKIPPED
            else:
                index = order.index((qb, kb))
                face = PALETTE["scores"] if index < live_index else _LIVE if index == live_index else _LATER
            for r in range(r0, r1):
                for c in range(c0, c1):
                    cell_face = face
                    if is_causal and c > r and face != _SKIPPED:  # inside a diagonal tile: masked, -inf
                        cell_face = _SKIPPED
                    ax.add_patch(Rectangle((s_x + c, s_y + r), 1, 1, facecolor=cell_face, edgecolor="#bdbdbd",
                                           linewidth=0.5))
            ax.add_patch(Rectangle((s_x + c0, s_y + r0), c1 - c0, r1 - r0, fill=False, edgecolor="#525252",
                                   linewidth=1.2))
    ax.add_patch(Rectangle((s_x + cols.start, s_y + rows.start), len(cols), len(rows), fill=False,
                           edgecolor="black", linewidth=2.5))
    label(ax, s_x + T / 2, s_y - 0.45, f"S (T, T) in tiles of {tile_size} × {tile_size}", fontsize=10,
          fontweight="bold", va="bottom")
    arrow(ax, (0.5 + d_k + 0.1, s_y + rows.start + len(rows) / 2), (s_x - 0.1, s_y + rows.start + len(rows) / 2),
          f"rows {rows.start}–{rows.stop - 1}", fontsize=8, color=_LIVE, text_offset=(0.0, -0.15))

    # The running statistics of every row; the live tile updates those of its rows.
    started = {r for qb, kb in order[:live_index + 1] for r in range(qb * tile_size, min((qb + 1) * tile_size, T))}
    for offset, (symbol, code) in enumerate((("$m_i$", "running_max"), ("$\\ell_i$", "running_sum"))):
        x = stats_x + offset * 2.2
        for r in range(T):
            face = _LIVE if r in rows else PALETTE["weights"] if r in started else _LATER
            ax.add_patch(Rectangle((x, s_y + r), 1.4, 1, facecolor=face, edgecolor="#525252", linewidth=0.8))
        label(ax, x + 0.7, s_y - 0.45, symbol, fontsize=11, va="bottom")
        label(ax, x + 0.7, s_y + T + 0.3 + 0.75 * offset, code, fontsize=8, va="top", color="#525252",
              family="monospace")
    arrow(ax, (s_x + cols.stop + 0.1, s_y + rows.start + len(rows) / 2),
          (stats_x - 0.1, s_y + rows.start + len(rows) / 2), "update", fontsize=8, color=_LIVE,
          text_offset=(0.0, -0.15))
    for r in range(T):
        label(ax, stats_x + 4.6, s_y + r + 0.5, f"row {r}", fontsize=7, color="#525252", ha="left")

    ax.set_title(f"Tile {live_index + 1} of {len(order)}: query rows {rows.start}–{rows.stop - 1} × "
                 f"key columns {cols.start}–{cols.stop - 1}", fontsize=11, pad=2)
    handles = [Patch(facecolor=PALETTE["scores"], edgecolor="#525252", label="folded in, then discarded"),
               Patch(facecolor=_LIVE, edgecolor="#525252", label="live tile / rows it updates"),
               Patch(facecolor=PALETTE["weights"], edgecolor="#525252", label="row statistics so far"),
               Patch(facecolor=_LATER, edgecolor="#525252", label="not reached yet"),
               Patch(facecolor=_SKIPPED, edgecolor="#525252", label="future keys: never computed" if is_causal
                     else "unused")]
    ax.legend(handles=handles if is_causal else handles[:4], loc="lower center", ncols=3, fontsize=8,
              frameon=False, bbox_to_anchor=(0.5, 0.0))
    return fig
