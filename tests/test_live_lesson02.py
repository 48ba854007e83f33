"""Notebook 02's pictures: the scaling explorer follows its controls, the weights use a fixed 0..1 scale."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import helpers
from helpers.live.lesson02 import SCALED, UNSCALED, demo_inputs, demo_weights, scaling_explorer, scores_and_weights


def _shown(explorer) -> torch.Tensor:
    return torch.as_tensor(np.asarray(explorer.heatmap.image.get_array()))


def test_demo_weights_match_the_formula():
    queries, keys = demo_inputs()
    expected = torch.softmax(queries[:, :16] @ keys[:, :16].T / (math.sqrt(16) * 2.0), dim=-1)
    torch.testing.assert_close(demo_weights(16, SCALED, 2.0), expected)
    torch.testing.assert_close(demo_weights(16, UNSCALED, 2.0), torch.softmax(queries[:, :16] @ keys[:, :16].T / 2.0, -1))
    with pytest.raises(ValueError, match="scaling"):
        demo_weights(16, "sqrt")


def test_explorer_follows_d_k_and_scaling():
    explorer = scaling_explorer()
    assert repr(explorer) == "LiveFigure(d_k=64, scaling='divide by √d_k', temperature=1.0)"
    first = bytes(explorer.image.value)
    explorer.controls["d_k"].value = 1024
    explorer.controls["scaling"].value = UNSCALED
    torch.testing.assert_close(_shown(explorer), demo_weights(1024, UNSCALED, 1.0))
    largest = _shown(explorer).max(dim=-1).values
    assert [f"{w:.2f}" for w in largest.tolist()] == ['0.91', '0.95', '1.00', '0.89', '1.00', '1.00']
    explorer.controls["scaling"].value = SCALED
    torch.testing.assert_close(_shown(explorer), demo_weights(1024, SCALED, 1.0))
    assert _shown(explorer).max() < 0.5
    heights = [bar.get_height() for bar in explorer.query_bars.bars]
    assert heights == pytest.approx(demo_weights(1024, SCALED, 1.0)[0].tolist())
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
    assert "τ = 1.0" in explorer.heatmap.ax.title.get_text() and "T =" not in explorer.heatmap.ax.title.get_text()


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
