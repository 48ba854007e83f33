"""Heatmaps, live figures and exercise checks."""

import base64
import re
import sys

import ipywidgets as widgets
import pytest
import torch

from helpers.plotting import Bars, Heatmap, figure_to_png, new_figure, plot_heatmap
from helpers.widgets import InPlaceRenderer, LiveFigure, choice, float_slider, int_slider

TOKENS = ["a", "b", "c"]


@pytest.fixture(autouse=True, params=["text-cache", "plain-agg"])
def text_cache(request):
    """Every test runs twice: live pictures drawn through the glyph cache (where this matplotlib allows it)
    and by plain Agg (the path every matplotlib without the cache's private API takes). Same pixels both ways."""
    from helpers import _text_cache

    _text_cache.use_text_cache(request.param == "text-cache")
    yield request.param
    _text_cache.use_text_cache(None)


def test_heatmap_labels_title_and_values():
    fig = plot_heatmap(torch.eye(3), TOKENS, ["x", "y", "z"], title="identity", colorbar_label="weight")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y", "z"]
    assert ax.get_title() == "identity"
    assert len(fig.axes) == 2  # the heatmap and its colour bar
    assert figure_to_png(fig).startswith(b"\x89PNG")
    assert fig._repr_png_().startswith(b"\x89PNG")


def test_heatmap_update_changes_data_annotations_and_range():
    fig = new_figure()
    heatmap = Heatmap(fig.axes[0], torch.zeros(3, 3), TOKENS, TOKENS)
    before = figure_to_png(fig)
    heatmap.update(torch.arange(9.0).reshape(3, 3), title="new")
    assert heatmap.texts[2][2].get_text() == "8.00"
    assert heatmap.image.get_clim() == (0.0, 8.0)
    assert heatmap.ax.get_title() == "new"
    assert figure_to_png(fig) != before


def test_heatmap_rejects_bad_input():
    with pytest.raises(ValueError, match="row_labels/col_labels must have 3/3 entries"):
        plot_heatmap(torch.eye(3), ["a"], TOKENS)
    with pytest.raises(ValueError, match="matrix must be 2-d"):
        plot_heatmap(torch.ones(3), TOKENS, TOKENS)
    heatmap = Heatmap(new_figure().axes[0], torch.eye(3), TOKENS, TOKENS)
    with pytest.raises(ValueError, match="matrix must keep the shape"):
        heatmap.update(torch.eye(2))


def _live_figure(**options):
    fig = new_figure()
    heatmap = Heatmap(fig.axes[0], torch.zeros(3, 3), TOKENS, TOKENS, vmin=0, vmax=5)
    calls = []

    def redraw(row, scale):
        calls.append((row, scale))
        matrix = torch.zeros(3, 3)
        matrix[TOKENS.index(row)] = scale
        heatmap.update(matrix)

    live = LiveFigure(fig, redraw, {"row": choice("row", TOKENS), "scale": int_slider("scale", 1, 0, 5)}, **options)
    return live, calls


def test_live_figure_redraws_in_place_when_a_control_moves():
    live, calls = _live_figure()
    first = bytes(live.image.value)
    assert calls == [("a", 1)] and first.startswith(b"\x89PNG")
    live.controls["scale"].value = 4
    assert calls[-1] == ("a", 4) and bytes(live.image.value) != first
    second = bytes(live.image.value)
    live.controls["row"].value = "c"
    assert calls[-1] == ("c", 4) and bytes(live.image.value) != second
    assert live.children[-1] is live.image  # one picture, updated, never a new one


def test_live_figure_repr_and_static_picture():
    live, _ = _live_figure()
    assert repr(live) == "LiveFigure(row='a', scale=1)"
    bundle = live._repr_mimebundle_()
    assert bundle["text/plain"] == "LiveFigure(row='a', scale=1)"
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["image/png"].startswith("iVBOR")  # base64 of a PNG signature


def _picture_in(html: str) -> bytes:
    match = re.fullmatch(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"[^>]*>', html)
    assert match, html[:200]
    return base64.b64decode(match.group(1))


def test_text_transport_sends_the_same_picture_in_json_text_only():
    from ipywidgets.widgets.widget import _remove_buffers

    image, _ = _live_figure(transport="image")
    text, _ = _live_figure(transport="text")
    assert (image.transport, text.transport) == ("image", "text")
    assert isinstance(text.image, widgets.HTML) and "course-live-picture" in text.image._dom_classes
    assert isinstance(image.image, widgets.Image) and "course-live-picture" in image.image._dom_classes
    for live in (image, text):  # its rendered size, narrowed (never clipped) where the output area is narrower
        assert (live.image.layout.width, live.image.layout.max_width) == (f"{live._width_px}px", "100%")
    assert _picture_in(text.image.value) == text.png == text.initial_png == image.png
    for live in (image, text):
        live.controls["scale"].value = 4
        live.controls["row"].value = "c"
    assert _picture_in(text.image.value) == text.png == image.png == bytes(image.image.value) != text.initial_png
    # What goes over the wire: the image transport puts the PNG in a binary buffer, the text one sends none.
    _, _, image_buffers = _remove_buffers(image.image.get_state())
    _, _, text_buffers = _remove_buffers(text.image.get_state())
    assert image_buffers and not text_buffers
    assert text._repr_mimebundle_()["image/png"] == image._repr_mimebundle_()["image/png"]  # same static picture


def test_transport_is_chosen_by_argument_then_environment_then_colab(monkeypatch):
    from helpers.widgets import TRANSPORT_VARIABLE, choose_transport

    monkeypatch.delenv(TRANSPORT_VARIABLE, raising=False)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert choose_transport() == "image" and choose_transport("auto") == "image"
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20261120")
    assert choose_transport() == "text" and choose_transport("image") == "image"
    monkeypatch.setenv(TRANSPORT_VARIABLE, " Image ")
    assert choose_transport() == "image" and _live_figure()[0].transport == "image"
    monkeypatch.delenv("COLAB_RELEASE_TAG")
    monkeypatch.setenv(TRANSPORT_VARIABLE, "text")
    assert choose_transport() == "text" and choose_transport("image") == "image"
    assert _live_figure()[0].transport == "text"
    monkeypatch.setenv(TRANSPORT_VARIABLE, "bytes")
    with pytest.raises(ValueError, match="ATTENTION_COURSE_LIVE_TRANSPORT must be one of image, text or auto"):
        _live_figure()
    with pytest.raises(ValueError, match="transport must be one of image, text or auto; got 'html'"):
        choose_transport("html")
    with pytest.raises(TypeError, match="transport must be a string"):
        choose_transport(1)


def test_live_figure_rejects_bad_arguments():
    with pytest.raises(TypeError, match="fig must be a matplotlib Figure"):
        LiveFigure("fig", lambda: None, {"x": int_slider("x", 0, 0, 1)})
    with pytest.raises(ValueError, match="controls must name at least one widget"):
        LiveFigure(new_figure(), lambda: None, {})


def test_new_figure_grid_and_bad_counts():
    assert len(new_figure(8, 6, ncols=3, nrows=2).axes) == 6
    with pytest.raises(ValueError, match="nrows"):
        new_figure(nrows=0)


def test_bars_update_in_place_and_highlight():
    fig = new_figure()
    bars = Bars(fig.axes[0], [0.2, 0.5, 0.3], TOKENS, annotate=True, ylim=(0, 1))
    bars.update(torch.tensor([0.1, 0.1, 0.8]), title="new", highlight=2)
    assert [round(b.get_height(), 3) for b in bars.bars] == [0.1, 0.1, 0.8]
    assert bars.texts[2].get_text() == "0.80"
    assert bars.bars[2].get_facecolor() != bars.bars[0].get_facecolor()
    assert fig.axes[0].get_title() == "new"
    free = Bars(new_figure().axes[0], [-2.0, 1.0, 3.0], TOKENS)
    low, high = free.ax.get_ylim()
    assert low < -2.0 and high > 3.0
    with pytest.raises(ValueError, match="values must keep 3"):
        bars.update([1.0, 2.0])
    with pytest.raises(ValueError, match="labels"):
        Bars(new_figure().axes[0], [1.0, 2.0], TOKENS)
    with pytest.raises(ValueError, match="highlight"):
        bars.update([1.0, 2.0, 3.0], highlight=5)


# --------------------------------------------------------------------------- in-place rendering

def _pixels(png: bytes):
    import io

    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA")).astype(int)


def _plain_render(live):
    """Pixels of a plain matplotlib Agg savefig of the live figure: every artist, in zorder, no caches."""
    import io

    buffer = io.BytesIO()
    live.fig.savefig(buffer, format="png", dpi=live.dpi, backend="agg")
    return _pixels(buffer.getvalue())


def _dashboard():
    """A heatmap (row outline, fixed colours) beside annotated bars, driven by a slider and a choice."""
    fig = new_figure(9.0, 4.0, ncols=2)
    heatmap = Heatmap(fig.axes[0], torch.zeros(3, 3), TOKENS, TOKENS, vmin=0.0, vmax=1.0, title="start",
                      colorbar_label="weight")
    bars = Bars(fig.axes[1], torch.zeros(3), TOKENS, ylim=(0.0, 1.1), annotate=True, reference=1 / 3)

    def redraw(row, temperature):
        weights = (torch.arange(9.0).reshape(3, 3) / temperature).softmax(dim=-1)  # (3, 3)
        heatmap.update(weights, title=f"T = {temperature:.1f}")
        heatmap.outline_row(TOKENS.index(row))
        bars.update(weights[TOKENS.index(row)], highlight=TOKENS.index(row))

    live = LiveFigure(fig, redraw, {"row": choice("row", TOKENS),
                                    "temperature": float_slider("T", 1.0, 0.5, 5.0, 0.5)})
    return live, heatmap, bars


def test_fast_path_pixels_equal_a_full_render():
    live, heatmap, _ = _dashboard()
    full_before = live.renderer.full_renders
    for temperature in (2.0, 0.5, 3.5):
        live.controls["temperature"].value = temperature
    live.controls["row"].value = "c"
    assert live.renderer.full_renders == full_before, "builder updates took the slow path"
    assert live.renderer.fast_renders == 4
    reference = _plain_render(live)
    assert (_pixels(bytes(live.image.value)) == reference).all()
    assert heatmap.ax.get_title() == "T = 3.5"


def test_a_plain_artist_change_takes_the_full_path_and_stays_correct():
    live, heatmap, bars = _dashboard()
    fast_before, full_before = live.renderer.fast_renders, live.renderer.full_renders
    bars.ax.set_ylabel("weight")  # not animated: the background must be drawn again
    heatmap.image.set_clim(0.0, 0.5)  # the colour bar changes too
    live.refresh()
    assert live.renderer.full_renders == full_before + 1 and live.renderer.fast_renders == fast_before
    full_path_png = bytes(live.image.value)
    live.controls["temperature"].value = 2.5  # and back on the fast path
    assert live.renderer.fast_renders == fast_before + 1
    live.controls["temperature"].value = 1.0
    assert bytes(live.image.value) == full_path_png  # same state: fast path = full path, byte for byte
    # (savefig changes the figure's dpi and back, so it comes after the renders it checks)
    assert (_pixels(bytes(live.image.value)) == _plain_render(live)).all()


def test_slider_steps_change_the_picture_without_new_figures_or_output(capsys):
    import matplotlib.pyplot as plt

    live, heatmap, bars = _dashboard()
    figures, children = plt.get_fignums(), list(live.children)
    before_image, before_png = heatmap.image.get_array().copy(), bytes(live.image.value)
    live.controls["temperature"].value = 4.0
    assert not (heatmap.image.get_array() == before_image).all(), "heatmap data did not change"
    assert bytes(live.image.value) != before_png, "picture did not change"
    assert [round(b.get_height(), 4) for b in bars.bars] == \
        [round(v, 4) for v in (torch.arange(3.0) / 4.0).softmax(dim=-1).tolist()]
    assert plt.get_fignums() == figures and list(live.children) == children
    assert capsys.readouterr() == ("", "")


def test_static_picture_is_the_initial_state():
    live, _, _ = _dashboard()
    first = live._repr_mimebundle_()["image/png"]
    live.controls["temperature"].value = 5.0
    assert live._repr_mimebundle_()["image/png"] == first
    live.controls["temperature"].value = 1.0
    assert bytes(live.image.value) == live.initial_png  # same state, same pixels, same bytes


def test_extra_animated_artists_stay_on_the_fast_path():
    fig = new_figure()
    ax = fig.axes[0]
    ax.plot([0, 1, 2], [2, 0, 1])
    marker = ax.axvline(0.0, color="black")
    live = LiveFigure(fig, lambda x: marker.set_xdata([x, x]), {"x": float_slider("x", 0.0, 0.0, 2.0, 0.5)},
                      animated=[marker])
    live.controls["x"].value = 1.5
    assert live.renderer.fast_renders == 1 and live.renderer.full_renders == 1
    assert (_pixels(bytes(live.image.value)) == _plain_render(live)).all()
    with pytest.raises(TypeError, match="animated must hold matplotlib artists"):
        LiveFigure(new_figure(), lambda x: None, {"x": int_slider("x", 0, 0, 1)}, animated=["line"])


def test_in_place_renderer_rejects_bad_arguments():
    with pytest.raises(TypeError, match="fig must be a matplotlib Figure"):
        InPlaceRenderer("fig")
    with pytest.raises(ValueError, match="dpi must be a positive number"):
        InPlaceRenderer(new_figure(), dpi=0)


def _cell_ink_centres(use_cell_values: bool):
    import io

    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from PIL import Image

    from helpers.plotting import CellValues

    fig = Figure(figsize=(4, 3), dpi=80)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.imshow(np.zeros((4, 5)), cmap="gray_r", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_axis_off()
    values = torch.rand(4, 5, generator=torch.Generator().manual_seed(1))
    cells = CellValues(ax, 4, 5) if use_cell_values else None
    for i in range(4):
        for j in range(5):
            if cells:
                cells.cells[i][j].set_text(f"{values[i, j]:.2f}")
            else:
                ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=9)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    ink = np.asarray(Image.open(buffer).convert("L")) < 128
    height = ink.shape[0]
    centres = []
    for i in range(4):
        for j in range(5):
            (x0, y0), (x1, y1) = ax.transData.transform([(j - 0.5, i + 0.5), (j + 0.5, i - 0.5)])
            rows, cols = np.nonzero(ink[round(height - y1):round(height - y0), round(x0):round(x1)])
            centres.append((rows.mean() + round(height - y1), cols.mean() + round(x0)))
    return np.array(centres)


def test_cell_values_sit_where_centred_text_would():
    """CellValues (one artist for all numbers) places each number like Text(ha/va='center').

    It snaps each string to a whole pixel (so its bitmap can be cached), Text does not: the ink may move by up
    to half a pixel each way, and anti-aliasing moves a centroid a little more. A misplaced row or column
    (a flipped y axis, a missing centring) moves it by a whole cell, tens of pixels.
    """
    import numpy as np

    shift = np.abs(_cell_ink_centres(True) - _cell_ink_centres(False))
    assert shift.max() <= 1.5 and shift.mean() <= 0.75


def test_cell_text_api_used_by_the_notebooks():
    heatmap = Heatmap(new_figure().axes[0], torch.eye(3), TOKENS, TOKENS)
    cell = heatmap.texts[1][1]
    assert cell.get_text() == "1.00"
    cell.set_text("drop")
    cell.set_color("#ff7070")
    cell.set_visible(False)
    assert (cell.get_text(), cell.get_color(), cell.get_visible()) == ("drop", "#ff7070", False)
    heatmap.update(torch.zeros(3, 3))
    assert heatmap.texts[1][1].get_text() == "0.00"


@pytest.mark.parametrize("channels", [3, 4])
def test_encode_png_round_trips_through_pillow(channels):
    import io

    import numpy as np
    from PIL import Image

    from helpers.widgets import encode_png

    pixels = np.random.default_rng(0).integers(0, 256, size=(7, 11, channels), dtype=np.uint8)
    pixels[2:5] = 255  # a flat band, as in a plot
    decoded = np.asarray(Image.open(io.BytesIO(encode_png(pixels))))
    assert decoded.shape == pixels.shape and np.array_equal(decoded, pixels)


# --------------------------------------------------------------------------- glyph cache, optional

def test_live_figures_use_the_canvas_the_switch_asks_for(text_cache):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from helpers._text_cache import CachingCanvasAgg, text_cache_status

    live, _ = _live_figure()
    used, why = text_cache_status()
    if text_cache == "plain-agg":
        assert type(live.renderer.canvas) is FigureCanvasAgg and not used and "use_text_cache(False)" in why
    else:
        assert isinstance(live.renderer.canvas, CachingCanvasAgg) == used
        assert why.startswith("on" if used else "off")


def test_text_cache_is_detected_not_assumed(monkeypatch):
    """Where matplotlib lacks a private piece the cache calls (3.10 has no RenderMode, for one), or the probe
    picture's pixels differ, live pictures fall back to plain Agg and say why; importing never fails."""
    from matplotlib.ft2font import FT2Font

    from helpers import _text_cache

    monkeypatch.setattr(_text_cache, "_detected", None)
    _text_cache.use_text_cache(None)
    monkeypatch.delattr(FT2Font, "_layout", raising=False)
    usable, why = _text_cache._detect()
    assert not usable and "FT2Font._layout" in why and why.endswith("(pictures drawn by plain Agg)")
    monkeypatch.setattr(_text_cache, "RenderMode", None)
    assert "ft2font.RenderMode" in _text_cache._detect()[1]


def test_text_cache_probe_rejects_different_pixels(monkeypatch):
    from helpers import _text_cache

    if _text_cache._missing():
        pytest.skip("this matplotlib cannot use the cache at all")
    real = _text_cache._probe_pixels
    monkeypatch.setattr(_text_cache, "_probe_pixels",
                        lambda cls: [p + (cls is _text_cache.CachingCanvasAgg) for p in real(cls)])
    assert _text_cache._detect() == (False, "off: the probe picture's pixels differ from plain Agg here "
                                            "(pictures drawn by plain Agg)")


def test_notebook_display_carries_the_live_widget_and_a_static_picture(monkeypatch):
    """ipywidgets 8 displays a widget through _repr_mimebundle_, ipywidgets 7 (Colab) through
    _ipython_display_: both must hand the front end the widget view and the static PNG."""
    import ipywidgets

    live, _ = _live_figure()
    if ipywidgets.__version__.startswith("7."):
        import IPython.display

        shown = []
        monkeypatch.setattr(IPython.display, "display", lambda *objs, **kwargs: shown.append((objs, kwargs)))
        live._ipython_display_()
        ((bundle,), kwargs), = shown
        assert kwargs == {"raw": True}
    else:
        assert not hasattr(live, "_ipython_display_")
        bundle = live._repr_mimebundle_()
    assert bundle["text/plain"] == "LiveFigure(row='a', scale=1)"
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == live.model_id
    assert bundle["image/png"].startswith("iVBOR")
