"""Notebook 14's pictures: every control changes the picture, and the picture shows kv_cache_bytes's numbers."""

import math

import numpy as np
import pytest

from helpers.generation import kv_cache_bytes
from helpers.live.lesson14 import DTYPES, cache_memory_explorer, print_cache_table, recall_figure
from helpers.plotting import figure_to_png

MODELS = {"A": dict(num_layers=4, num_kv_heads=2, head_dim=8),
          "B (window)": dict(num_layers=4, num_kv_heads=2, head_dim=8, window_size=4096),
          "C (latent)": dict(num_layers=4, latent_dim=16, rope_dim=4)}
LIMITS = {"A": 8192, "B (window)": 131072, "C (latent)": 131072}


def test_every_control_changes_the_picture_and_the_numbers_follow():
    view = cache_memory_explorer(MODELS, LIMITS, "A", num_tokens=2048)
    pictures = {bytes(view.image.value)}
    for name, value in (("num_tokens", 16384), ("batch_size", 8), ("dtype", "fp32"), ("model", "B (window)")):
        view.controls[name].value = value
        pictures.add(bytes(view.image.value))
    assert len(pictures) == 5, "every control must change the picture"
    gib = kv_cache_bytes(**MODELS["B (window)"], num_tokens=16384, batch_size=8, dtype=DTYPES["fp32"]) / 2**30
    curve_ax, bars_ax = view.fig.axes
    assert f"{gib:.2f} GiB for 8 × 16,384 tokens in fp32" in curve_ax.get_title()
    widths = [line.get_xdata()[0] for line in bars_ax.lines]
    expected = [kv_cache_bytes(**spec, num_tokens=16384, batch_size=8, dtype=DTYPES["fp32"]) / 2**30
                for spec in MODELS.values()]
    assert curve_ax.lines[1].get_linestyle() == "--"                # a window: dashed
    assert math.isnan(widths[0])                                   # A cannot read 16,384 tokens: no dot
    assert np.allclose(widths[1:], expected[1:])
    colours = [line.get_color() for line in curve_ax.lines[:3]]
    assert [line.get_color() for line in bars_ax.lines] == colours          # one colour per model in both panels
    assert [line.get_markeredgecolor() for line in bars_ax.lines] == [colours[0], "black", colours[2]]
    assert bars_ax.texts[0].get_text().startswith("–")                     # only a dash for A
    a_line = curve_ax.lines[0].get_ydata()
    assert math.isnan(a_line[-1])                                  # past model A's 8,192-token context: no curve
    assert "past its 8,192-token context" not in curve_ax.get_title()
    view.controls["model"].value = "A"
    assert "past its 8,192-token context" in curve_ax.get_title()
    assert repr(view) == "LiveFigure(model='A', num_tokens=16384, batch_size=8, dtype='fp32')"


def test_bad_descriptions_are_named():
    with pytest.raises(ValueError, match="context_limits"):
        cache_memory_explorer(MODELS, {"A": 1})
    with pytest.raises(ValueError, match="model must be one of"):
        cache_memory_explorer(MODELS, LIMITS, "D")
    with pytest.raises(ValueError, match="num_kv_heads and head_dim are needed"):
        cache_memory_explorer({"x": dict(num_layers=2)}, {"x": 1024})


def test_the_recall_figure_draws_each_method_and_chance():
    results = {"softmax": [1.0, 1.0, 1.0], "linear": [0.9, 0.5, 0.2]}
    fig = recall_figure([2, 4, 8], results, dim=4)
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.lines]
    assert labels[:2] == ["softmax", "linear"] and "chance, 1 / N" in labels
    assert list(ax.lines[1].get_ydata()) == [0.9, 0.5, 0.2]
    assert figure_to_png(fig).startswith(b"\x89PNG")


def test_crossings_of_the_chosen_model_are_marked_at_the_exact_token():
    view = cache_memory_explorer(MODELS, LIMITS, "C (latent)", num_tokens=2048)
    curve_ax = view.fig.axes[0]

    def size(name, tokens):
        return kv_cache_bytes(**MODELS[name], num_tokens=tokens)

    first = next(t for t in range(1, 131073) if size("C (latent)", t) > size("B (window)", t))   # brute force
    assert first == 6554                                            # 4,096 x 256 / 160 bytes, rounded up
    written = [text.get_text() for text in curve_ax.texts if text.get_text().startswith("crosses")]
    assert written == [f"crosses B (window)\nat {first:,} tokens"]  # and none with A, which C stays below
    view.controls["model"].value = "A"
    assert not [text for text in curve_ax.texts if text.get_text().startswith("crosses")]


def test_the_cache_table_prints_kv_cache_bytes_and_a_dash_past_a_context(capsys):
    print_cache_table(MODELS, LIMITS, lengths=(1024, 16384))
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["model", "per", "token", "at", "1,024", "tokens", "at", "16,384", "tokens"]
    assert [row[:20].strip() for row in rows] == list(MODELS)
    a_row, latent_row = rows[0].split(), rows[2].split()
    assert a_row[1] == f"{kv_cache_bytes(**MODELS['A']) / 1024:.1f}" and a_row[-1] == "-"   # A reads 8,192 at most
    assert latent_row[-2] == f"{kv_cache_bytes(**MODELS['C (latent)'], num_tokens=16384) / 2**30:.3f}"
    with pytest.raises(ValueError, match="context_limits"):
        print_cache_table(MODELS, {"A": 1024})


def test_the_chosen_model_is_outlined_and_the_last_number_fits():
    view = cache_memory_explorer(MODELS, LIMITS, "C (latent)", num_tokens=16384)
    dots_ax = view.fig.axes[1]
    assert "black outline: the chosen model" in dots_ax.get_title()
    largest = np.nanmax([line.get_xdata()[0] for line in dots_ax.lines])        # A reads no 16,384 tokens
    assert largest * 1.35 * 2 < dots_ax.get_xlim()[1] <= largest * 5     # room for its label, no empty decade
