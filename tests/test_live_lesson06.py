"""Notebook 06's live pictures and diagram: the controls drive the pictures, the diagram follows its sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from helpers.diagrams.heads import split_heads_diagram
from helpers.heads import full_width_heads_cost, split_heads_cost
from helpers.live.lesson06 import head_grid, heads_text, num_heads_explorer, print_table
from helpers.data import your_journey
from helpers.modules import MultiHeadAttention, MultiHeadAttentionWrapper
from helpers.plotting import figure_to_png

SENTENCE = "the cat sat on the mat because it was tired".split()


@pytest.fixture(scope="module")
def head_weights():
    """The lesson's (4, 10, 10) weights: an untrained 4-head layer on the ten-word sentence."""
    vocab = sorted(set(SENTENCE))
    word_ids = torch.tensor([vocab.index(word) for word in SENTENCE])
    torch.manual_seed(123)
    embedding = nn.Embedding(len(vocab), 16)
    layer = MultiHeadAttention(d_in=16, d_out=16, context_length=10, dropout=0.0, num_heads=4).eval()
    with torch.no_grad():
        _, weights = layer(3.0 * embedding(word_ids).unsqueeze(0), return_weights=True)
    return weights[0]


def _png_pixels(png: bytes) -> np.ndarray:
    import io

    from matplotlib.image import imread
    return imread(io.BytesIO(png))


def test_heads_text_is_singular_for_one():
    assert heads_text(1) == "1 head"
    assert heads_text(12) == "12 heads"


def test_head_grid_shows_the_chosen_head_and_frames_it(head_weights):
    it, mat = SENTENCE.index("it"), SENTENCE.index("mat")
    grid = head_grid(head_weights, SENTENCE, query=it)
    assert repr(grid) == "LiveFigure(head='head 0', query=7)"
    torch.testing.assert_close(torch.as_tensor(grid.big_map.image.get_array()), head_weights[0])
    first = bytes(grid.image.value)

    grid.controls["head"].value = "head 2"
    grid.controls["query"].value = mat
    torch.testing.assert_close(torch.as_tensor(grid.big_map.image.get_array()), head_weights[2])
    framed = [h for h, small in enumerate(grid.small_maps) if small.ax.spines["left"].get_linewidth() > 1]
    assert framed == [2]
    assert grid.big_map.ax.get_title() == "head 2 (orange frame) shown large: row 5 ('mat') outlined"
    assert bytes(grid.image.value) != first                         # the picture changed
    assert abs(float(head_weights[2, mat, 1]) - 0.97) < 0.01        # the value the lesson prints

    grid.controls["head"].value = "head 0"                           # back to the start: the same pixels
    grid.controls["query"].value = it
    np.testing.assert_array_equal(_png_pixels(bytes(grid.image.value)), _png_pixels(first))


def test_head_grid_has_one_shared_colour_bar_on_a_fixed_scale(head_weights):
    grid = head_grid(head_weights, SENTENCE)
    colour_bars = [ax for ax in grid.fig.axes if ax.get_label() == "<colorbar>"]
    assert len(colour_bars) == 1
    for heatmap in [*grid.small_maps, grid.big_map]:
        assert heatmap.image.get_clim() == (0.0, 1.0)
        assert all(label.get_fontsize() >= 8 for label in heatmap.ax.get_xticklabels())
    for small in grid.small_maps:                    # positions only, upright: readable at notebook width
        assert [label.get_text() for label in small.ax.get_xticklabels()] == [str(i) for i in range(10)]
        assert all(label.get_rotation() == 0 for label in small.ax.get_xticklabels())
    left_rows = [label.get_text() for label in grid.small_maps[0].ax.get_yticklabels()]
    assert left_rows == [f"{i}:{word}" for i, word in enumerate(SENTENCE)]  # the left maps name the query words
    assert "all maps" in colour_bars[0].get_ylabel()
    assert grid.big_map.values._prop.get_size() >= 9


def test_head_grid_rejects_bad_input(head_weights):
    with pytest.raises(ValueError, match="shape"):
        head_grid(head_weights[0], SENTENCE)
    with pytest.raises(ValueError, match="tokens"):
        head_grid(head_weights, SENTENCE[:5])


def test_num_heads_explorer_keeps_split_cost_and_grows_full_width():
    explorer = num_heads_explorer(768, 1024, qkv_bias=True)
    assert repr(explorer) == "LiveFigure(num_heads=12)"
    first = bytes(explorer.image.value)
    for num_heads in (1, 96):
        explorer.controls["num_heads"].value = num_heads
        split_params, full_params = [bar.get_height() * 1e6 for bar in explorer.params_bars.bars]  # millions
        split, full = (cost(768, num_heads, 1024, qkv_bias=True) for cost in (split_heads_cost, full_width_heads_cost))
        assert split.parameters == 2_362_368 and abs(split_params - split.parameters) < 1e-6 * split.parameters
        assert abs(full_params - full.parameters) < 1e-6 * full.parameters  # bar heights are float32
        ratio = f"{full.parameters / split.parameters:.1f} × split"
        assert explorer.params_bars.ax.get_title() == f"parameters: full width = {ratio}"
        assert explorer.params_bars.ax.get_yscale() == "linear"   # the bars show the real ratio
        assert bytes(explorer.image.value) != first
    explorer.controls["num_heads"].value = 1
    assert explorer.strip_ax.get_title() == "1 head × head_dim 768 = 768 features"
    explorer.controls["num_heads"].value = 96
    assert explorer.strip_ax.get_title() == "96 heads × head_dim 8 = 768 features"
    explorer.controls["num_heads"].value = 12
    np.testing.assert_array_equal(_png_pixels(bytes(explorer.image.value)), _png_pixels(first))


@pytest.mark.parametrize("num_heads", [1, 12, 96])
def test_num_heads_strip_has_one_row_per_head_and_no_repeated_colours(num_heads):
    """Row h of the strip is filled exactly over head h's features, so no two heads can be confused."""
    explorer = num_heads_explorer(768, 1024, qkv_bias=True)
    explorer.controls["num_heads"].value = num_heads
    reads = np.asarray(explorer.strip_ax.images[0].get_array())
    head_dim = 768 // num_heads
    assert reads.shape == (num_heads, 768)
    for h in range(num_heads):
        assert set(np.flatnonzero(reads[h])) == set(range(h * head_dim, (h + 1) * head_dim))
    assert explorer.strip_ax.get_ylabel().startswith("head")
    labels = [label.get_text() for label in explorer.strip_ax.get_yticklabels()]
    assert labels[0] == "0" and len(labels) <= 12


def test_num_heads_explorer_without_bias_gives_the_books_count():
    explorer = num_heads_explorer(768, 1024, qkv_bias=False)
    assert abs(explorer.params_bars.bars[0].get_height() * 1e6 - 2_360_064) < 1 and 4 * 768**2 + 768 == 2_360_064
    assert explorer.params_bars.texts[0].get_text() == "2.36 M"


def test_num_heads_explorer_rejects_a_count_that_does_not_divide():
    with pytest.raises(ValueError, match="divide"):
        num_heads_explorer(768, 1024, value=5)


@pytest.mark.parametrize("num_tokens, d_out, num_heads", [(6, 12, 3), (4, 8, 4), (3, 4, 1)])
def test_split_heads_diagram_draws_every_cell_of_its_sizes(num_tokens, d_out, num_heads):
    fig = split_heads_diagram(num_tokens, d_out, num_heads)
    cells = [patch for patch in fig.axes[0].patches if type(patch).__name__ == "Rectangle"]
    # Q, its view, the deck of Q heads, the deck of context heads, the merged heads and the output
    assert len(cells) == 6 * num_tokens * d_out
    texts = " ".join(text.get_text() for text in fig.axes[0].texts)
    assert f"(B, {num_heads}, {num_tokens}, {d_out // num_heads})" in texts
    assert f"(B, {num_tokens}, {d_out})" in texts
    assert fig.get_figwidth() <= 12.0
    assert figure_to_png(fig)[:4] == b"\x89PNG"


def test_split_heads_diagram_rejects_sizes_that_do_not_split():
    with pytest.raises(ValueError, match="divisible"):
        split_heads_diagram(6, 10, 3)
    with pytest.raises(ValueError, match="positive"):
        split_heads_diagram(0, 12, 3)


def test_split_heads_diagram_names_its_axes_and_the_batch():
    texts = [text.get_text() for text in split_heads_diagram(6, 12, 3).axes[0].texts]
    assert texts.count("token") == 2 and texts.count("features →") == 2       # input and output grids
    assert all(str(r) in texts for r in range(6))                             # the rows are numbered tokens
    assert any("one of the b sequences" in text.lower() for text in texts)
    assert "transpose(1, 2),\nreshape" in texts   # two lines: one would run into the deck of heads beside it


def test_print_table_aligns_numbers_and_separates_thousands(capsys):
    print_table(["num_heads", "parameters", "ratio"], [[1, 2_362_368, "1.0x"], [96, 2_362_368, "96.0x"]])
    print_table(["design", "GFLOPs"], [["one head", 8.0531], ["12 heads", 96.64]])
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["num_heads  parameters  ratio", "        1   2,362,368   1.0x", "       96   2,362,368  96.0x"]
    assert lines[3:] == ["design    GFLOPs", "one head    8.05", "12 heads   96.64"]


def test_the_course_classes_are_the_lessons_classes():
    """The lesson switches to helpers.MultiHeadAttention(Wrapper) in section 6 and its deep dives: under the same
    seed they give the numbers the lesson builds by hand (Raschka 2024, ch. 3), and section 3's step-by-step result."""
    _, inputs = your_journey()
    batch = torch.stack((inputs, inputs))
    torch.manual_seed(123)
    wrapper = MultiHeadAttentionWrapper(d_in=3, d_out=2, context_length=6, dropout=0.0, num_heads=2)
    torch.manual_seed(123)
    book_mha = MultiHeadAttention(d_in=3, d_out=2, context_length=6, dropout=0.0, num_heads=2)
    with torch.no_grad():
        torch.testing.assert_close(wrapper(batch)[0, 0], torch.tensor([-0.4519, 0.2216, 0.4772, 0.1063]),
                                   atol=1e-4, rtol=0)
        torch.testing.assert_close(book_mha(batch)[0, 0], torch.tensor([0.3190, 0.4858]), atol=1e-4, rtol=0)

    # section 3, step by step, with the layers drawn in the module's order
    torch.manual_seed(123)
    W_query, W_key, W_value = (nn.Linear(3, 12, bias=False) for _ in range(3))
    out_proj = nn.Linear(12, 12)
    with torch.no_grad():
        q, k, v = (w(batch).view(2, 6, 3, 4).transpose(1, 2) for w in (W_query, W_key, W_value))
        mask = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
        weights = torch.softmax((q @ k.transpose(2, 3) / 2.0).masked_fill(mask, float("-inf")), dim=-1)
        by_hand = out_proj((weights @ v).transpose(1, 2).reshape(2, 6, 12))
        torch.manual_seed(123)
        module = MultiHeadAttention(d_in=3, d_out=12, context_length=6, dropout=0.0, num_heads=3)
        torch.testing.assert_close(module(batch), by_hand, atol=1e-6, rtol=0)
