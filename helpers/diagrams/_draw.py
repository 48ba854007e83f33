"""Drawing primitives shared by the schematic diagrams: a canvas, tensors as grids of cells, arrows, labels.

Coordinates are in "cell units": one cell of a tensor is 1 x 1, the y-axis points down (row 0 at the top, as a
matrix is printed), and the canvas is sized so that one unit is the same on every diagram.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.patches import FancyArrowPatch, Rectangle

from ..plotting import CourseFigure

__all__ = ["PALETTE", "diagram_canvas", "tensor_grid", "arrow", "label"]

# One colour per kind of tensor, the same in every diagram of the course.
PALETTE = {
    "inputs": "#c6dbef",    # X, token embeddings
    "queries": "#fdd0a2",   # Q
    "keys": "#c7e9c0",      # K
    "values": "#dadaeb",    # V
    "scores": "#fcbba1",    # S
    "weights": "#fee391",   # A
    "context": "#d9d9d9",   # Z
    "mask": "#969696",      # M (hidden cells)
    "weight_matrix": "#f0f0f0",  # W_q, W_k, W_v, W_o
}


def diagram_canvas(width_units: float, height_units: float, inches_per_unit: float = 0.32,
                   max_width_in: float = 12.0) -> tuple[CourseFigure, Axes]:
    """An empty figure whose single axes spans ``width_units`` x ``height_units`` cells, y pointing down.

    The figure is at most ``max_width_in`` inches wide (the notebook's width at 80 dpi); a wider diagram is
    scaled down as a whole, so its proportions stay true.
    """
    if width_units <= 0 or height_units <= 0:
        raise ValueError(f"width_units and height_units must be positive, got {width_units}, {height_units}")
    scale = min(inches_per_unit, max_width_in / width_units)
    fig = CourseFigure(figsize=(width_units * scale, height_units * scale))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width_units)
    ax.set_ylim(height_units, 0)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def tensor_grid(ax: Axes, x: float, y: float, rows: int, cols: int, *, color: str = PALETTE["inputs"],
                name: str = "", shape_text: str | None = None, hidden: Sequence[tuple[int, int]] = (),
                values: Sequence[Sequence[str]] | None = None, fontsize: float = 10) -> tuple[float, float]:
    """Draw a ``rows`` x ``cols`` tensor with its top-left corner at (x, y); return its centre.

    ``name`` goes above the grid and ``shape_text`` (default ``"(rows, cols)"``) below it. Cells listed in
    ``hidden`` are greyed out (a mask); ``values``, if given, are written into the cells.
    """
    hidden_set = set(hidden)
    for r in range(rows):
        for c in range(cols):
            face = PALETTE["mask"] if (r, c) in hidden_set else color
            ax.add_patch(Rectangle((x + c, y + r), 1, 1, facecolor=face, edgecolor="#525252", linewidth=0.8))
            if values is not None:
                ax.text(x + c + 0.5, y + r + 0.5, values[r][c], ha="center", va="center", fontsize=fontsize * 0.8)
    if name:
        ax.text(x + cols / 2, y - 0.35, name, ha="center", va="bottom", fontsize=fontsize, fontweight="bold")
    shape_text = f"({rows}, {cols})" if shape_text is None else shape_text
    if shape_text:
        ax.text(x + cols / 2, y + rows + 0.3, shape_text, ha="center", va="top", fontsize=fontsize * 0.85,
                color="#525252")
    return x + cols / 2, y + rows / 2


def arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], text: str = "", *,
          fontsize: float = 10, color: str = "#252525", text_offset: tuple[float, float] = (0.0, -0.3)) -> None:
    """An arrow from ``start`` to ``end`` (cell units), with ``text`` near its middle (the operation)."""
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color=color, linewidth=1.2,
                                 shrinkA=2, shrinkB=2))
    if text:
        mid = ((start[0] + end[0]) / 2 + text_offset[0], (start[1] + end[1]) / 2 + text_offset[1])
        ax.text(*mid, text, ha="center", va="bottom", fontsize=fontsize, color=color)


def label(ax: Axes, x: float, y: float, text: str, *, fontsize: float = 10, **kwargs) -> None:
    """Free text at (x, y), centred."""
    kwargs.setdefault("ha", "center")
    kwargs.setdefault("va", "center")
    ax.text(x, y, text, fontsize=fontsize, **kwargs)
