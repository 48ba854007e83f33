"""Notebook 05's pictures: the explorer's sliders move the picture, and what it shows is the draw it claims."""

from __future__ import annotations

import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg

import helpers
from helpers.diagrams.dropout import dropout_diagram
from helpers.dropout import attention_dropout
from helpers.live.lesson05 import dropout_draw_figure, dropout_explorer, monte_carlo_figure
from helpers.plotting import figure_to_png


@pytest.fixture(scope="module")
def journey():
    tokens, inputs = helpers.your_journey()
    torch.manual_seed(789)
    module = helpers.CausalAttention(d_in=3, d_out=2, context_length=6, dropout=0.0)
    with torch.no_grad():
        _, weights = module(inputs.unsqueeze(0), return_weights=True)
    return tokens, weights[0]


def shown(live):
    return torch.as_tensor(live.heatmap.image.get_array())


def test_p_zero_shows_the_weights_untouched(journey):
    tokens, attn_weights = journey
    live = dropout_explorer(attn_weights, tokens)
    live.controls["p"].value = 0.0
    torch.testing.assert_close(shown(live), attn_weights)
    heights = torch.tensor([bar.get_height() for bar in live.bars.bars])
    torch.testing.assert_close(heights, torch.ones(6))
    assert live.heatmap.image.get_clim() == (0.0, 1.0)


def test_sliders_show_the_draw_of_that_seed_with_survivors_rescaled(journey):
    tokens, attn_weights = journey
    live = dropout_explorer(attn_weights, tokens)
    start = bytes(live.image.value)
    live.controls["p"].value = 0.8
    live.controls["seed"].value = 7
    assert bytes(live.image.value) != start, "moving the sliders must change the picture"
    expected, keep = attention_dropout(attn_weights, 0.8, torch.Generator().manual_seed(7))
    torch.testing.assert_close(shown(live), expected)
    assert torch.allclose(shown(live)[keep], 5 * attn_weights[keep])
    heights = torch.tensor([bar.get_height() for bar in live.bars.bars])
    torch.testing.assert_close(heights, expected.sum(dim=-1))
    assert live.heatmap.image.get_clim()[1] == pytest.approx(5.0)
    means = torch.tensor(live.mean_dots.get_ydata())
    assert bool(((means - 1).abs() < 0.25).all())
    dropped_cells = (~keep & ~helpers.causal_mask(6)).nonzero().tolist()
    assert dropped_cells and len(live.crosses.get_segments()) == 2 * len(dropped_cells)  # one cross per drop
    assert all(live.heatmap.texts[i][j].get_text() == "" for i, j in dropped_cells)
    assert all(live.heatmap.texts[i][j].get_text() == "" for i, j in helpers.causal_mask(6).nonzero().tolist())
    assert str(live) == "LiveFigure(p=0.8, seed=7)"


def test_back_to_the_start_gives_the_first_picture_again(journey):
    tokens, attn_weights = journey
    live = dropout_explorer(attn_weights, tokens)
    first = bytes(live.image.value)
    live.controls["seed"].value = 8
    live.controls["seed"].value = 123
    assert bytes(live.image.value) == first


def test_future_cells_are_grey_and_dropped_cells_crossed(journey):
    tokens, attn_weights = journey
    dropped, keep = attention_dropout(attn_weights, 0.5, torch.Generator().manual_seed(123))
    fig = dropout_draw_figure(attn_weights, dropped, keep, tokens, 0.5)
    after = fig.axes[1]
    grey = [patch for patch in after.patches if patch.get_facecolor()[:3] == pytest.approx((0x96 / 255,) * 3)]
    assert len(grey) == 15                                   # the 15 cells above the diagonal of a 6x6 grid
    crosses = after.collections[-1]
    assert len(crosses.get_segments()) == 2 * int((~keep & ~helpers.causal_mask(6)).sum())


def test_static_figures_draw_and_label_their_axes(journey):
    tokens, attn_weights = journey
    dropped, keep = attention_dropout(attn_weights, 0.5, torch.Generator().manual_seed(123))
    fig = dropout_draw_figure(attn_weights, dropped, keep, tokens, 0.5)
    before, after = fig.axes[0], fig.axes[1]  # the three panels come first, then the two colour bars
    for ax in (before, after):
        assert ax.get_xlabel().startswith("key token") and ax.get_ylabel() == "query token"
    assert figure_to_png(fig)[:4] == b"\x89PNG"
    sums = torch.stack([row.sum(dim=-1) for row in [dropped] * 3])
    fig = monte_carlo_figure(sums, torch.ones(6), tokens, 0.5)
    assert figure_to_png(fig)[:4] == b"\x89PNG"


def test_colour_bar_labels_do_not_reach_the_next_panel(journey):
    tokens, attn_weights = journey
    dropped, keep = attention_dropout(attn_weights, 0.5, torch.Generator().manual_seed(123))
    fig = dropout_draw_figure(attn_weights, dropped, keep, tokens, 0.5)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    panels, colorbars = fig.axes[:3], fig.axes[3:]
    for colorbar, next_panel in zip(colorbars, panels[1:]):
        label_right = colorbar.yaxis.label.get_window_extent(renderer).x1
        next_left = next_panel.yaxis.label.get_window_extent(renderer).x0
        assert label_right + 20 < next_left, "a colour bar's label runs into the next panel's axis label"


def test_diagram_is_drawn_from_the_tensors(journey):
    _, attn_weights = journey
    _, keep = attention_dropout(attn_weights, 0.5, torch.Generator().manual_seed(123))
    fig = dropout_diagram(attn_weights, keep, 0.5)
    assert fig.get_figwidth() <= 12.0
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "2.00" in texts                       # row 0 survived this draw: 1.00 -> 2.00
    assert texts.count("1") == int(keep.sum())  # the mask's coin flips, the future's included (written in white)
    white = [t for t in fig.axes[0].texts if t.get_color() == "white"]
    assert len(white) == 15                      # one per future cell of m
    with pytest.raises(ValueError, match="keep must be a bool tensor"):
        dropout_diagram(attn_weights, keep.float(), 0.5)
    with pytest.raises(ValueError, match="p must be in"):
        dropout_diagram(attn_weights, keep, 1.0)
