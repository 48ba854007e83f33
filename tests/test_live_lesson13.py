"""Notebook 13's pictures: every control changes the picture, and the picture shows the model's weights."""

import numpy as np
import pytest
import torch

from helpers.bert_heads import read_sentence
from helpers.live.lesson13 import score_grid, sentence_explorer
from helpers.pretrained import load_minilm


@pytest.fixture(scope="module")
def model():
    return load_minilm()


def test_sentence_explorer_follows_text_layer_and_head(model):
    encoder, tokenizer = model
    view = sentence_explorer(encoder, tokenizer, "The cat sat on the mat.", layer=0, head=2)
    pictures = {bytes(view.image.value)}
    main = view.fig.axes[0]
    for control, value in (("text", "A much longer sentence about the bank of a river."), ("layer", 3), ("head", 7)):
        view.controls[control].value = value
        values = view.values()
        reading = read_sentence(encoder, tokenizer, values["text"])
        n = len(reading.tokens)
        shown = np.asarray(main.images[0].get_array())
        np.testing.assert_allclose(shown[:n, :n], reading.attn_weights[values["layer"], values["head"]].numpy(),
                                   rtol=1e-6)
        assert [t.get_text() for t in main.get_xticklabels()][:n] == reading.tokens
        assert f"L{values['layer']}H{values['head']}:" in main.get_title()
        pictures.add(bytes(view.image.value))
    assert len(pictures) == 4, "every control must change the picture"
    thumbs = [ax for ax in view.fig.axes[1:] if ax.images and not ax.get_label() == "<colorbar>"]
    assert len([ax for ax in thumbs if ax.images[0].get_array().shape == (n, n)]) == 72


def test_long_sentences_are_cut_and_said_so(model):
    encoder, tokenizer = model
    view = sentence_explorer(encoder, tokenizer, " ".join(["word"] * 40), max_tokens=32)
    assert "only the first 32 tokens" in view.fig.axes[0].get_title()
    with pytest.raises(TypeError, match="text must be a str"):
        sentence_explorer(encoder, tokenizer, 3)


def test_score_grid_shows_the_scores():
    scores = {"a": torch.rand(6, 12), "b": torch.rand(6, 12)}
    fig = score_grid(scores, marked={"a": (0, 2)})
    np.testing.assert_allclose(np.asarray(fig.axes[0].images[0].get_array()), scores["a"].numpy())
    assert len(fig.axes[0].patches) == 1


def test_pronoun_rows_draws_the_pronouns_row_of_each_head_for_both_words(model):
    from helpers.live.lesson13 import pronoun_rows
    encoder, tokenizer = model
    template = "The animal didn't cross the street because it was too {}."
    fig = pronoun_rows(encoder, tokenizer, template, "it", ("tired", "wide"), [(3, 1), (5, 11)])
    axes = [ax for ax in fig.axes if ax.patches]
    assert [ax.get_title() for ax in axes] == ["L3H1: where 'it' looks", "L5H11: where 'it' looks"]
    for ax, (layer, head) in zip(axes, [(3, 1), (5, 11)]):
        for k, word in enumerate(("tired", "wide")):
            reading = read_sentence(encoder, tokenizer, template.format(word))
            it = reading.tokens.index("it")
            n = len(reading.tokens)
            heights = [bar.get_height() for bar in ax.patches[k * n:(k + 1) * n]]
            np.testing.assert_allclose(heights, reading.attn_weights[layer, head, it].numpy(), rtol=1e-6)
    assert "tired/wide" in [t.get_text() for t in axes[0].get_xticklabels()]
    with pytest.raises(ValueError, match="same length"):
        pronoun_rows(encoder, tokenizer, template, "it", ("tired", "unbelievably tired"), [(0, 0)])


def test_sentence_explorer_says_the_thumbnails_share_one_scale(model):
    encoder, tokenizer = model
    view = sentence_explorer(encoder, tokenizer, "The cat sat.")
    assert "same 0-1 colour scale" in view.fig._suptitle.get_text()


def test_bank_curves_draws_both_means_and_bands_and_checks_shapes():
    import pytest
    from helpers.live.lesson13 import bank_curves
    within, across = torch.rand(7, 12) * 0.2 + 0.8, torch.rand(7, 16) * 0.3 + 0.6
    fig = bank_curves(within, across, "t")
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 2 and len(ax.collections) == 2
    torch.testing.assert_close(torch.tensor(lines[0].get_ydata()), within.mean(1))
    torch.testing.assert_close(torch.tensor(lines[1].get_ydata()), across.mean(1))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["emb", "L0", "L1", "L2", "L3", "L4", "L5"]
    with pytest.raises(ValueError, match="within and across"):
        bank_curves(within[:6], across, "t")
