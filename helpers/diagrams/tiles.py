"""The tiles of FlashAttention: the (T, T) scaled scores cut into blocks, one block computed at a time.

``tiles_diagram(num_tokens, tile_size, query_block, key_block)`` draws the queries Q down the left, the keys as
Kᵀ along the top and the values as Vᵀ along the bottom (key j in column j, like S), the scaled scores S/sqrt(d_k)
cut into ``tile_size`` x ``tile_size`` tiles (folded in, live, not reached yet, and for causal attention the tiles
above the diagonal that are never computed, told apart from the cells masked inside a diagonal tile), and per query
row the running state m_i, ell_i and acc_i, with the rows the live tile updates highlighted. The tiles are computed
one per step, in order; steps count from 0, like rows.
"""

from __future__ import annotations

import math

from matplotlib.patches import Patch, Rectangle

from ..plotting import CourseFigure
from ._draw import PALETTE, arrow, diagram_canvas, label, tensor_grid

__all__ = ["tiles_diagram"]

_LIVE = "#ef3b2c"       # the tile being computed (a deeper shade of the scores' colour)
_FOLDED_HATCH = "...."  # tiles already folded in: the scores' colour, dotted (gone from memory)
_LATER = "#ffffff"      # tiles not reached yet, rows not started
_NEVER = "#ffffff"      # causal: tiles wholly in the future, never computed (drawn hatched)
_HATCH = "#bdbdbd"
_MASKED = PALETTE["mask"]     # inside a diagonal tile: computed, then set to -inf
_FINISHED = PALETTE["context"]  # rows whose context vectors z_i are written out


def _tile_order(num_blocks: int, is_causal: bool) -> list[tuple[int, int]]:
    """(query block, key block) pairs in the order tiled attention visits them."""
    return [(qb, kb) for qb in range(num_blocks) for kb in range(num_blocks) if not (is_causal and kb > qb)]


def _cell(ax, x: float, y: float, face: str, **kwargs) -> None:
    ax.add_patch(Rectangle((x, y), 1, 1, facecolor=face, edgecolor=kwargs.pop("edgecolor", "#bdbdbd"),
                           linewidth=kwargs.pop("linewidth", 0.5), **kwargs))


def tiles_diagram(num_tokens: int = 8, tile_size: int = 2, query_block: int = 2, key_block: int = 1, *,
                  is_causal: bool = True, d_k: int = 4, d_v: int = 4) -> CourseFigure:
    """Schematic of tiled attention while tile (``query_block``, ``key_block``) is being folded in.

    Sizes are in tokens: ``num_tokens`` rows and columns of S, tiles of ``tile_size`` (the last may be
    shorter); ``d_k`` is the width drawn for Q and Kᵀ, ``d_v`` that of Vᵀ and of each row's accumulator.
    Blocks and steps count from 0.
    """
    for name, value in (("num_tokens", num_tokens), ("tile_size", tile_size), ("d_k", d_k), ("d_v", d_v)):
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
    k_y = 1.6                                        # top of K^T, under the title
    s_x, s_y = d_k + 2.5, k_y + d_k + 1.5            # top-left corner of S
    v_y = s_y + T + 1.4                              # top of V^T, under S
    stats_x = s_x + T + 3.2                          # the m_i, ell_i and acc_i columns
    acc_x = stats_x + 4.0
    fig, ax = diagram_canvas(acc_x + d_v + 3.0, v_y + d_v + 4.4)

    # Q down the left, K^T along the top, V^T along the bottom; what the live tile reads is outlined in red.
    tensor_grid(ax, 0.5, s_y, T, d_k, color=PALETTE["queries"], name="Q", shape_text=f"({T}, {d_k})")
    for y, rows_drawn, color, name in ((k_y, d_k, PALETTE["keys"], "Kᵀ"), (v_y, d_v, PALETTE["values"], "Vᵀ")):
        tensor_grid(ax, s_x, y, rows_drawn, T, color=color, name="", shape_text="")
        label(ax, s_x - 0.4, y + rows_drawn / 2, name, fontsize=10, fontweight="bold", ha="right")
        label(ax, s_x + T + 0.3, y + rows_drawn / 2, f"({rows_drawn}, {T})", fontsize=8.5, color="#525252",
              ha="left")
        ax.add_patch(Rectangle((s_x + cols.start, y), len(cols), rows_drawn, fill=False, edgecolor=_LIVE,
                               linewidth=2.5))
    ax.add_patch(Rectangle((0.5, s_y + rows.start), d_k, len(rows), fill=False, edgecolor=_LIVE, linewidth=2.5))

    # S, tile by tile.
    for qb in range(num_blocks):
        for kb in range(num_blocks):
            r0, r1 = qb * tile_size, min((qb + 1) * tile_size, T)
            c0, c1 = kb * tile_size, min((kb + 1) * tile_size, T)
            never = is_causal and kb > qb
            if not never:
                index = order.index((qb, kb))
                face = PALETTE["scores"] if index < live_index else _LIVE if index == live_index else _LATER
                masked = _MASKED if index <= live_index else _LATER
            for r in range(r0, r1):
                for c in range(c0, c1):
                    if never:
                        _cell(ax, s_x + c, s_y + r, _NEVER, hatch="////", edgecolor=_HATCH)
                    elif is_causal and c > r:
                        _cell(ax, s_x + c, s_y + r, masked)
                    else:
                        folded = not never and index < live_index
                        _cell(ax, s_x + c, s_y + r, face, hatch=_FOLDED_HATCH if folded else None)
            ax.add_patch(Rectangle((s_x + c0, s_y + r0), c1 - c0, r1 - r0, fill=False, edgecolor="#525252",
                                   linewidth=1.2))
    label(ax, s_x + T / 2, s_y - 0.45, f"$S/\\sqrt{{d_k}}$ ({T}, {T}) in tiles of {tile_size} × {tile_size}",
          fontsize=10, fontweight="bold", va="bottom")
    label(ax, s_x + T / 2, v_y + d_v + 0.3, "(V drawn transposed: key j is column j, as in S)", fontsize=8,
          color="#525252", va="top")
    arrow(ax, (0.5 + d_k + 0.1, s_y + rows.start + len(rows) / 2), (s_x - 0.1, s_y + rows.start + len(rows) / 2),
          f"rows {rows.start}–{rows.stop - 1}", fontsize=8, color=_LIVE, text_offset=(0.0, -0.15))

    # The running state of every row; the live tile updates that of its rows.
    finished = {r for qb, _ in order[:live_index] if qb != query_block
                for r in range(qb * tile_size, min((qb + 1) * tile_size, T))}
    columns = ((stats_x, 1, "$m_i$", "running_max"), (stats_x + 2.0, 1, "$\\ell_i$", "running_sum"),
               (acc_x, d_v, "$\\mathrm{acc}_i$", "accumulator"))
    for offset, (x, width, symbol, code) in enumerate(columns):
        for r in range(T):
            face = _LIVE if r in rows else _FINISHED if r in finished else _LATER
            for c in range(width):
                _cell(ax, x + c, s_y + r, face, edgecolor="#525252", linewidth=0.8)
        label(ax, x + width / 2, s_y - 0.45, symbol, fontsize=11, va="bottom")
        # a key under the columns, one line each, aligned: symbol = name in the code
        label(ax, stats_x, s_y + T + 0.5 + 0.9 * offset, f"{symbol} = ", fontsize=9, va="top", ha="left")
        label(ax, stats_x + 1.9, s_y + T + 0.5 + 0.9 * offset, code, fontsize=9, va="top", ha="left",
              color="#525252", family="monospace")
    # from S's right edge, so that the arrow crosses no tile the live one does not touch
    arrow(ax, (s_x + T + 0.1, s_y + rows.start + len(rows) / 2),
          (stats_x - 0.1, s_y + rows.start + len(rows) / 2), "update", fontsize=8, color=_LIVE,
          text_offset=(0.0, -0.15))
    for r in range(T):
        label(ax, acc_x + d_v + 0.3, s_y + r + 0.5, f"row {r}", fontsize=9, color="#525252", ha="left")

    title = (f"Step {live_index} (of steps 0–{len(order) - 1}): the tile of query rows "
             f"{rows.start}–{rows.stop - 1} × key columns {cols.start}–{cols.stop - 1}")
    ax.set_title(title, fontsize=11, pad=2, visible=False)  # kept for inspection; drawn inside the canvas below
    label(ax, (acc_x + d_v + 3.0) / 2, 0.7, title, fontsize=11)
    handles = [Patch(facecolor=PALETTE["scores"], edgecolor="#525252", hatch=_FOLDED_HATCH,
                     label="folded in, then discarded"),
               Patch(facecolor=_LIVE, edgecolor="#525252", label="live tile / rows it updates"),
               Patch(facecolor=_LATER, edgecolor="#525252", label="not reached yet"),
               Patch(facecolor=_FINISHED, edgecolor="#525252", label="row done: $z_i = \\mathrm{acc}_i / \\ell_i$"),
               Patch(facecolor=_LIVE, fill=False, edgecolor=_LIVE, linewidth=2, label="read by the live tile")]
    if is_causal:
        handles += [Patch(facecolor=_MASKED, edgecolor="#525252", label="computed, then masked to $-\\infty$"),
                    Patch(facecolor=_NEVER, hatch="////", edgecolor=_HATCH, label="never computed (future keys)")]
    ax.legend(handles=handles, loc="lower center", ncols=3, fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.score_origin = (s_x, s_y)  # where S's cell (0, 0) is drawn, in cell units (for inspection)
    return fig
