"""Notebook 05's pictures: the explorer's sliders move the picture, and what it shows is the draw it claims."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg

import helpers
from helpers.diagrams.dropout import dropout_diagram
from helpers.dropout import attention_dropout, dropout_row_sums
from helpers.live.lesson05 import dropout_explorer, monte_carlo_figure, show_source_lines
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
    assert live.heatmap.image.get_clim() == (0.0, 1.0)  # the scale ends at this draw's largest weight


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
    assert live.heatmap.image.get_clim() == pytest.approx((0.0, float(expected.max())))  # up to this draw's largest
    assert float(expected.max()) < 5.0  # row 0's 1.0 was dropped: a fixed top of 1 / (1 - p) would waste the scale
    assert "0 to this draw's largest" in live.heatmap.colorbar.ax.get_ylabel()  # the label says what the top is
    # The row-sum axis is the same at every seed: it reaches past the largest possible sum, which the title names.
    assert live.bars.ax.get_ylim()[1] > 5.0 and live.bars.ax.get_title().endswith("at most 1/(1-p) = 5.00)")
    dropped_mask = torch.as_tensor(np.ma.getmaskarray(live.heatmap.image.get_array()))
    assert torch.equal(dropped_mask, ~keep & ~helpers.causal_mask(6))  # dropped cells are drawn white (bad colour)
    assert live.heatmap.image.get_cmap().get_bad()[:3] == pytest.approx((1.0, 1.0, 1.0))
    means = torch.tensor(live.mean_dots.get_ydata())
    assert bool(((means - 1).abs() < 0.25).all())
    # The dots are the means the lesson prints: the same 2,000 draws (seed 0) whatever the seed slider says.
    printed = dropout_row_sums(attn_weights, 0.8, 2_000, torch.Generator().manual_seed(0)).mean(dim=0)
    torch.testing.assert_close(means, printed.double(), check_dtype=False)
    live.controls["seed"].value = 8
    torch.testing.assert_close(torch.tensor(live.mean_dots.get_ydata()), means)
    live.controls["seed"].value = 7
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
    live = dropout_explorer(attn_weights, tokens, p=0.5, seed=123)
    _, keep = attention_dropout(attn_weights, 0.5, torch.Generator().manual_seed(123))
    grey = [patch for patch in live.heatmap.ax.patches
            if patch.get_facecolor()[:3] == pytest.approx((0x96 / 255,) * 3)]
    assert len(grey) == 15                                   # the 15 cells above the diagonal of a 6x6 grid
    assert len(live.crosses.get_segments()) == 2 * int((~keep & ~helpers.causal_mask(6)).sum())


def test_monte_carlo_figure_draws_and_labels_its_axes(journey):
    tokens, attn_weights = journey
    dropped, _ = attention_dropout(attn_weights, 0.5, torch.Generator().manual_seed(123))
    sums = torch.stack([row.sum(dim=-1) for row in [dropped] * 3])
    fig = monte_carlo_figure(sums, tokens, 0.5)
    assert all(ax.get_ylabel() for ax in fig.axes[:2])
    assert figure_to_png(fig)[:4] == b"\x89PNG"


def test_the_right_panel_counts_one_rows_sums(journey):
    """Row 1 holds two weights: four sums at p = 0.5 (0, 2 a_11, 2 a_10, 2), about a quarter of the draws each."""
    tokens, attn_weights = journey
    sums = dropout_row_sums(attn_weights, 0.5, 20_000, torch.Generator().manual_seed(0))
    hist_ax = monte_carlo_figure(sums, tokens, 0.5, row=1).axes[1]
    bars = hist_ax.patches
    centres = sorted(bar.get_x() + bar.get_width() / 2 for bar in bars)
    expected = sorted([0.0, 2 * float(attn_weights[1, 1]), 2 * float(attn_weights[1, 0]), 2.0])
    assert centres == pytest.approx(expected, abs=1e-5)
    assert sum(bar.get_height() for bar in bars) == pytest.approx(1.0)
    assert all(abs(bar.get_height() - 0.25) < 0.02 for bar in bars)
    assert hist_ax.get_title() == "Row 1 ('journey'): 4 different sums, none of them 1"
    single = torch.tensor([[1.0, 0.0], [0.5, 0.5]])  # equal weights: one kept 0.5 doubles to exactly 1
    two_rows = dropout_row_sums(single, 0.5, 2_000, torch.Generator().manual_seed(0))
    assert monte_carlo_figure(two_rows, ["a", "b"], 0.5, row=1).axes[1].get_title() == \
        "Row 1 ('b'): 3 different sums, 1 among them"


def test_colour_bar_label_does_not_reach_the_next_panel(journey):
    tokens, attn_weights = journey
    live = dropout_explorer(attn_weights, tokens, p=0.8)
    fig = live.heatmap.ax.figure
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    label_right = live.heatmap.colorbar.ax.yaxis.label.get_window_extent(renderer).x1
    next_left = live.bars.ax.yaxis.label.get_window_extent(renderer).x0
    assert label_right + 20 < next_left, "the colour bar's label runs into the next panel's axis label"


def test_source_lines_show_only_the_lines_asked_for(capsys):
    show_source_lines(helpers.scaled_dot_product_attention, "if training and", "dropout(")
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "# from helpers.attention.scaled_dot_product_attention"
    assert printed[1].startswith("if training and") and len(printed) == 3
    with pytest.raises(ValueError, match="does not occur"):
        show_source_lines(helpers.scaled_dot_product_attention, "no such line", ")")


def test_diagram_is_drawn_from_the_tensors(journey):
    _, attn_weights = journey
    _, keep = attention_dropout(attn_weights, 0.5, torch.Generator().manual_seed(123))
    dropped_weights = attn_weights * (keep / 0.5)
    fig = dropout_diagram(attn_weights, keep, 0.5, dropped_weights)
    assert fig.get_figwidth() <= 12.0
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "2.00" in texts                       # row 0 survived this draw: 1.00 -> 2.00
    assert texts.count("2") == int(keep.sum())  # the middle grid is keep / (1 - p): 2 where kept, the future's too
    assert texts.count("0") == int((~keep).sum())
    assert all(f"{float(s):.2f}" in texts for s in dropped_weights.sum(dim=-1))  # the column of row sums
    assert "summed before\nrounding" in texts     # its sums can differ by 0.01 from the rounded cells'
    assert not [t for t in fig.axes[0].texts if t.get_color() == "white"], "no text that vanishes on grey"
    # Ã is the caller's, drawn as given: a wrong one (the factor forgotten) shows up in the cells and the sums.
    wrong = [t.get_text() for t in dropout_diagram(attn_weights, keep, 0.5, attn_weights * keep).axes[0].texts]
    assert "2.00" not in wrong and "1.00" in wrong
    with pytest.raises(ValueError, match="keep must be a bool tensor"):
        dropout_diagram(attn_weights, keep.float(), 0.5, dropped_weights)
    with pytest.raises(ValueError, match="p must be in"):
        dropout_diagram(attn_weights, keep, 1.0, dropped_weights)
    with pytest.raises(ValueError, match="dropped_weights must have shape"):
        dropout_diagram(attn_weights, keep, 0.5, dropped_weights[:3])
