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
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg, get_hinting_flag
from matplotlib.ft2font import RenderMode

__all__ = ["CachingCanvasAgg"]

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
