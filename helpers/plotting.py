"""Labelled heatmaps of attention matrices (matplotlib, no pyplot state).

Figures are built with ``matplotlib.figure.Figure`` directly, so nothing is
drawn or shown as a side effect: a notebook displays a figure by ending a cell
with it, and a widget renders it to PNG bytes and swaps them in place.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import torch
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import Rectangle

__all__ = ["CourseFigure", "Heatmap", "Bars", "CellValues", "CellText", "new_figure", "plot_heatmap",
           "figure_to_png"]


def _as_float_tensor(name: str, value, ndim: int) -> torch.Tensor:
    """``value`` as a CPU float32 tensor of ``ndim`` dimensions (1: bars, 2: a heatmap), or a clear error."""
    shape_text = {1: "a 1-d tensor or list of numbers", 2: "a 2-d tensor or nested list of numbers"}[ndim]
    if isinstance(value, torch.Tensor):
        value = value.detach().to("cpu", torch.float32)
    else:
        try:
            value = torch.as_tensor(value, dtype=torch.float32)
        except (TypeError, ValueError) as error:
            raise TypeError(f"{name} must be {shape_text} ({error})") from None
    if value.dim() != ndim or value.numel() == 0:
        expected = "1-d and non-empty" if ndim == 1 else "2-d (rows, columns)"
        raise ValueError(f"{name} must be {expected}, got shape {tuple(value.shape)}")
    return value


def _as_matrix(name: str, matrix) -> torch.Tensor:
    return _as_float_tensor(name, matrix, 2)


def _as_vector(name: str, values) -> torch.Tensor:
    return _as_float_tensor(name, values, 1)


class CourseFigure(Figure):
    """A matplotlib ``Figure`` that displays itself as a PNG when a notebook cell ends with it.

    It is not registered with pyplot, so it is never shown (or piled up) by accident.
    """

    def _repr_png_(self) -> bytes:
        return figure_to_png(self)


def new_figure(width: float = 5.0, height: float = 4.2, ncols: int = 1, nrows: int = 1) -> CourseFigure:
    """A fresh :class:`CourseFigure` with a grid of ``nrows`` x ``ncols`` axes (``fig.axes``, row by row)."""
    for name, count in (("ncols", ncols), ("nrows", nrows)):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"{name} must be a positive int, got {count!r}")
    fig = CourseFigure(figsize=(width, height), layout="constrained")
    fig.subplots(nrows, ncols)
    return fig


class Heatmap:
    """A labelled heatmap on an existing ``Axes`` that can be redrawn in place.

    Args:
        ax: where to draw.
        matrix: ``(rows, cols)`` tensor or nested list, e.g. attention weights ``(T_q, T_k)``.
        row_labels, col_labels: one label per row / column (token strings).
        title, xlabel, ylabel: text around the picture.
        vmin, vmax: fixed colour range; ``None`` follows the data on every update.
        annotate: write each value in its cell with ``fmt``.
        colorbar_label: label of the colour bar.
        value_fontsize: size of the numbers in the cells; default 9 points (7.5 beyond 8 columns).
    """

    def __init__(self, ax: Axes, matrix, row_labels: Sequence[str], col_labels: Sequence[str], *,
                 title: str = "", xlabel: str = "key token", ylabel: str = "query token",
                 cmap: str = "viridis", vmin: float | None = None, vmax: float | None = None,
                 annotate: bool = True, fmt: str = "{:.2f}", colorbar_label: str = "",
                 value_fontsize: float | None = None):
        data = _as_matrix("matrix", matrix)
        rows, cols = data.shape
        if len(row_labels) != rows or len(col_labels) != cols:
            raise ValueError(
                f"row_labels/col_labels must have {rows}/{cols} entries to match matrix shape "
                f"{tuple(data.shape)}, got {len(row_labels)}/{len(col_labels)}"
            )
        self.ax, self.fmt = ax, fmt
        self._fixed_range = (vmin, vmax)
        # zorder 2: painted after the axis (whose tick marks touch the picture's edge), before the frame
        # (2.5), so a LiveFigure can repaint the picture alone and get the same pixels as a full draw.
        # "nearest": one flat colour per cell, and no resampling filter to run on every redraw.
        self.image = ax.imshow(data.numpy(), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", zorder=2,
                               interpolation="nearest")
        ax.set_xticks(range(cols), labels=list(col_labels), rotation=45, ha="right", rotation_mode="anchor")
        ax.set_yticks(range(rows), labels=list(row_labels))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        self.colorbar = ax.figure.colorbar(self.image, ax=ax, label=colorbar_label)
        # Up to 8 columns fit 9-point numbers; wider heatmaps get smaller ones so neighbours do not touch.
        if value_fontsize is None:
            value_fontsize = 9 if cols <= 8 else 7.5
        self.values = CellValues(ax, rows, cols, fontsize=value_fontsize) if annotate else None
        self.texts = self.values.cells if annotate else None  # texts[i][j]: the number in cell (i, j)
        self._row_outline: Rectangle | None = None
        self._write_values(data)
        _animate(self.image, ax.title, *([self.values] if annotate else []))

    def _write_values(self, data: torch.Tensor) -> None:
        if self.texts is None:
            return
        low, high = self.image.get_clim()
        middle = (low + high) / 2
        for i, row in enumerate(self.texts):
            for j, text in enumerate(row):
                value = float(data[i, j])
                text.set_text(self.fmt.format(value))
                # Light text on the dark end of viridis, dark text on the light end.
                text.set_color("white" if value < middle else "black")

    def outline_row(self, row: int | None, color: str = "red") -> None:
        """Draw a box around one row (e.g. the selected query); ``None`` removes it."""
        rows, cols = self.image.get_array().shape
        if row is None:
            if self._row_outline is not None:
                self._row_outline.set_visible(False)
            return
        if not 0 <= row < rows:
            raise ValueError(f"row must be in [0, {rows}), got {row}")
        if self._row_outline is None:
            self._row_outline = self.ax.add_patch(
                Rectangle((-0.5, row - 0.5), cols, 1, fill=False, edgecolor=color, linewidth=2.5, zorder=2.2))
            _animate(self._row_outline)
        self._row_outline.set_y(row - 0.5)
        self._row_outline.set_visible(True)

    def update(self, matrix, title: str | None = None) -> None:
        """Show new values (same shape) without rebuilding the axes."""
        data = _as_matrix("matrix", matrix)
        if tuple(data.shape) != self.image.get_array().shape:
            raise ValueError(
                f"matrix must keep the shape {self.image.get_array().shape}, got {tuple(data.shape)}"
            )
        self.image.set_data(data.numpy())
        vmin, vmax = self._fixed_range
        if vmin is None or vmax is None:
            low, high = float(data.min()), float(data.max())
            self.image.set_clim(vmin if vmin is not None else low, vmax if vmax is not None else high)
        self._write_values(data)
        if title is not None:
            self.ax.title.set_text(title)  # set_title would also touch the side titles: a full redraw


class Bars:
    """A labelled bar chart on an existing ``Axes`` that can be redrawn in place.

    Args:
        ax: where to draw.
        values: one number per bar (1-d tensor or list), e.g. one row of attention weights.
        labels: one label per bar (token strings).
        title, xlabel, ylabel: text around the chart.
        ylim: fixed ``(low, high)`` of the value axis; ``None`` fits the data (and zero) on every update.
        color, highlight_color: bar colours; :meth:`update` can paint one bar in ``highlight_color``.
        annotate: write each value above its bar with ``fmt``.
        reference: draw a dashed horizontal line at this value (e.g. uniform weights 1/T).
    """

    def __init__(self, ax: Axes, values, labels: Sequence[str], *, title: str = "", xlabel: str = "key token",
                 ylabel: str = "", ylim: tuple[float, float] | None = None, color: str = "tab:blue",
                 highlight_color: str = "tab:red", annotate: bool = False, fmt: str = "{:.2f}",
                 reference: float | None = None):
        data = _as_vector("values", values)
        if len(labels) != len(data):
            raise ValueError(f"labels must have {len(data)} entries to match values, got {len(labels)}")
        self.ax, self.fmt, self.ylim = ax, fmt, ylim
        self.color, self.highlight_color = color, highlight_color
        self.bars = list(ax.bar(range(len(data)), data.tolist(), color=color))
        ax.set_axisbelow(True)  # tick marks under the bars, so a LiveFigure can repaint the bars alone
        ax.set_xticks(range(len(data)), labels=list(labels), rotation=45, ha="right", rotation_mode="anchor")
        ax.axhline(0, color="black", linewidth=0.8)
        if reference is not None:
            ax.axhline(reference, color="gray", linestyle="--", linewidth=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        self.texts = [ax.text(bar.get_x() + bar.get_width() / 2, 0, "", ha="center", va="bottom", fontsize=9)
                      for bar in self.bars] if annotate else None
        _animate(ax.title, *self.bars, *(self.texts or []))
        self.update(data)

    def update(self, values, title: str | None = None, highlight: int | None = None) -> None:
        """Show new values (same number of bars); ``highlight`` paints that bar in the highlight colour."""
        data = _as_vector("values", values)
        if len(data) != len(self.bars):
            raise ValueError(f"values must keep {len(self.bars)} entries, got {len(data)}")
        if highlight is not None and not 0 <= highlight < len(self.bars):
            raise ValueError(f"highlight must be in [0, {len(self.bars)}), got {highlight}")
        heights = data.tolist()
        for index, (bar, height) in enumerate(zip(self.bars, heights)):
            bar.set_height(height)
            bar.set_color(self.highlight_color if index == highlight else self.color)
        if self.texts is not None:
            for text, height in zip(self.texts, heights):
                text.set_y(max(height, 0.0))
                text.set_text(self.fmt.format(height))
        if self.ylim is not None:
            limits = tuple(self.ylim)
        else:  # room for the tallest bar either side of zero; zero always shows
            low, high = min(0.0, min(heights)), max(0.0, max(heights))
            pad = 0.15 * (high - low) + 0.05
            limits = (low - (pad if low < 0 else 0.0), high + pad)
        if self.ax.get_ylim() != limits:  # a new range redraws the axis (slow path of a LiveFigure)
            self.ax.set_ylim(*limits)
        if title is not None:
            self.ax.title.set_text(title)  # set_title would also touch the side titles: a full redraw


class CellText:
    """The number written in one heatmap cell: the part of matplotlib's ``Text`` API the course uses."""

    __slots__ = ("_text", "_color", "_visible")

    def __init__(self):
        self._text, self._color, self._visible = "", "black", True

    def set_text(self, text) -> None:
        self._text = str(text)

    def get_text(self) -> str:
        return self._text

    def set_color(self, color) -> None:
        self._color = color

    def get_color(self):
        return self._color

    def set_visible(self, visible: bool) -> None:
        self._visible = bool(visible)

    def get_visible(self) -> bool:
        return self._visible


class CellValues(Artist):
    """Every number written in a heatmap's cells, drawn by one artist.

    A ``Text`` artist per cell would lay out its string again on every draw
    (about a fifth of a millisecond each: 20 ms for a 10x10 heatmap on every
    slider step). Here each distinct string is measured once, and each cell's
    string is placed at a whole pixel, centred in its cell, so the renderer's
    glyph cache serves it. ``cells[i][j]`` is the :class:`CellText` of cell ``(i, j)``.
    """

    zorder = 3  # like Text: above the image and the row outline

    def __init__(self, ax: Axes, rows: int, cols: int, fontsize: float = 9):
        super().__init__()
        self.axes = ax
        self.set_figure(ax.figure)
        self.cells = [[CellText() for _ in range(cols)] for _ in range(rows)]
        self._prop = FontProperties(size=fontsize)
        self._extents: dict = {}  # (string, dpi) -> (width, height, descent) in pixels
        self.set_clip_path(ax.patch)
        ax.add_artist(self)

    def _extent(self, renderer, text: str) -> tuple[float, float, float]:
        key = (text, renderer.dpi)
        extent = self._extents.get(key)
        if extent is None:
            extent = self._extents[key] = renderer.get_text_width_height_descent(text, self._prop, ismath=False)
        return extent

    def draw(self, renderer) -> None:
        if not self.get_visible():
            return
        # Like Text with va="center": centre the line box, whose height and descent are at least those of "lp".
        _, line_height, line_descent = self._extent(renderer, "lp")
        centres = self.axes.transData.transform([(j, i) for i, row in enumerate(self.cells) for j in range(len(row))])
        flip, canvas_height = renderer.flipy(), renderer.get_canvas_width_height()[1]
        gc = renderer.new_gc()
        self._set_gc_clip(gc)
        index = 0
        for row in self.cells:
            for cell in row:
                x, y = centres[index]
                index += 1
                if not cell.get_visible() or not cell.get_text():
                    continue
                width, height, descent = self._extent(renderer, cell.get_text())
                height, descent = max(height, line_height), max(descent, line_descent)
                baseline = y - height / 2 + descent  # display coordinates: y grows upwards
                if flip:  # renderers whose y grows downwards (Agg) take it flipped, as Text.draw does
                    baseline = canvas_height - baseline
                gc.set_foreground(cell.get_color())
                renderer.draw_text(gc, round(x - width / 2), round(baseline), cell.get_text(), self._prop, 0.0)
        gc.restore()
        self.stale = False


def _animate(*artists) -> None:
    """Mark artists that updates change as animated.

    A normal draw (``savefig``, a notebook's static picture) still paints them;
    a :class:`helpers.widgets.LiveFigure` redraws just them over a cached
    background, and changing them does not mark the whole figure as stale.
    """
    for artist in artists:
        artist.set_animated(True)


def plot_heatmap(matrix, row_labels: Sequence[str], col_labels: Sequence[str], *, width: float = 5.0,
                 height: float = 4.2, **options) -> Figure:
    """A new ``width`` x ``height``-inch figure holding one :class:`Heatmap`; ``options`` are passed to it.

    End a notebook cell with the returned figure to display it.
    """
    fig = new_figure(width, height)
    Heatmap(fig.axes[0], matrix, row_labels, col_labels, **options)
    return fig


def figure_to_png(fig: Figure, dpi: int = 80) -> bytes:
    """Render ``fig`` to PNG bytes with the Agg renderer (no display involved)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
