"""An Agg canvas that remembers how it drew text (private helper of :mod:`helpers.widgets`).

A heatmap with values written in its cells redraws dozens of short strings
("0.23") on every slider step. Matplotlib's Agg renderer lays out each string
with FreeType and rasterises each glyph again every time; that is most of the
cost of a redraw. This canvas caches both, per canvas:

* the layout of a string (glyphs and their offsets), per font, size and dpi;
* the bitmap of a glyph, per font, size, dpi, rotation and sub-pixel offset
  (a glyph moved by whole pixels has the same bitmap, moved).

The cached bitmaps are blended by the same Agg call as matplotlib's own, so
the pixels are identical to an uncached draw (tests compare them with a plain
``savefig``). The code follows ``RendererAgg.draw_text`` and
``_draw_text_glyphs_and_boxes`` of matplotlib 3.11 (pinned in pyproject.toml);
anything unusual (math text, rule boxes, non-antialiased text) goes to
matplotlib's own code unchanged.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg, get_hinting_flag
from matplotlib.ft2font import RenderMode

__all__ = ["CachingCanvasAgg"]

_MAX_ENTRIES = 20_000  # per cache; cleared when full (a few MB at most)


class _CachingRendererAgg(RendererAgg):
    def __init__(self, width, height, dpi, layouts: dict, glyphs: dict):
        super().__init__(width, height, dpi)
        self._layouts, self._glyphs = layouts, glyphs

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
        self._draw_text_glyphs_and_boxes(
            gc, x, y, angle, ((font, size, glyph, 0, 1, dx, dy) for font, glyph, dx, dy in items), [])

    def _draw_text_glyphs_and_boxes(self, gc, x, y, angle, glyphs, boxes):
        boxes = list(boxes)
        if boxes or not gc.get_antialiased():
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
            self._renderer.draw_text_image(buffer, left + whole_x, int(self.height) - (top + whole_y)
                                           + buffer.shape[0], 0, gc)


class CachingCanvasAgg(FigureCanvasAgg):
    """A ``FigureCanvasAgg`` whose renderer caches text layouts and glyph bitmaps (same pixels, faster)."""

    def __init__(self, figure=None):
        self._text_layouts: dict = {}
        self._glyph_bitmaps: dict = {}
        super().__init__(figure)

    def get_renderer(self):
        w, h = self.get_width_height(physical=True)
        key = w, h, self.figure.dpi
        if self._lastKey != key:
            self.renderer = _CachingRendererAgg(w, h, self.figure.dpi, self._text_layouts, self._glyph_bitmaps)
            self._lastKey = key
        return self.renderer
