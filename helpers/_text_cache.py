"""An Agg canvas that remembers how it drew text (private helper of :mod:`helpers.widgets`).

A heatmap with values written in its cells redraws dozens of short strings
("0.23") on every slider step. Matplotlib's Agg renderer lays out each string
with FreeType and rasterises each glyph again every time; that is most of the
cost of a redraw. This canvas caches both, per canvas:

* the layout of a string (glyphs and their offsets), per font, size and dpi;
* the bitmap of a glyph, per font, size, dpi, rotation and sub-pixel offset
  (a glyph moved by whole pixels has the same bitmap, moved);
* for an unrotated string drawn at a whole pixel (the numbers of
  :class:`helpers.plotting.CellValues`), the bitmap of the whole string, blended
  in one call (only when its glyphs do not overlap, so the pixels are the same).

The cached bitmaps are blended by the same Agg call as matplotlib's own, so
the pixels are identical to an uncached draw (tests compare them with a plain
``savefig``). The code follows ``RendererAgg.draw_text`` and
``_draw_text_glyphs_and_boxes`` of matplotlib 3.11 (pinned in pyproject.toml);
anything unusual (math text, rule boxes, non-antialiased text) goes to
matplotlib's own code unchanged.

It is an optional accelerator. It uses private parts of matplotlib (listed in
``_NEEDS``) that any release may change, so it is switched on only where the
matplotlib in use has every one of them *and* a probe picture drawn through the
cache has exactly the pixels of plain Agg (checked once per process, at the
first live figure). Everywhere else :func:`new_canvas` returns a plain
``FigureCanvasAgg``: the same pictures, drawn a little slower. Importing this
module never fails. ``HELPERS_TEXT_CACHE=off`` in the environment, or
``use_text_cache(False)``, forces the plain path; :func:`text_cache_status`
says which path is in use and why.
"""

from __future__ import annotations

import math
import os

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg

from matplotlib.ft2font import FT2Font
from matplotlib.text import Text

try:  # private or recent parts of matplotlib: checked by text_cache_status(), never assumed
    from matplotlib.backends.backend_agg import get_hinting_flag
except ImportError:
    get_hinting_flag = None
try:
    from matplotlib.ft2font import RenderMode
except ImportError:  # matplotlib 3.10 has none
    RenderMode = None

__all__ = ["CachingCanvasAgg", "new_canvas", "text_cache_status", "use_text_cache"]

ENV_VARIABLE = "HELPERS_TEXT_CACHE"  # "off" (or 0/false/no) forces plain Agg
# What the caching renderer calls, as (owner, attribute): all must exist for the cache to be tried.
_NEEDS = (("backend_agg", "get_hinting_flag"), ("ft2font", "RenderMode"), ("FT2Font", "_layout"),
          ("FT2Font", "_set_transform"), ("FT2Font", "_render_glyph"),
          ("RendererAgg", "_draw_text_glyphs_and_boxes"), ("Text", "get_fontfeatures"), ("Text", "get_language"))

_MAX_ENTRIES = 20_000  # per cache; cleared when full (a few MB at most)


class _CachingRendererAgg(RendererAgg):
    def __init__(self, width, height, dpi, layouts: dict, glyphs: dict, strings: dict):
        super().__init__(width, height, dpi)
        self._layouts, self._glyphs, self._strings = layouts, glyphs, strings

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if ismath:
            return super().draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)
        features = mtext.get_fontfeatures() if mtext is not None else None
        language = mtext.get_language() if mtext is not None else None
        flags = get_hinting_flag()
        key = (s, hash(prop), self.dpi, flags, None if features is None else tuple(features), language)
        items = self._layouts.get(key)
        if items is None:
            font = self._prepare_font(prop)
            items = [(item.ft_object, item.glyph_index, item.x, item.y)
                     for item in font._layout(s, flags=flags, features=features, language=language)]
            if len(self._layouts) >= _MAX_ENTRIES:
                self._layouts.clear()
            self._layouts[key] = items
        size = prop.get_size_in_points()
        glyphs = [(font, size, glyph, 0, 1, dx, dy) for font, glyph, dx, dy in items]
        if angle == 0 and float(x).is_integer() and float(y).is_integer() and gc.get_antialiased():
            # At a whole pixel the string's pixels never change: blend them in one call.
            string = self._strings.get(key)
            if string is None:
                if len(self._strings) >= _MAX_ENTRIES:
                    self._strings.clear()
                string = self._strings[key] = self._compose(x, y, glyphs)
            if string is not False:
                bitmap, dx, dy = string
                self._renderer.draw_text_image(bitmap, int(x) + dx, int(y) + dy, 0, gc)
                return
        self._draw_text_glyphs_and_boxes(gc, x, y, angle, glyphs, [])

    def _compose(self, x, y, glyphs):
        """One bitmap of a whole string drawn at whole pixel ``(x, y)``, or False if its glyphs overlap.

        Glyphs whose coverage overlaps would blend differently in one call than in several, so such
        strings keep being drawn glyph by glyph (the pixels must not depend on the cache).
        """
        placed = []  # (bitmap, left column, bottom row), image rows counted downwards
        self._draw_text_glyphs_and_boxes(None, x, y, 0.0, glyphs, [], lambda *where: placed.append(where))
        if not placed:
            return False
        top = min(bottom - bitmap.shape[0] for bitmap, _, bottom in placed)
        left = min(column for _, column, _ in placed)
        height = max(bottom for _, _, bottom in placed) - top
        width = max(column + bitmap.shape[1] for bitmap, column, _ in placed) - left
        canvas = np.zeros((height, width), np.uint8)
        covered = np.zeros((height, width), np.uint8)
        for bitmap, column, bottom in placed:
            rows = slice(bottom - bitmap.shape[0] - top, bottom - top)
            cols = slice(column - left, column - left + bitmap.shape[1])
            canvas[rows, cols] = np.maximum(canvas[rows, cols], bitmap)
            covered[rows, cols] += bitmap > 0
        if covered.max(initial=0) > 1:
            return False
        return canvas, left - int(x), top + height - int(y)  # bottom rows move with y, as in the glyph path

    def _draw_text_glyphs_and_boxes(self, gc, x, y, angle, glyphs, boxes, collect=None):
        """Blend each glyph's cached bitmap; ``collect(bitmap, left, bottom)`` receives them instead."""
        boxes = list(boxes)
        if collect is None and (boxes or not gc.get_antialiased()):
            return super()._draw_text_glyphs_and_boxes(gc, x, y, angle, glyphs, boxes)
        cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        load_flags = get_hinting_flag()
        for font, size, glyph_index, slant, extend, dx, dy in glyphs:  # dy is upwards
            matrix = (0x10000 * np.array([[cos, -sin], [sin, cos]])
                      @ [[extend, extend * slant], [0, 1]]).round().astype(int)
            offset = [round(0x40 * (x + dx * cos - dy * sin)),  # 26.6 fixed point; FreeType's y is upwards
                      round(0x40 * (self.height - y + dx * sin + dy * cos))]
            whole_x, whole_y = offset[0] // 0x40, offset[1] // 0x40
            key = (font.fname, size, self.dpi, glyph_index, matrix.tobytes(), offset[0] % 0x40,
                   offset[1] % 0x40, load_flags)
            cached = self._glyphs.get(key)
            if cached is None:
                font.set_size(size, self.dpi)
                font._set_transform(matrix, offset)
                bitmap = font._render_glyph(glyph_index, load_flags, RenderMode.NORMAL)
                cached = (np.array(bitmap.buffer, copy=True), bitmap.left - whole_x, bitmap.top - whole_y)
                if len(self._glyphs) >= _MAX_ENTRIES:
                    self._glyphs.clear()
                self._glyphs[key] = cached
            buffer, left, top = cached
            # draw_text_image's y is downwards and names the bitmap's bottom side.
            column, bottom = left + whole_x, int(self.height) - (top + whole_y) + buffer.shape[0]
            if collect is not None:
                collect(buffer, column, bottom)
            else:
                self._renderer.draw_text_image(buffer, column, bottom, 0, gc)


class CachingCanvasAgg(FigureCanvasAgg):
    """A ``FigureCanvasAgg`` whose renderer caches text layouts and glyph bitmaps (same pixels, faster)."""

    def __init__(self, figure=None):
        self._text_layouts: dict = {}
        self._glyph_bitmaps: dict = {}
        self._string_bitmaps: dict = {}
        super().__init__(figure)

    def get_renderer(self):
        w, h = self.get_width_height(physical=True)
        key = w, h, self.figure.dpi
        if self._lastKey != key:
            self.renderer = _CachingRendererAgg(w, h, self.figure.dpi, self._text_layouts, self._glyph_bitmaps,
                                                self._string_bitmaps)
            self._lastKey = key
        return self.renderer


# --------------------------------------------------------------------------- is the cache usable here?

_forced: bool | None = None  # use_text_cache(True/False); None: decide automatically
_detected: tuple[bool, str] | None = None  # (usable, why), once per process


def use_text_cache(enabled: bool | None) -> None:
    """Force the glyph cache on (``True``, where it is usable) or off (``False``); ``None``: automatic."""
    global _forced
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True, False or None, got {enabled!r}")
    _forced = enabled


def _missing() -> list[str]:
    owners = {"backend_agg": get_hinting_flag, "ft2font": RenderMode, "FT2Font": FT2Font,
              "RendererAgg": RendererAgg, "Text": Text}
    missing = []
    for owner, name in _NEEDS:
        if owners[owner] is None or (owner not in ("backend_agg", "ft2font") and not hasattr(owners[owner], name)):
            missing.append(f"{owner}.{name}")
    return missing


def _probe_pixels(canvas_class) -> list[np.ndarray]:
    """Pixels of a small picture with every kind of text the course draws, drawn twice (cold, then cached)."""
    from matplotlib.figure import Figure
    from matplotlib.transforms import IdentityTransform

    fig = Figure(figsize=(2.4, 1.2), dpi=80)
    canvas = canvas_class(fig)
    ax = fig.add_axes((0.25, 0.3, 0.7, 0.6))
    ax.set_xticks([0, 1], ["query", "key"], rotation=45)
    ax.set_title("weights 0.25", fontsize=9)
    fig.text(10, 8, "0.83 -1.07", transform=IdentityTransform(), fontsize=8)  # at a whole pixel
    fig.text(0.02, 0.55, "A1", rotation=90, fontsize=10)
    renderer = canvas.get_renderer()  # the numbers of CellValues: draw_text without a Text
    pictures = []
    for _ in range(2):
        canvas.draw()
        gc = renderer.new_gc()
        renderer.draw_text(gc, 100, 40, "0.50", ax.title.get_fontproperties(), 0.0)
        gc.restore()
        pictures.append(np.array(canvas.buffer_rgba(), copy=True))
    return pictures


def _detect() -> tuple[bool, str]:
    missing = _missing()
    if missing:
        return False, "off: this matplotlib lacks " + ", ".join(missing) + " (pictures drawn by plain Agg)"
    try:
        cached = _probe_pixels(CachingCanvasAgg)
    except Exception as error:  # any private API that changed its signature or behaviour
        return False, f"off: the probe picture failed ({type(error).__name__}: {error}) (pictures drawn by plain Agg)"
    plain = _probe_pixels(FigureCanvasAgg)
    if not all(np.array_equal(a, b) for a, b in zip(cached, plain)):
        return False, "off: the probe picture's pixels differ from plain Agg here (pictures drawn by plain Agg)"
    return True, "on: same pixels as plain Agg, probe checked"


def text_cache_status() -> tuple[bool, str]:
    """``(in use, why)``: whether new live pictures use the glyph cache, and the reason in words."""
    global _detected
    if _forced is False:
        return False, "off: use_text_cache(False)"
    if _forced is None and os.environ.get(ENV_VARIABLE, "").strip().lower() in ("off", "0", "false", "no"):
        return False, f"off: {ENV_VARIABLE}={os.environ[ENV_VARIABLE]}"
    if _detected is None:
        _detected = _detect()
    return _detected


def new_canvas(figure) -> FigureCanvasAgg:
    """An Agg canvas for ``figure``: the caching one where it is usable here, else matplotlib's own."""
    return (CachingCanvasAgg if text_cache_status()[0] else FigureCanvasAgg)(figure)
