"""Pictures of masks: the "mask, then softmax" schematic, and a mask drawn as two colours with a legend.

* :func:`mask_then_softmax_diagram` draws the data flow of causal masking for ``num_tokens`` tokens: the scores
  ``S``, the mask ``M`` (hidden cells grey), ``S`` with ``-inf`` where ``M`` hides, and the weights ``A`` after a
  softmax row by row (zeros above the diagonal).
* :func:`plot_mask` draws a real bool mask ``(rows, cols)`` (``True`` = hidden) with token labels: grey for hidden,
  white for visible, and a legend instead of a colour bar, since a mask has two values, not a scale.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, Rectangle

from ..plotting import CourseFigure, new_figure
from ._draw import PALETTE, arrow, diagram_canvas, label, tensor_grid

__all__ = ["mask_then_softmax_diagram", "draw_mask", "plot_mask"]

VISIBLE = "#ffffff"  # a score the query may use
HIDDEN = PALETTE["mask"]  # a score the mask hides


def _future(num_tokens: int) -> list[tuple[int, int]]:
    """The cells (row i, column j) with j > i: a query's future keys."""
    return [(i, j) for i in range(num_tokens) for j in range(i + 1, num_tokens)]


def mask_then_softmax_diagram(num_tokens: int = 6) -> CourseFigure:
    """The four steps of causal masking for ``num_tokens`` tokens, left to right.

    ``S`` (T, T) and the mask ``M`` (T, T) go into ``masked_fill``, which writes ``-inf`` where ``M`` is True;
    the softmax, row by row, turns each ``-inf`` into a weight of exactly 0, so ``A`` is zero above the diagonal.
    """
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or not 1 <= num_tokens <= 12:
        raise ValueError(f"num_tokens must be an int from 1 to 12 (one cell per token pair), got {num_tokens!r}")
    t = num_tokens
    gap = 4.2                     # room for an arrow and its text between two grids
    top = 2.2                     # room for the grid names
    left = 3.0                    # room for the row labels "query 0" ... left of S
    width = left + 4 * t + 3 * gap + 1.6  # and room on the right for the note under A
    fig, ax = diagram_canvas(width, t + top + 2.4)
    future = _future(t)
    blank = [["" for _ in range(t)] for _ in range(t)]
    minus_inf = [["−∞" if j > i else "" for j in range(t)] for i in range(t)]
    zeros = [["0" if j > i else "" for j in range(t)] for i in range(t)]
    xs = [left + k * (t + gap) for k in range(4)]

    tensor_grid(ax, xs[0], top, t, t, color=PALETTE["scores"], name="scores $S$", values=blank)
    tensor_grid(ax, xs[1], top, t, t, color=VISIBLE, name="mask $M$ (True = hide)", hidden=future)
    tensor_grid(ax, xs[2], top, t, t, color=PALETTE["scores"], name="$S$ with $-\\infty$ where $M$",
                hidden=future, values=minus_inf)
    tensor_grid(ax, xs[3], top, t, t, color=PALETTE["weights"], name="weights $A$", values=zeros)

    middle = top + t / 2
    label(ax, xs[0] + t + gap / 2, middle, "and", fontsize=11)
    arrow(ax, (xs[1] + t + 0.3, middle), (xs[2] - 0.3, middle), "masked_fill\n(M, −∞)")
    arrow(ax, (xs[2] + t + 0.3, middle), (xs[3] - 0.3, middle), "softmax\nrow by row")
    # What the rows mean, under the first and the last grid.
    label(ax, xs[0] - 0.35, top + 0.5, "query 0", fontsize=8, ha="right")
    label(ax, xs[0] - 0.35, top + t - 0.5, f"query {t - 1}", fontsize=8, ha="right")
    label(ax, xs[3] + t / 2, top + t + 1.3, "each row sums to 1;\n0 above the diagonal", fontsize=9)
    label(ax, xs[1] + t / 2, top + t + 1.3, "grey: query $i$ may not\nsee key $j > i$", fontsize=9)
    return fig


def draw_mask(ax: Axes, mask: torch.Tensor, row_labels: Sequence[str], col_labels: Sequence[str], *,
              title: str = "", xlabel: str = "key token", ylabel: str = "query token",
              legend: bool = True) -> None:
    """Draw a bool ``mask`` (rows, cols), ``True`` = hidden, on ``ax``: two colours and a legend below."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2:
        raise TypeError(f"mask must be a 2-d bool tensor (True = hidden), got {getattr(mask, 'dtype', type(mask))}")
    rows, cols = mask.shape
    if len(row_labels) != rows or len(col_labels) != cols:
        raise ValueError(f"row_labels/col_labels must have {rows}/{cols} entries, got "
                         f"{len(row_labels)}/{len(col_labels)}")
    ax.imshow(mask.detach().cpu().int().numpy(), cmap=ListedColormap([VISIBLE, HIDDEN]), vmin=0, vmax=1,
              aspect="auto", interpolation="nearest")
    for i in range(rows):  # thin cell borders, so white cells are visible on a white page
        for j in range(cols):
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#bdbdbd", linewidth=0.6))
    ax.set_xticks(range(cols), labels=list(col_labels), rotation=45, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(rows), labels=list(row_labels))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(handles=[Patch(facecolor=HIDDEN, edgecolor="#525252", label="hidden (True)"),
                           Patch(facecolor=VISIBLE, edgecolor="#525252", label="visible (False)")],
                  loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize=9)


def plot_mask(mask: torch.Tensor, row_labels: Sequence[str], col_labels: Sequence[str], *, title: str = "",
              width: float = 5.6, height: float = 4.2) -> CourseFigure:
    """A figure of one bool mask (``True`` = hidden), drawn by :func:`draw_mask`."""
    fig = new_figure(width, height)
    draw_mask(fig.axes[0], mask, row_labels, col_labels, title=title)
    return fig
