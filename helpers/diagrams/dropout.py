"""Dropout on the attention weights, as a picture: A, the keep-mask m, and A * m / (1 - p).

Drawn from the tensors themselves (their size and, if given, their values), so the picture always shows the
shapes and the draw the lesson computed.
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
_KEEP = "#a1d99b"      # m = 1
_CROSS = "#d62728"


def _cross(ax, x: float, y: float) -> None:
    ax.plot([x + 0.2, x + 0.8], [y + 0.2, y + 0.8], color=_CROSS, linewidth=1.2)
    ax.plot([x + 0.2, x + 0.8], [y + 0.8, y + 0.2], color=_CROSS, linewidth=1.2)


def dropout_diagram(attn_weights: torch.Tensor, keep: torch.Tensor, p: float) -> CourseFigure:
    """Three ``(T, T)`` grids: the causal weights A, the keep-mask m (1 keeps, 0 drops), the result.

    ``attn_weights``: ``(T, T)`` causal weights (zeros above the diagonal); ``keep``: ``(T, T)`` bool, True where
    a weight survives; ``p``: the dropout probability the draw used. Future cells (the causal mask) are grey in
    all three grids: A is 0 there, so the result is 0 whatever the mask drew, and the mask's own coin flips there
    are written in white. Dropped weights are crossed out; every survivor is written at its new value
    ``a / (1 - p)``.
    """
    if attn_weights.dim() != 2 or attn_weights.shape[0] != attn_weights.shape[1]:
        raise ValueError(f"attn_weights must have shape (T, T), got {tuple(attn_weights.shape)}")
    if keep.shape != attn_weights.shape or keep.dtype != torch.bool:
        raise ValueError(f"keep must be a bool tensor of shape {tuple(attn_weights.shape)}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p must be in [0, 1), got {p}")
    weights, keep = attn_weights.detach().cpu(), keep.cpu()
    num_tokens = weights.shape[0]
    future = causal_mask(num_tokens)
    hidden = [tuple(cell) for cell in future.nonzero().tolist()]
    gap, top = 2.8, 1.4
    fig, ax = diagram_canvas(3 * num_tokens + 2 * gap + 0.4, num_tokens + 3.4, inches_per_unit=0.5)
    a_x, m_x, out_x = 0.2, 0.2 + num_tokens + gap, 0.2 + 2 * (num_tokens + gap)
    shape = f"(T, T) = ({num_tokens}, {num_tokens})"

    def text(matrix, fmt):
        return [["" if future[i, j] else fmt(matrix[i, j]) for j in range(num_tokens)] for i in range(num_tokens)]

    tensor_grid(ax, a_x, top, num_tokens, num_tokens, color=PALETTE["weights"], name="A (weights)",
                shape_text=shape, hidden=hidden, values=text(weights, lambda v: f"{float(v):.2f}"))
    tensor_grid(ax, m_x, top, num_tokens, num_tokens, color=_KEEP, name="m (keep-mask)",
                shape_text=f"1 with probability 1 - p = {1 - p:g}", hidden=hidden,
                values=text(keep, lambda v: "1" if bool(v) else "0"))
    for i, j in hidden:  # the mask is drawn for every cell; above the diagonal it multiplies a 0
        ax.text(m_x + j + 0.5, top + i + 0.5, "1" if bool(keep[i, j]) else "0", ha="center", va="center",
                fontsize=8, color="white")
    dropped_weights = weights * keep / (1 - p)
    shown = text(dropped_weights, lambda v: f"{float(v):.2f}")
    dropped_cells = (~keep & ~future).nonzero().tolist()
    for i, j in dropped_cells:
        shown[i][j] = ""  # crossed out below instead
    tensor_grid(ax, out_x, top, num_tokens, num_tokens, color=PALETTE["weights"], name="Ã (A after dropout)",
                shape_text=shape, hidden=hidden, values=shown)
    for i, j in dropped_cells:  # white where m = 0; crossed out in the result, where the weight is now 0
        for x in (m_x, out_x):
            ax.add_patch(Rectangle((x + j, top + i), 1, 1, facecolor=_DROPPED, edgecolor="#525252", linewidth=0.8))
        _cross(ax, out_x + j, top + i)
    middle = top + num_tokens / 2
    label(ax, a_x + num_tokens + gap / 2, middle - 0.5, "⊙", fontsize=20)
    label(ax, a_x + num_tokens + gap / 2, middle + 0.6, "element-wise", fontsize=9)
    arrow(ax, (m_x + num_tokens + 0.3, middle), (out_x - 0.3, middle), f"÷ (1 - p) = x {1 / (1 - p):g}",
          fontsize=10)
    crossed = (Patch(facecolor=_DROPPED, edgecolor="#525252"),
               Line2D([], [], marker="x", markersize=9, markeredgewidth=1.4, color=_CROSS, linestyle="none"))
    ax.legend(handles=[Patch(facecolor=PALETTE["mask"], edgecolor="#525252"), crossed],
              labels=["future: a = 0 (causal mask), so it stays 0 whatever m is",
                      "dropped by this draw (m = 0): the weight becomes 0"],
              loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=2, frameon=False, fontsize=10)
    # Whole pixels at 100 dpi, so the figure's size prints the same everywhere.
    fig.set_size_inches(round(fig.get_figwidth() * 100) / 100, round(fig.get_figheight() * 100) / 100)
    return fig
