"""Notebook 02's pictures and numbers: the scaling explorer follows its controls and opens where it is told, the
weights use a fixed 0..1 scale, the look-up diagram writes the real numbers, and the worked examples give the values
the lesson quotes (Raschka 2024, chapter 3, for "journey")."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import helpers
from helpers.live.lesson02 import (SCALED, UNSCALED, demo_inputs, demo_weights, explorer_title, scaling_explorer,
                                   scores_and_weights)


def _shown(explorer) -> torch.Tensor:
    return torch.as_tensor(np.asarray(explorer.heatmap.image.get_array()))


def test_demo_weights_match_the_formula():
    queries, keys = demo_inputs()
    expected = torch.softmax(queries[:, :16] @ keys[:, :16].T / (math.sqrt(16) * 2.0), dim=-1)
    torch.testing.assert_close(demo_weights(16, True, 2.0), expected)
    torch.testing.assert_close(demo_weights(16, False, 2.0), torch.softmax(queries[:, :16] @ keys[:, :16].T / 2.0, -1))
    with pytest.raises(TypeError, match="scaled"):
        demo_weights(16, SCALED)


def test_explorer_follows_d_k_and_scaling():
    explorer = scaling_explorer()
    assert repr(explorer) == "LiveFigure(d_k=64, scaling='divide by √d_k', temperature=1.0)"
    first = bytes(explorer.image.value)
    explorer.controls["d_k"].value = 1024
    explorer.controls["scaling"].value = UNSCALED
    torch.testing.assert_close(_shown(explorer), demo_weights(1024, False, 1.0))
    largest = _shown(explorer).max(dim=-1).values
    assert [f"{w:.2f}" for w in largest.tolist()] == ['0.91', '0.95', '1.00', '0.89', '1.00', '1.00']
    explorer.controls["scaling"].value = SCALED
    torch.testing.assert_close(_shown(explorer), demo_weights(1024, True, 1.0))
    assert _shown(explorer).max() < 0.5
    heights = [bar.get_height() for bar in explorer.query_bars.bars]
    assert heights == pytest.approx(demo_weights(1024, True, 1.0)[0].tolist())
    assert bytes(explorer.image.value) != first
    explorer.controls["d_k"].value = 64
    assert bytes(explorer.image.value) == first


def test_explorer_temperature_sharpens_and_flattens():
    explorer = scaling_explorer()
    explorer.controls["temperature"].value = 0.1
    cold = _shown(explorer).max(dim=-1).values
    explorer.controls["temperature"].value = 5.0
    hot = _shown(explorer)
    explorer.controls["temperature"].value = 1.0
    warm = _shown(explorer).max(dim=-1).values
    assert (cold > warm).all() and cold.min() > 0.6
    assert (hot - 1 / 6).abs().max() < 0.1
    title = explorer.heatmap.ax.title.get_text()
    assert "τ" not in title and "\\tau" not in title and "T =" not in title, "at τ = 1 the title leaves τ out"
    explorer.controls["temperature"].value = 0.5
    assert "τ = 0.5" in explorer.heatmap.ax.title.get_text()


def test_explorer_labels_count_from_zero_and_scale_is_fixed():
    explorer = scaling_explorer()
    labels = [t.get_text() for t in explorer.heatmap.ax.get_yticklabels()]
    assert labels[0] == "query 0" and labels[-1] == "query 5"
    assert explorer.heatmap.image.get_clim() == (0.0, 1.0)


def test_scores_and_weights_puts_the_weights_on_0_to_1():
    tokens, inputs = helpers.your_journey()
    scores = inputs @ inputs.T
    fig = scores_and_weights(scores, torch.softmax(scores, dim=-1), tokens)
    weights_image = fig.axes[1].images[0]
    assert weights_image.get_clim() == (0.0, 1.0)
    fig.canvas.draw() if hasattr(fig.canvas, "get_renderer") else None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    renderer = FigureCanvasAgg(fig).get_renderer()
    colorbar_axes = [ax for ax in fig.axes if ax not in (fig.axes[0], fig.axes[1])]
    first_label = colorbar_axes[0].yaxis.label.get_window_extent(renderer)
    second_panel = fig.axes[1].get_tightbbox(renderer)
    assert second_panel.x0 - first_label.x1 >= 0.25 * fig.dpi, "the colour bar's label runs into the next panel"


def test_explorer_opens_at_the_setting_it_is_given():
    explorer = scaling_explorer(d_k=1024, scaled=False)
    assert repr(explorer) == "LiveFigure(d_k=1024, scaling='no scaling', temperature=1.0)"
    torch.testing.assert_close(_shown(explorer), demo_weights(1024, False, 1.0))
    title = explorer.heatmap.ax.title.get_text()
    assert title.startswith("no scaling:") and "\\sqrt{d_k}" not in title and "$d_k$ = 1024" in title
    assert _shown(explorer).max(dim=-1).values.min() > 0.85  # the stored picture shows the saturation
    cold = scaling_explorer(d_k=64, scaled=True, temperature=0.3)
    assert cold.controls["temperature"].value == pytest.approx(0.3)
    torch.testing.assert_close(_shown(cold), demo_weights(64, True, 0.3))


def test_explorer_titles_write_the_formula_it_draws_and_axes_name_i_and_j():
    """The demo vectors are random, not tokens: axes say query i / key j; the title says whether scaling is on."""
    explorer = scaling_explorer(d_k=64, scaled=True, temperature=0.5)
    title = explorer.heatmap.ax.title.get_text()
    assert title == explorer_title(64, True, 0.5)
    assert "q_i \\cdot k_j" in title and "\\sqrt{d_k}" in title and "\\tau" in title and "no scaling" not in title
    assert "$S" not in title  # S is the course's name for X X^T of the token example, not these random scores
    explorer.controls["scaling"].value = UNSCALED
    assert explorer.heatmap.ax.title.get_text().startswith("no scaling:")
    assert explorer.heatmap.ax.get_ylabel() == "query $i$" and explorer.heatmap.ax.get_xlabel() == "key $j$"
    assert explorer.query_bars.ax.get_xlabel() == "key $j$"
    assert "token" not in explorer.heatmap.ax.get_ylabel() + explorer.heatmap.ax.get_xlabel()


def test_the_float32_limit_section_2_states():
    """e^s overflows a float32 for s beyond ln(max) = 88.7228...: 88.72 is still finite, 88.73 is not."""
    largest = torch.finfo(torch.float32).max
    assert f"{math.log(largest):.2f}" == "88.72" and f"{largest:.3g}" == "3.4e+38"
    finite, overflowed, underflowed = torch.exp(torch.tensor([88.72, 88.73, -110.0])).tolist()
    assert math.isfinite(finite) and overflowed == math.inf and underflowed == 0.0


def test_the_course_softmax_helper_gives_the_shifted_weights():
    """Section 2 computes the shifted weights by hand; the course's helper (forbidden in exercise 1) agrees."""
    large_scores = torch.tensor([1000.0, 1001.0, 1002.0])
    shifted = torch.exp(large_scores - large_scores.max())
    torch.testing.assert_close(helpers.softmax_stable(large_scores), shifted / shifted.sum())


def test_the_numbers_the_lesson_quotes():
    """What the lesson says after the explorer: largest weights without and with scaling, and at tau 0.1 and 5."""
    largest = {setting: demo_weights(1024, *setting).max(dim=-1).values for setting in
               ((False, 1.0), (True, 1.0), (True, 0.1), (True, 5.0))}
    assert (largest[(False, 1.0)] > 0.885).sum() == 6 and (largest[(False, 1.0)] > 0.995).sum() == 3
    assert 0.295 < largest[(True, 1.0)].min() and largest[(True, 1.0)].max() < 0.435
    assert 0.65 < largest[(True, 0.1)].min() and largest[(True, 0.1)].max() > 0.995   # 0.66 .. 1.00
    assert 0.185 < largest[(True, 5.0)].min() and largest[(True, 5.0)].max() < 0.225   # 0.19 .. 0.22


def test_worked_examples_give_the_quoted_values():
    hello_tokens, hello_inputs = helpers.hello_shiny_sun()
    scores = hello_inputs @ hello_inputs[1]
    weights = torch.softmax(scores, dim=0)
    context = weights @ hello_inputs
    torch.testing.assert_close(scores, torch.tensor([0.7842, 1.3569, 1.2487]), atol=1e-4, rtol=0)
    torch.testing.assert_close(weights, torch.tensor([0.2291, 0.4063, 0.3646]), atol=1e-4, rtol=0)
    torch.testing.assert_close(context, torch.tensor([0.3990, 0.3854, 0.8610]), atol=1e-4, rtol=0)
    # The deep dive "checking z_1 by hand": from the four-decimal weights, the second component is 0.3854, and
    # rounding the weights moves it by less than 0.0001 (each weight is off by at most 0.00005, the components add
    # up to 1.1).
    by_hand = 0.2291 * 0.22 + 0.4063 * 0.34 + 0.3646 * 0.54
    assert round(by_hand, 4) == 0.3854 and 0.00005 * (0.22 + 0.34 + 0.54) < 0.0001
    # Raschka (2024), chapter 3: "journey" as the query.
    tokens, inputs = helpers.your_journey()
    journey_scores = inputs @ inputs[1]
    journey_weights = torch.softmax(journey_scores, dim=0)
    torch.testing.assert_close(journey_scores, torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]),
                               atol=1e-4, rtol=0)
    torch.testing.assert_close(journey_weights, torch.tensor([0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]),
                               atol=1e-4, rtol=0)
    torch.testing.assert_close(journey_weights @ inputs, torch.tensor([0.4419, 0.6515, 0.5683]), atol=1e-4, rtol=0)
    all_weights = torch.softmax(inputs @ inputs.T, dim=-1)
    assert 0.098 < all_weights.min() < 0.099 and 0.23 < all_weights.max() < 0.24
    # "All six context vectors are close to [0.44, 0.63, 0.56] (no entry is more than 0.04 away)."
    all_context = all_weights @ inputs
    assert (all_context - torch.tensor([0.44, 0.63, 0.56])).abs().max() < 0.04


def test_retrieval_diagram_writes_the_context_vector():
    from helpers.diagrams.retrieval import retrieval_diagram

    tokens, inputs = helpers.hello_shiny_sun()
    weights = torch.softmax(inputs @ inputs[1], dim=0)
    fig = retrieval_diagram(tokens, 1, inputs=inputs, scores=inputs @ inputs[1], weights=weights,
                            context=weights @ inputs)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert {"0.40", "0.39", "0.86"} <= set(texts)
    with pytest.raises(ValueError, match="one per component"):
        retrieval_diagram(tokens, 1, inputs=inputs, context=torch.zeros(2))


def test_retrieval_diagram_of_notebook_02_is_readable():
    """Larger text at notebook width (numbers still inside their cells), and the "compare" arrow ends at the labels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.patches import FancyArrowPatch

    from helpers.diagrams.retrieval import retrieval_diagram

    tokens, inputs = helpers.hello_shiny_sun()
    weights = torch.softmax(inputs @ inputs[1], dim=0)
    plain = retrieval_diagram(tokens, 1, inputs=inputs, scores=inputs @ inputs[1], weights=weights,
                              context=weights @ inputs)
    fig = retrieval_diagram(tokens, 1, inputs=inputs, scores=inputs @ inputs[1], weights=weights,
                            context=weights @ inputs, text_scale=1.2, captions="dark")
    assert fig.get_figwidth() <= 12 and fig.get_figwidth() == plain.get_figwidth()
    ax = fig.axes[0]
    # The captions under the grids, the context vector's formula first, are as large and dark as the names.
    from matplotlib.colors import to_rgb
    names = [t for t in ax.texts if t.get_fontweight() == "bold"]
    for caption in ("$\\sum_j a_{1j} v_j$", "scores", "weights", "$(T, d_k) = (3, 3)$", "$(T, d_v) = (3, 3)$"):
        drawn = [t for t in ax.texts if t.get_text() == caption]
        assert len(drawn) == 1, caption
        assert drawn[0].get_fontsize() == names[0].get_fontsize() and max(to_rgb(drawn[0].get_color())) <= 0.2
    grey = [t for t in plain.axes[0].texts if t.get_text() == "$\\sum_j a_{1j} v_j$"]
    assert grey[0].get_fontsize() < names[0].get_fontsize() / 1.2, "by default (notebook 01) they stay small"
    with pytest.raises(ValueError, match="captions"):
        retrieval_diagram(tokens, 1, captions="black")
    numbers = [t for t in ax.texts if t.get_text() == "0.34"]
    assert min(t.get_fontsize() for t in numbers) >= 11.5
    renderer = FigureCanvasAgg(fig).get_renderer()
    to_data = ax.transData.inverted()
    for text in numbers:  # each number stays inside its one-unit cell
        (x0, _), (x1, _) = to_data.transform(text.get_window_extent(renderer))
        assert x1 - x0 < 0.95
    labels = [t for t in ax.texts if t.get_ha() == "right"]
    left_of_labels = min(to_data.transform(t.get_window_extent(renderer))[0, 0] for t in labels)
    compare = [p for p in ax.patches if isinstance(p, FancyArrowPatch)][0]
    arrow_end = max(x for x, _ in compare._posA_posB)
    assert 0 < left_of_labels - arrow_end < 0.4, "the arrow stops right before the token labels"
    with pytest.raises(ValueError, match="text_scale"):
        retrieval_diagram(tokens, 1, text_scale=5)
