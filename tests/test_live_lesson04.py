"""Notebook 04's live picture: the controls drive the heatmap, the bars, the grey future band and its label."""

from __future__ import annotations

import pytest
import torch

from helpers.live.lesson04 import causal_explorer, future_weight
from helpers.masks import causal_mask

TOKENS = "Your journey starts with one step".split()


@pytest.fixture
def weights():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(6, 6, generator=generator) * 2.0
    unmasked = torch.softmax(scores, dim=-1)
    causal = torch.softmax(scores.masked_fill(causal_mask(6), float("-inf")), dim=-1)
    return unmasked, causal


def test_shows_both_weights_and_starts_at_the_chosen_query(weights):
    unmasked, causal = weights
    explorer = causal_explorer(unmasked, causal, TOKENS, query=2)
    assert repr(explorer) == "LiveFigure(query=2)"
    torch.testing.assert_close(torch.as_tensor(explorer.unmasked_map.image.get_array()), unmasked)
    torch.testing.assert_close(torch.as_tensor(explorer.causal_map.image.get_array()), causal)
    assert explorer.unmasked_map.ax.get_title() == "Without the mask"
    assert explorer.causal_map.ax.get_title() == "$A$, with the causal mask"
    assert explorer.initial_png and bytes(explorer.image.value) == explorer.initial_png


def test_the_row_shows_the_causal_bars_over_the_unmasked_outlines(weights):
    unmasked, causal = weights
    explorer = causal_explorer(unmasked, causal, TOKENS, query=2)
    torch.testing.assert_close(torch.tensor([bar.get_height() for bar in explorer.query_bars.bars]), causal[2])
    torch.testing.assert_close(torch.tensor([bar.get_height() for bar in explorer.unmasked_bars]), unmasked[2])
    leak = future_weight(unmasked, 2)
    assert leak > 0.0
    assert explorer.query_bars.ax.get_title().endswith(f"without the mask, {leak:.2f} on later keys")
    labels = [t.get_text() for t in explorer.query_bars.ax.get_legend().get_texts()]
    assert labels == ["with the mask: $A$", "without the mask", "keys after the query: 0 in $A$"]
    # issue 34: one colour for A (a red "query itself" read as a series of its own), no "0.00" over the outlines
    assert {bar.get_facecolor() for bar in explorer.query_bars.bars} == {explorer.query_bars.bars[0].get_facecolor()}
    shown = [text.get_text() for text in explorer.query_bars.texts]
    assert shown[:3] == [f"{w:.2f}" for w in causal[2, :3].tolist()] and shown[3:] == ["", "", ""]
    assert explorer.query_bars.ax.get_ylim() == (0.0, 1.08)  # weights lie in 0..1


def test_query_slider_moves_the_bars_band_and_outlines(weights):
    unmasked, causal = weights
    explorer = causal_explorer(unmasked, causal, TOKENS, query=2)
    before = bytes(explorer.image.value)
    one = TOKENS.index("one")
    explorer.controls["query"].value = one
    heights = [bar.get_height() for bar in explorer.query_bars.bars]
    torch.testing.assert_close(torch.tensor(heights), causal[one])
    torch.testing.assert_close(torch.tensor([bar.get_height() for bar in explorer.unmasked_bars]), unmasked[one])
    assert heights[-1] == 0.0  # "step" is in the future of "one"
    assert explorer.query_bars.ax.get_title().startswith("Row 4 ('one')\n")
    band = [p for p in explorer.query_bars.ax.patches if p.get_facecolor()[:3] == pytest.approx((0.88,) * 3)]
    assert len(band) == 1 and band[0].get_x() == one + 0.5 and band[0].get_width() == len(TOKENS) - 1 - one
    assert explorer.unmasked_map._row_outline.get_y() == one - 0.5
    assert explorer.causal_map._row_outline.get_y() == one - 0.5
    assert bytes(explorer.image.value) != before  # the picture itself changed


def test_last_query_has_nothing_to_hide(weights):
    unmasked, causal = weights
    explorer = causal_explorer(unmasked, causal, TOKENS, query=5)
    assert explorer.query_bars.ax.get_title().endswith("no later keys: nothing to hide")
    torch.testing.assert_close(unmasked[5], causal[5])


def test_the_notebook_example_values():
    """The numbers that notebook 04 prints for its own sentence: 'starts' leaks 0.73 without the mask."""
    torch.manual_seed(123)
    embedding = torch.nn.Embedding(6, 3)
    W_query, W_key = torch.rand(3, 2), torch.rand(3, 2)
    with torch.no_grad():
        inputs = embedding(torch.tensor([0, 1, 3, 5, 2, 4]))
    scores = (inputs @ W_query) @ (inputs @ W_key).T / 2 ** 0.5
    unmasked = torch.softmax(scores, dim=-1)
    causal = torch.softmax(scores.masked_fill(causal_mask(6), float("-inf")), dim=-1)
    explorer = causal_explorer(unmasked, causal, TOKENS)
    assert explorer.query_bars.ax.get_title().endswith("without the mask, 0.73 on later keys")
    heights = [f"{bar.get_height():.2f}" for bar in explorer.query_bars.bars]
    assert heights == ["0.46", "0.12", "0.43", "0.00", "0.00", "0.00"]
    explorer.controls["query"].value = 4
    heights = [f"{bar.get_height():.2f}" for bar in explorer.query_bars.bars]
    assert heights == ["0.09", "0.70", "0.08", "0.01", "0.12", "0.00"]


def test_every_picture_labels_rows_and_columns_with_index_and_token(weights):
    from helpers.live.lesson04 import weights_side_by_side

    unmasked, causal = weights
    explorer = causal_explorer(unmasked, causal, TOKENS)
    fig = weights_side_by_side(unmasked, causal, TOKENS, titles=("a", "b"))
    for ax in (explorer.unmasked_map.ax, explorer.query_bars.ax, fig.axes[0]):
        assert [t.get_text() for t in ax.get_xticklabels()][:2] == ["0: Your", "1: journey"]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][:2] == ["0: Your", "1: journey"]
    assert fig.axes[0].get_ylabel() == "query $i$" and fig.axes[0].get_xlabel() == "key $j$"


def test_wrong_shapes_are_refused(weights):
    unmasked, causal = weights
    with pytest.raises(ValueError, match="causal_weights must be a \\(6, 6\\)"):
        causal_explorer(unmasked, causal[:5, :5], TOKENS)


# --- the pictures of helpers.diagrams.masking ------------------------------------------------------------
@pytest.mark.parametrize("num_tokens", [1, 3, 6])
def test_mask_then_softmax_diagram_is_sized_by_num_tokens(num_tokens):
    from helpers.diagrams._draw import PALETTE
    from helpers.diagrams.masking import mask_then_softmax_diagram
    from matplotlib.colors import to_hex

    ax = mask_then_softmax_diagram(num_tokens).axes[0]
    cells = [p for p in ax.patches if type(p).__name__ == "Rectangle"]
    assert len(cells) == 4 * num_tokens ** 2                      # S, M, masked S, A
    hidden = num_tokens * (num_tokens - 1) // 2
    grey = [p for p in cells if to_hex(p.get_facecolor()) == PALETTE["mask"]]
    assert len(grey) == 2 * hidden                                # in M and in the masked S
    cell_texts = [t.get_text() for t in ax.texts if to_hex(t.get_color()) == "#000000"]
    assert cell_texts.count("−∞") == hidden and cell_texts.count("0") == hidden
    numbers = [t.get_text() for t in ax.texts if to_hex(t.get_color()) == "#525252" and t.get_text().isdigit()]
    assert numbers == [str(j) for j in range(num_tokens)] * 4 + [str(i) for i in range(num_tokens)]  # keys, queries
    names = " ".join(t.get_text() for t in ax.texts)
    assert "S = QK^\\top" in names and "\\sqrt{d_k}" in names     # S unscaled, the scaling on the softmax arrow
    assert ax.figure.get_figwidth() <= 12.0


def test_mask_then_softmax_diagram_names_the_tokens_it_is_given():
    from helpers.diagrams.masking import mask_then_softmax_diagram

    fig = mask_then_softmax_diagram(6, TOKENS)
    texts = [t.get_text() for t in fig.axes[0].texts]
    rows = [t for t in texts if t[:1].isdigit() and ": " in t]
    assert rows == [f"{i}: {token}" for i, token in enumerate(TOKENS)]                            # rows of S
    assert all(token in texts for token in TOKENS)                                                  # keys of S
    assert fig.get_figwidth() <= 12.0 + 1e-9
    with pytest.raises(ValueError, match="tokens"):
        mask_then_softmax_diagram(6, TOKENS[:4])


def test_draw_mask_uses_two_colours_and_a_legend_not_a_colour_bar():
    from helpers.diagrams.masking import plot_mask

    fig = plot_mask(causal_mask(4), TOKENS[:4], TOKENS[:4], title="M")
    ax = fig.axes[0]
    assert len(fig.axes) == 1                                     # no colour bar
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["hidden (True)", "visible (False)"]
    assert ax.images[0].get_array().tolist() == causal_mask(4).int().tolist()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0: Your", "1: journey", "2: starts", "3: with"]
    with pytest.raises(TypeError, match="bool"):
        plot_mask(causal_mask(4).float(), TOKENS[:4], TOKENS[:4])


def test_draw_mask_gives_padding_its_own_shade():
    from matplotlib.colors import to_hex

    from helpers.diagrams.masking import HIDDEN, PADDING, VISIBLE, draw_mask
    from helpers.plotting import new_figure

    padding = torch.tensor([False, False, False, True, True, True])
    mask = causal_mask(6) | padding[None, :]
    ax = new_figure().axes[0]
    draw_mask(ax, mask, TOKENS, TOKENS, padding=padding)
    codes = torch.tensor(ax.images[0].get_array().tolist())
    assert codes[:, 3:].eq(2).all() and codes[:, :3].eq(causal_mask(6)[:, :3].int()).all()
    assert [to_hex(c) for c in ax.images[0].get_cmap().colors] == [VISIBLE, HIDDEN, PADDING]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["hidden: future key", "hidden: padding key",
                                                                    "visible"]
    with pytest.raises(TypeError, match="padding"):
        draw_mask(ax, mask, TOKENS, TOKENS, padding=padding[:4])


def test_side_by_side_pictures_use_the_fixed_zero_to_one_scale(weights):
    from helpers.live.lesson04 import mask_and_weights, weights_side_by_side

    unmasked, causal = weights
    fig = weights_side_by_side(unmasked, causal, TOKENS, titles=("before", "after"))
    heat = [ax for ax in fig.axes if ax.images and ax.get_title()]
    assert [ax.get_title() for ax in heat] == ["before", "after"]
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in heat)
    assert len(fig.axes) == 3                                     # two heatmaps share one colour bar
    padding = torch.tensor([False] * 4 + [True] * 2)
    fig = mask_and_weights(causal_mask(6) | padding, causal, TOKENS, padding=padding, titles=("M", "A"))
    assert [ax.get_title() for ax in fig.axes[:2]] == ["M", "A"]
    assert fig.axes[1].images[0].get_clim() == (0.0, 1.0)
