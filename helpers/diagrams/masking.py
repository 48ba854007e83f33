"""Pictures of masks: the "mask, then softmax" schematic, and a mask drawn as two (or three) colours with a legend.

* :func:`mask_then_softmax_diagram` draws the data flow of causal masking for ``num_tokens`` tokens: the scores
  ``S`` and the mask ``M`` (hidden cells grey) go into ``masked_fill``, which writes ``-inf`` where ``M`` hides; a
  softmax of the scaled masked scores, row by row, gives the weights ``A`` (zeros above the diagonal).
  Given ``tokens``, the rows of ``S`` and its columns carry them too, numbered like the code (``0: Your``).
* :func:`plot_mask` / :func:`draw_mask` draw a real bool mask ``(rows, cols)`` (``True`` = hidden) with token labels
  numbered from 0 (``0: Your``, so "row 0" and "query 0" point at the same place): grey for hidden, white for
  visible, and a legend instead of a colour bar, since a mask has two values, not a scale. Given ``padding``, the
  cells hidden because their key is padding get a darker shade of their own.
* :func:`numbered` turns token labels into ``i: token`` labels, for every picture of the lesson.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch, Rectangle

from ..plotting import CourseFigure, new_figure
from ._draw import PALETTE, arrow, diagram_canvas, label, tensor_grid

__all__ = ["mask_then_softmax_diagram", "draw_mask", "plot_mask", "numbered"]

VISIBLE = "#ffffff"  # a score the query may use
HIDDEN = PALETTE["mask"]  # a score the mask hides
PADDING = "#4d4d4d"  # a score hidden because its key is padding (darker, so the two reasons stay apart)


def numbered(labels: Sequence[str]) -> list[str]:
    """``["Your", "journey"]`` -> ``["0: Your", "1: journey"]``: a label that names both the index and the token."""
    return [f"{index}: {label}" for index, label in enumerate(labels)]


def _future(num_tokens: int) -> list[tuple[int, int]]:
    """The cells (row i, column j) with j > i: a query's future keys."""
    return [(i, j) for i in range(num_tokens) for j in range(i + 1, num_tokens)]


def mask_then_softmax_diagram(num_tokens: int = 6, tokens: Sequence[str] | None = None) -> CourseFigure:
    """Causal masking for ``num_tokens`` tokens, left to right: two operations on four ``(T, T)`` matrices.

    The scores ``S`` and the mask ``M`` go into ``masked_fill``, which writes ``-inf`` where ``M`` is True; the
    softmax of ``S / sqrt(d_k)``, row by row, turns each ``-inf`` into a weight of exactly 0, so ``A`` is zero
    above the diagonal. Rows are queries ``i``, columns keys ``j``, both numbered from 0. ``tokens`` (one per
    position, optional) label the rows and columns of ``S`` as ``i: token``.
    """
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or not 1 <= num_tokens <= 12:
        raise ValueError(f"num_tokens must be an int from 1 to 12 (one cell per token pair), got {num_tokens!r}")
    if tokens is not None and len(tokens) != num_tokens:
        raise ValueError(f"tokens must have num_tokens={num_tokens} entries, got {len(tokens)}")
    t = num_tokens
    names = numbered(tokens) if tokens is not None else [str(i) for i in range(t)]
    char = 0.32                                  # width of one 10-pt character, in cell units
    above = char * max(len(token) for token in tokens) + 0.4 if tokens is not None else 0.0  # key tokens
    gap = 4.6                                    # room for an arrow and its text between two grids
    top = 2.5 + above                            # grid names, key numbers (and key tokens)
    left = 2.0 + char * max(len(name) for name in names)  # the row labels and "query i" left of S
    width = left + 4 * t + 3 * gap + max(0.6, 3.6 - t / 2)  # room for the notes under a narrow A
    fig, ax = diagram_canvas(width, t + top + 2.7)
    future = _future(t)
    blank = [["" for _ in range(t)] for _ in range(t)]
    minus_inf = [["−∞" if j > i else "" for j in range(t)] for i in range(t)]
    zeros = [["0" if j > i else "" for j in range(t)] for i in range(t)]
    xs = [left + k * (t + gap) for k in range(4)]
    size = 12  # names 12 pt, cell text 9.6 pt, shapes 10.2 pt: readable when the figure is scaled to 12 in

    grids = [("scores $S = QK^\\top$", PALETTE["scores"], (), blank),
             ("mask $M$ (True = hide)", VISIBLE, future, None),
             ("masked scores", PALETTE["scores"], future, minus_inf),
             ("weights $A$", PALETTE["weights"], (), zeros)]
    for x, (name, colour, hidden, values) in zip(xs, grids):
        tensor_grid(ax, x, top, t, t, color=colour, hidden=hidden, values=values, fontsize=size)
        label(ax, x + t / 2, top - 0.95 - above, name, fontsize=size, fontweight="bold", va="bottom")

    # Keys are columns, queries rows: number them on every grid, as the code counts (from 0).
    for x in xs:
        for j in range(t):
            label(ax, x + j + 0.5, top - 0.35, str(j), fontsize=10, color="#525252")
    if tokens is not None:  # the key tokens once, above S's numbers
        for j, token in enumerate(tokens):
            label(ax, xs[0] + j + 0.5, top - 0.75, token, fontsize=10, color="#525252", rotation=90, va="bottom")
    for i in range(t):
        label(ax, xs[0] - 0.35, top + i + 0.5, names[i], fontsize=10, color="#525252", ha="right")
    label(ax, 0.6, top + t / 2, "query $i$", fontsize=11, rotation=90)
    label(ax, xs[0] + t / 2, top + t + 1.45, "key $j$ →", fontsize=11)

    middle = top + t / 2
    label(ax, xs[0] + t + gap / 2, middle, "and", fontsize=12)
    arrow(ax, (xs[1] + t + 0.3, middle), (xs[2] - 0.3, middle), "masked_fill\n(M, −∞)", fontsize=11)
    arrow(ax, (xs[2] + t + 0.3, middle), (xs[3] - 0.3, middle), "softmax of\n(masked $S$)\n$/\\sqrt{d_k}$,\nrow by row",
          fontsize=11)
    label(ax, xs[1] + t / 2, top + t + 1.7, "grey: query $i$ may not\nsee key $j > i$", fontsize=11)
    label(ax, xs[2] + t / 2, top + t + 1.7, "$S$, with $-\\infty$\nwhere $M$ is True", fontsize=11)
    label(ax, xs[3] + t / 2, top + t + 1.7, "each row sums to 1;\n0 above the diagonal", fontsize=11)
    return fig


def draw_mask(ax: Axes, mask: torch.Tensor, row_labels: Sequence[str], col_labels: Sequence[str], *,
              title: str = "", xlabel: str = "key $j$", ylabel: str = "query $i$",
              legend: bool = True, padding: torch.Tensor | None = None, numbered_labels: bool = True) -> None:
    """Draw a bool ``mask`` (rows, cols), ``True`` = hidden, on ``ax``: two colours and a legend.

    With ``numbered_labels`` the tick labels read ``0: Your``, ``1: journey``, ... (row ``i`` is query ``i``).

    ``padding``: optional bool ``(cols,)``, True where the key is a padding token. Hidden cells in those columns
    get a darker shade and their own legend entry ("hidden: padding key"); the other hidden cells are labelled
    "hidden: future key".
    """
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2:
        raise TypeError(f"mask must be a 2-d bool tensor (True = hidden), got {getattr(mask, 'dtype', type(mask))}")
    rows, cols = mask.shape
    if len(row_labels) != rows or len(col_labels) != cols:
        raise ValueError(f"row_labels/col_labels must have {rows}/{cols} entries, got "
                         f"{len(row_labels)}/{len(col_labels)}")
    codes = mask.detach().cpu().int()  # 0 visible, 1 hidden
    colours = [VISIBLE, HIDDEN]
    handles = [Patch(facecolor=HIDDEN, edgecolor="#525252", label="hidden (True)"),
               Patch(facecolor=VISIBLE, edgecolor="#525252", label="visible (False)")]
    if padding is not None:
        if not isinstance(padding, torch.Tensor) or padding.dtype != torch.bool or tuple(padding.shape) != (cols,):
            raise TypeError(f"padding must be a bool tensor of shape ({cols},), True where the key is padding")
        codes = codes + (mask.detach().cpu() & padding.detach().cpu()[None, :]).int()  # 2 = hidden, padding key
        colours.append(PADDING)
        handles = [Patch(facecolor=HIDDEN, edgecolor="#525252", label="hidden: future key"),
                   Patch(facecolor=PADDING, edgecolor="#525252", label="hidden: padding key"),
                   Patch(facecolor=VISIBLE, edgecolor="#525252", label="visible")]
    ax.imshow(codes.numpy(), cmap=ListedColormap(colours), vmin=0, vmax=len(colours) - 1,
              aspect="auto", interpolation="nearest")
    for i in range(rows):  # thin cell borders, so white cells are visible on a white page
        for j in range(cols):
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#bdbdbd", linewidth=0.6))
    if numbered_labels:
        row_labels, col_labels = numbered(row_labels), numbered(col_labels)
    ax.set_xticks(range(cols), labels=list(col_labels), rotation=45, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(rows), labels=list(row_labels))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize=10)


def plot_mask(mask: torch.Tensor, row_labels: Sequence[str], col_labels: Sequence[str], *, title: str = "",
              width: float = 5.6, height: float = 4.2) -> CourseFigure:
    """A figure of one bool mask (``True`` = hidden), drawn by :func:`draw_mask`."""
    fig = new_figure(width, height)
    draw_mask(fig.axes[0], mask, row_labels, col_labels, title=title)
    return fig
