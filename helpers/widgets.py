"""Controls wired to a figure that redraws in place, fast.

:class:`LiveFigure` shows ipywidgets controls above a ``widgets.Image``. Moving a
control calls your ``redraw(**values)``, which updates the figure's artists
(through the builders of :mod:`helpers.plotting`: ``Heatmap``, ``Bars``); the
figure is then rendered to PNG by :class:`InPlaceRenderer` and swapped into the
image. One picture, updated in place: no flicker, no piling-up figures, no
pyplot state, nothing printed, and it works the same in JupyterLab and under
nbval (no ``Output`` widget routing). When the notebook is read where widgets
cannot run (GitHub, nbconvert, a viewer without a kernel), the cell's stored
output also carries a PNG of the picture as first drawn.

Why an in-place PNG and not the ipympl canvas (``%matplotlib widget``)
----------------------------------------------------------------------
Measured on the course's 2-core test machines (shared/NOTEBOOK-TESTING.md and
``benchmarks/sliders.py``):

* Speed. ipympl re-renders the whole figure with Agg on every ``draw_idle``
  (35-38 ms for one 16x16 heatmap, no value texts) and then ships it to the
  browser. Here a slider step redraws only the artists the builders changed
  over a cached background (blitting, below) with cached text glyphs
  (``helpers/_text_cache.py``) and writes the PNG with a fast encoder: on the
  2-core build machine a median of 13 ms for an annotated 6x6 heatmap with
  annotated bars and 19 ms for notebook 06's head grid (the course's largest
  picture), 20-40x faster than ``interact`` with a new pyplot figure measured
  in the same run; the browser swaps one ``<img>``.
* nbval. ipympl's stored output is a ``text/html`` fallback with a base64 PNG
  inside, which nbval compares (it skips ``image/png``), so every pixel of
  the rendering becomes part of the test and needs a sanitizer rule. Here the
  compared output is just ``text/plain`` (``LiveFigure(name=value, ...)``).
* Reading on GitHub. An ipympl figure stored without widget state shows
  nothing or "Loading widget..."; here the stored ``image/png`` is the initial
  picture, so the notebook reads like a book on GitHub and offline.
* No extra front-end extension, no CDN: ``widgets.Image`` is core ipywidgets 8.

Two ways to deliver a picture (``transport``)
---------------------------------------------
* ``"image"``: a ``widgets.Image`` whose ``value`` is the PNG bytes; ipywidgets
  sends them as a binary buffer beside the JSON message and the browser shows
  them through a ``blob:`` URL. The default wherever it works.
* ``"text"``: a ``widgets.HTML`` holding ``<img src="data:image/png;base64,...">``;
  the message is JSON text only (a third larger). For front ends that do not
  handle binary comm buffers: Colab's widget manager has a history of not
  doing so (googlecolab/colabtools#587, googlecolab/colab-cdn-widget-manager#33),
  so it is chosen automatically in Colab.
Choose with ``LiveFigure(..., transport=...)`` or, for every picture, the
environment variable ``ATTENTION_COURSE_LIVE_TRANSPORT`` (``image``, ``text`` or
``auto``) set before the kernel starts or before a live picture is built.
``benchmarks/sliders.py`` measures both in one run; both pictures carry the CSS
class ``course-live-picture``.

Blitting: how a slider step stays fast
--------------------------------------
The builders mark the artists they change on every update as *animated*
(``Artist.set_animated(True)``): a heatmap's image, value texts, row outline
and title; a bar chart's bars, value texts and title. Matplotlib leaves
animated artists out of a normal ``canvas.draw()`` and does not let their
changes make the figure stale. So after ``redraw``:

* ``fig.stale`` is False: only animated artists changed. Restore the cached
  background and draw the animated artists on top (fast path).
* ``fig.stale`` is True: something else changed (a colour range with a colour
  bar, an axis limit, a tick, a plain artist). Draw the whole figure, cache it
  as the new background, draw the animated artists on top (full path).

Either way the pixels equal a full render of the figure (a unit test checks
it). Non-animated artists that are drawn above an animated one and overlap
it (e.g. the axes frame around a heatmap) are found at the first render and
drawn with the animated ones, so stacking order is kept. The layout engine
runs once, at the first render, and is then switched off: every later picture
has the same layout as the stored static one.
"""

from __future__ import annotations

import base64
import os
import struct
import sys
import zlib
from collections.abc import Callable, Iterable, Mapping

import ipywidgets as widgets
import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from ._text_cache import new_canvas

__all__ = ["LiveFigure", "InPlaceRenderer", "encode_png", "float_slider", "int_slider", "steps_slider", "choice",
           "choose_transport", "TRANSPORTS", "TRANSPORT_VARIABLE"]

TRANSPORTS = ("image", "text")
TRANSPORT_VARIABLE = "ATTENTION_COURSE_LIVE_TRANSPORT"
PICTURE_CLASS = "course-live-picture"

_STYLE = {"description_width": "initial"}
_LAYOUT = widgets.Layout(width="420px")
_OVERLAP_MARGIN_PX = 2  # anti-aliased edges reach about a pixel beyond an artist's extent


def float_slider(description: str, value: float, min: float, max: float, step: float,
                 readout_format: str = ".2f") -> widgets.FloatSlider:
    """A float slider whose description is never clipped."""
    return widgets.FloatSlider(value=value, min=min, max=max, step=step, description=description,
                               readout_format=readout_format, style=_STYLE, layout=_LAYOUT)


def int_slider(description: str, value: int, min: int, max: int, step: int = 1) -> widgets.IntSlider:
    """An int slider whose description is never clipped."""
    return widgets.IntSlider(value=value, min=min, max=max, step=step, description=description,
                             style=_STYLE, layout=_LAYOUT)


def steps_slider(description: str, options, value=None) -> widgets.SelectionSlider:
    """A slider over a few chosen values, e.g. powers of two for a dimension (one arrow key = one step)."""
    options = list(options)
    return widgets.SelectionSlider(options=options, value=options[0] if value is None else value,
                                   description=description, style=_STYLE, layout=_LAYOUT)


def choice(description: str, options, value=None) -> widgets.ToggleButtons:
    """Toggle buttons to pick one of a few options (e.g. a query token)."""
    options = list(options)
    return widgets.ToggleButtons(options=options, value=options[0] if value is None else value,
                                 description=description, style=_STYLE)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_png(pixels: np.ndarray, compress_level: int = 1) -> bytes:
    """PNG bytes of an ``(height, width, 3 or 4)`` uint8 RGB(A) array, written for speed.

    Every row is stored with PNG's "None" filter and deflated once at a low level. A plot is
    mostly flat colour, so this is about as small as an adaptive-filter PNG and twice as fast
    to make (6 ms instead of 12 ms for a 960x448 picture; benchmarks/sliders.py).
    """
    height, width, channels = pixels.shape
    rows = np.zeros((height, width * channels + 1), np.uint8)  # a 0 byte ("None" filter) starts each row
    rows[:, 1:] = pixels.reshape(height, -1)
    header = struct.pack(">IIBBBBB", width, height, 8, {3: 2, 4: 6}[channels], 0, 0, 0)  # 8-bit RGB / RGBA
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header)
            + _png_chunk(b"IDAT", zlib.compress(rows.tobytes(), compress_level)) + _png_chunk(b"IEND", b""))


def _draw_list(ax: Axes) -> list[Artist]:
    """The children of ``ax`` in the order ``Axes.draw`` paints them (patch first, then by zorder)."""
    artists = [a for a in ax.get_children() if a is not ax.patch]
    if not (ax.axison and ax.get_frame_on()):
        artists = [a for a in artists if a not in ax.spines.values()]
    if not ax.axison:
        artists = [a for a in artists if a not in ax._axis_map.values()]
    return sorted(artists, key=lambda a: a.zorder)  # stable, like Axes.draw


def _region(artist: Artist, renderer) -> Bbox | None:
    """Where ``artist`` can paint: its clip box if it is clipped to one, else its extent now."""
    if artist.get_clip_on() and artist.get_clip_box() is not None:
        return artist.get_clip_box()
    try:
        box = artist.get_window_extent(renderer)
    except (NotImplementedError, TypeError, RuntimeError):
        return None
    return None if box is None or not np.isfinite(box.bounds).all() else box


class InPlaceRenderer:
    """Renders one figure to PNG bytes again and again, redrawing only what changed.

    See the module docstring ("Blitting"). ``fast_renders`` and ``full_renders``
    count which path each :meth:`render` took.

    Args:
        fig: the figure; it gets its own Agg canvas and is drawn at ``dpi``.
        dpi: resolution of the pictures.
        compress_level: zlib level of the PNG (1: fast, a little larger).
    """

    def __init__(self, fig: Figure, dpi: int = 80, compress_level: int = 1):
        if not isinstance(fig, Figure):
            raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
        if isinstance(dpi, bool) or not isinstance(dpi, (int, float)) or dpi <= 0:
            raise ValueError(f"dpi must be a positive number, got {dpi!r}")
        self.fig, self.compress_level = fig, compress_level
        self.canvas = new_canvas(fig)  # Agg; remembers text glyphs where matplotlib allows (same pixels)
        fig.set_dpi(dpi)
        self._background = None
        self._lifted: list[Artist] = []
        face = fig.get_facecolor()
        self._opaque = fig.patch.get_visible() and len(face) == 4 and face[3] == 1.0
        self.fast_renders = self.full_renders = 0

    def _animated_in_order(self) -> list[Artist]:
        """Every animated artist (lifted ones included), in the order a full draw paints them."""
        ordered = []
        for ax in sorted(self.fig.axes, key=lambda a: a.zorder):
            ordered += [a for a in _draw_list(ax) if a.get_animated()]
        ordered += [a for a in self.fig.get_children() if not isinstance(a, Axes) and a.get_animated()]
        return ordered

    def _lift_overlapping(self, renderer) -> bool:
        """Animate the plain artists painted above an animated one that they overlap; True if any."""
        lifted = []
        for ax in self.fig.axes:
            artists = _draw_list(ax)
            first = next((i for i, a in enumerate(artists) if a.get_animated()), None)
            if first is None:
                continue
            regions = [r for a in artists if a.get_animated() and (r := _region(a, renderer)) is not None]
            for artist in artists[first:]:
                if artist.get_animated() or not artist.get_visible():
                    continue
                box = _region(artist, renderer)
                if box is None or any(box.overlaps(r.expanded(1, 1).padded(_OVERLAP_MARGIN_PX))
                                      for r in regions):
                    lifted.append(artist)
        for artist in lifted:
            artist.set_animated(True)
        self._lifted += lifted
        return bool(lifted)

    def render(self) -> bytes:
        """PNG bytes of the figure as it is now."""
        renderer = self.canvas.get_renderer()
        if self._background is None or self.fig.stale:
            self.canvas.draw()  # everything but the animated artists
            if self._background is None:
                # The first draw placed every axis: keep that layout from now on.
                self.fig.set_layout_engine("none")
                renderer = self.canvas.get_renderer()
                if self._lift_overlapping(renderer):
                    self.canvas.draw()
            self._background = self.canvas.copy_from_bbox(self.fig.bbox)
            self.full_renders += 1
        else:
            self.canvas.restore_region(self._background)
            self.fast_renders += 1
        for artist in self._animated_in_order():
            artist.draw(renderer)
        self.fig.stale = False  # drawing animated artists must not force the next render onto the full path
        pixels = np.asarray(self.canvas.buffer_rgba())
        # An opaque figure needs no alpha channel: a quarter less to encode.
        return encode_png(pixels[..., :3] if self._opaque else pixels, self.compress_level)


def _in_colab() -> bool:
    """True in a Google Colab kernel (its runtime sets COLAB_RELEASE_TAG and imports google.colab)."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def choose_transport(transport: str | None = None) -> str:
    """How a live picture reaches the browser: ``"image"`` (binary buffers) or ``"text"`` (a data URL).

    ``transport`` wins if given; else the environment variable ``ATTENTION_COURSE_LIVE_TRANSPORT``; ``"auto"``
    (or neither) picks ``"text"`` in Colab and ``"image"`` everywhere else.
    """
    source = "transport"
    if transport is None:
        transport, source = os.environ.get(TRANSPORT_VARIABLE, "auto"), TRANSPORT_VARIABLE
    if not isinstance(transport, str):
        raise TypeError(f"{source} must be a string, one of image, text or auto; got {type(transport).__name__}")
    choice_ = transport.strip().lower()
    if choice_ == "auto":
        return "text" if _in_colab() else "image"
    if choice_ not in TRANSPORTS:
        raise ValueError(f"{source} must be one of image, text or auto; got {transport!r}")
    return choice_


class LiveFigure(widgets.VBox):
    """Controls, then a picture of ``fig`` that ``redraw`` keeps up to date.

    Args:
        fig: a figure built once (e.g. with :func:`helpers.plotting.new_figure`).
        redraw: ``redraw(**values)`` updates the figure's artists for the current
            control values (keys are the names in ``controls``). Keep it light:
            it runs on every slider step. Updating builders (``Heatmap``,
            ``Bars``) keeps it on the fast path; changing anything else works
            too, with a full redraw of the figure.
        controls: ``{name: widget}``; each widget's ``value`` is passed by name.
        dpi: resolution of the rendered picture.
        animated: further artists that ``redraw`` changes (e.g. a line from
            ``ax.axvline``), so that changing them stays on the fast path.
        transport: ``"image"``, ``"text"`` or ``"auto"``; ``None`` reads the
            environment (:func:`choose_transport`).

    ``png`` holds the PNG bytes of the picture shown now, ``initial_png`` those of the first one.

    The builder never displays anything itself: end a cell with it.
    """

    def __init__(self, fig: Figure, redraw: Callable[..., None], controls: Mapping[str, widgets.ValueWidget],
                 *, dpi: int = 80, animated: Iterable[Artist] = (), transport: str | None = None):
        if not isinstance(fig, Figure):
            raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
        if not callable(redraw):
            raise TypeError("redraw must be callable as redraw(**values)")
        if not controls:
            raise ValueError("controls must name at least one widget")
        for artist in animated:
            if not isinstance(artist, Artist):
                raise TypeError(f"animated must hold matplotlib artists, got {type(artist).__name__}")
            artist.set_animated(True)
        self.transport = choose_transport(transport)
        self.fig, self.redraw, self.controls, self.dpi = fig, redraw, dict(controls), dpi
        self.renderer = InPlaceRenderer(fig, dpi=dpi)
        # Shown at the size it is rendered, never stretched to the width of the notebook; narrowed to fit a narrower
        # output area (the Image widget's own style does that; the text transport's HTML widget needs max_width).
        self._width_px = round(fig.get_figwidth() * dpi)
        layout = widgets.Layout(width=f"{self._width_px}px", max_width="100%", height="auto")
        if self.transport == "image":
            self.image = widgets.Image(format="png", layout=layout)
        else:
            self.image = widgets.HTML(layout=layout)
        self.image.add_class(PICTURE_CLASS)
        self.png = b""
        super().__init__(children=[*self.controls.values(), self.image])
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.refresh()
        self.initial_png = self.png

    def values(self) -> dict:
        """The current value of every control, by name."""
        return {name: control.value for name, control in self.controls.items()}

    def refresh(self) -> None:
        """Redraw for the current values and swap the new picture in."""
        self.redraw(**self.values())
        self.png = self.renderer.render()
        if self.transport == "image":
            self.image.value = self.png
        else:
            data = base64.b64encode(self.png).decode("ascii")
            self.image.value = (f'<img src="data:image/png;base64,{data}" alt="live picture" '
                                f'style="width: {self._width_px}px; max-width: 100%; height: auto">')

    def _on_change(self, _change) -> None:
        self.refresh()

    def __repr__(self) -> str:
        settings = ", ".join(f"{name}={value!r}" for name, value in self.values().items())
        return f"LiveFigure({settings})"

    def _repr_mimebundle_(self, **kwargs):
        if hasattr(widgets.VBox, "_repr_mimebundle_"):  # ipywidgets 8
            bundle = super()._repr_mimebundle_(**kwargs)
        else:  # ipywidgets 7 displays widgets through _ipython_display_ (below); same bundle
            bundle = {"text/plain": repr(self), "application/vnd.jupyter.widget-view+json":
                      {"version_major": 2, "version_minor": 0, "model_id": self.model_id}}
        # A static picture of the initial state for readers without a kernel;
        # JupyterLab, Notebook and Colab prefer the live widget.
        bundle["image/png"] = base64.b64encode(self.initial_png).decode("ascii")
        return bundle

    if hasattr(widgets.VBox, "_ipython_display_"):  # ipywidgets 7: IPython asks this before any _repr_*_
        def _ipython_display_(self, **kwargs):
            from IPython.display import display

            display(self._repr_mimebundle_(), raw=True)
            self._handle_displayed(**kwargs)
