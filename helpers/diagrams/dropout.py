"""Dropout on the attention weights, as a picture: A ⊙ (keep / (1 - p)) = Ã, and the row sums of Ã.

Drawn from the tensors themselves (their size and values), so the picture always shows the shapes and the draw the
lesson computed: Ã and its row sums are the lesson's own ``dropped_weights``, not recomputed here. The middle grid
is the factor the code multiplies by, keep / (1 - p), so the picture reads the way the formula and the code are
written.
"""

from __future__ import annotations

import torch
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from ..masks import causal_mask
from ..plotting import CourseFigure
from ._draw import PALETTE, arrow, diagram_canvas, label, tensor_grid

__all__ = ["dropout_diagram"]

_DROPPED = "#ffffff"   # a weight that dropout removed (shown white, with a red cross)
_KEEP = "#a1d99b"      # keep = 1: the factor 1 / (1 - p)
_SUMS = "#fff7bc"      # the row sums of Ã (a lighter shade of the weights' colour)
_CROSS = "#d62728"
_ON_GREY = "#252525"   # text on the grey future cells: dark, so it stays readable
_FONT = 12             # grid names; the numbers in the cells are 0.8 of it


def _cross(ax, x: float, y: float) -> None:
    ax.plot([x + 0.2, x + 0.8], [y + 0.2, y + 0.8], color=_CROSS, linewidth=1.4)
    ax.plot([x + 0.2, x + 0.8], [y + 0.8, y + 0.2], color=_CROSS, linewidth=1.4)


def dropout_diagram(attn_weights: torch.Tensor, keep: torch.Tensor, p: float,
                    dropped_weights: torch.Tensor) -> CourseFigure:
    """``A ⊙ (keep / (1 - p)) = Ã``, then each row of Ã summed: three ``(T, T)`` grids and a ``(T, 1)`` column.

    ``attn_weights``: ``(T, T)`` causal weights (zeros above the diagonal); ``keep``: ``(T, T)`` bool, True where
    a weight survives; ``p``: the dropout probability the draw used; ``dropped_weights``: ``(T, T)``, the Ã the
    caller computed, drawn as it is (a wrong Ã shows up wrong) and summed for the last column. Future cells (the
    causal mask) are grey in all three grids: A is 0 there, so Ã is 0 whatever the coin flip was (the flips are
    still written, in dark text). keep = 0 is white; a visible weight that is 0 in Ã is crossed out; every other
    cell of Ã is written at its value. The row sums are of the unrounded Ã, so they can differ by 0.01 from the sum
    of its rounded cells; the column says so ("summed before rounding").
    """
    if attn_weights.dim() != 2 or attn_weights.shape[0] != attn_weights.shape[1]:
        raise ValueError(f"attn_weights must have shape (T, T), got {tuple(attn_weights.shape)}")
    if keep.shape != attn_weights.shape or keep.dtype != torch.bool:
        raise ValueError(f"keep must be a bool tensor of shape {tuple(attn_weights.shape)}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p must be in [0, 1), got {p}")
    if dropped_weights.shape != attn_weights.shape:
        raise ValueError(f"dropped_weights must have shape {tuple(attn_weights.shape)}, "
                         f"got {tuple(dropped_weights.shape)}")
    weights, keep, dropped_weights = attn_weights.detach().cpu(), keep.cpu(), dropped_weights.detach().cpu()
    num_tokens = weights.shape[0]
    factor = 1 / (1 - p)
    future = causal_mask(num_tokens)
    hidden = [tuple(cell) for cell in future.nonzero().tolist()]
    gap, sum_gap, top = 2.4, 2.8, 1.5
    width = 0.2 + 3 * num_tokens + 2 * gap + sum_gap + 1 + 1.2  # room for the name of the last column
    fig, ax = diagram_canvas(width, num_tokens + 4.2, inches_per_unit=0.5)
    a_x = 0.2
    m_x = a_x + num_tokens + gap
    out_x = m_x + num_tokens + gap
    sum_x = out_x + num_tokens + sum_gap
    shape = f"(T, T) = ({num_tokens}, {num_tokens})"

    def text(matrix, fmt):
        return [["" if future[i, j] else fmt(matrix[i, j]) for j in range(num_tokens)] for i in range(num_tokens)]

    tensor_grid(ax, a_x, top, num_tokens, num_tokens, color=PALETTE["weights"], name="A (weights)",
                shape_text=shape, hidden=hidden, values=text(weights, lambda v: f"{float(v):.2f}"), fontsize=_FONT)
    tensor_grid(ax, m_x, top, num_tokens, num_tokens, color=_KEEP, name="keep / (1 - p)",
                shape_text=f"{factor:g} with probability 1 - p = {1 - p:g}, else 0", hidden=hidden,
                values=text(keep, lambda v: f"{factor:g}" if bool(v) else "0"), fontsize=_FONT)
    for i, j in hidden:  # a coin is flipped for every cell; above the diagonal it multiplies a 0
        ax.text(m_x + j + 0.5, top + i + 0.5, f"{factor:g}" if bool(keep[i, j]) else "0", ha="center",
                va="center", fontsize=_FONT * 0.8, color=_ON_GREY)
    shown = text(dropped_weights, lambda v: f"{float(v):.2f}")
    zeroed_cells = ((dropped_weights == 0) & ~future).nonzero().tolist()  # as the caller's Ã has them
    for i, j in zeroed_cells:
        shown[i][j] = ""  # crossed out below instead
    tensor_grid(ax, out_x, top, num_tokens, num_tokens, color=PALETTE["weights"], name="Ã (A after dropout)",
                shape_text=shape, hidden=hidden, values=shown, fontsize=_FONT)
    for i, j in (~keep & ~future).nonzero().tolist():  # keep = 0: white
        ax.add_patch(Rectangle((m_x + j, top + i), 1, 1, facecolor=_DROPPED, edgecolor="#525252", linewidth=0.8))
    for i, j in zeroed_cells:  # a weight that is now 0: white and crossed out
        ax.add_patch(Rectangle((out_x + j, top + i), 1, 1, facecolor=_DROPPED, edgecolor="#525252", linewidth=0.8))
        _cross(ax, out_x + j, top + i)
    row_sums = dropped_weights.sum(dim=-1)
    tensor_grid(ax, sum_x, top, num_tokens, 1, color=_SUMS, name="row sums", shape_text="(T, 1)",
                values=[[f"{float(s):.2f}"] for s in row_sums], fontsize=_FONT)
    label(ax, sum_x + 0.5, top + num_tokens + 0.85, "summed before\nrounding", fontsize=10, va="top",
          color="#525252")
    middle = top + num_tokens / 2
    label(ax, a_x + num_tokens + gap / 2, middle, "⊙", fontsize=22)
    label(ax, a_x + num_tokens + gap / 2, middle + 0.9, "element-\nwise", fontsize=9)
    label(ax, m_x + num_tokens + gap / 2, middle, "=", fontsize=22)
    arrow(ax, (out_x + num_tokens + 0.3, middle), (sum_x - 0.3, middle), "sum each row", fontsize=10)
    crossed = (Patch(facecolor=_DROPPED, edgecolor="#525252"),
               Line2D([], [], marker="x", markersize=9, markeredgewidth=1.4, color=_CROSS, linestyle="none"))
    ax.legend(handles=[Patch(facecolor=_KEEP, edgecolor="#525252"), crossed,
                       Patch(facecolor=PALETTE["mask"], edgecolor="#525252")],
              labels=[f"kept (keep = 1): weight x {factor:g}",
                      "dropped (keep = 0): white; crossed out in Ã, now 0",
                      "future (causal mask): a = 0, stays 0 whatever the flip"],
              loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=3, frameon=False, fontsize=10)
    # Whole pixels at 100 dpi, so the figure's size prints the same everywhere.
    fig.set_size_inches(round(fig.get_figwidth() * 100) / 100, round(fig.get_figheight() * 100) / 100)
    return fig
