"""Head scores on the real encoder (helpers/bert_heads.py): each against a hand computation, bad input included."""

import subprocess
import sys

import pytest
import torch

from helpers.bert_heads import (weight_on_key, knock_out_effects, mean_score, next_token_score, paraphrase_margin,
                                pronoun_pairs, read_sentence, word_positions, word_to_word, word_vectors)
from helpers.pretrained import load_minilm


@pytest.fixture(scope="module")
def model():
    return load_minilm()


def test_next_token_and_weight_on_key_by_hand():
    weights = torch.softmax(torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(0)), dim=-1)
    by_hand = torch.stack([weights[..., i, i + 1] for i in range(4)], dim=-1).mean(-1)
    torch.testing.assert_close(next_token_score(weights), by_hand)
    torch.testing.assert_close(weight_on_key(weights, 0), weights[..., 1:4, 0].mean(-1))
    torch.testing.assert_close(weight_on_key(weights, -1), weights[..., 1:4, 4].mean(-1))


def test_read_sentence_and_word_lookups(model):
    encoder, tokenizer = model
    reading = read_sentence(encoder, tokenizer, "The unbelievably muddy bank.")
    assert reading.tokens[0] == "[CLS]" and reading.attn_weights.shape == (6, 12, len(reading.tokens),
                                                                           len(reading.tokens))
    assert reading.hidden.shape == (7, len(reading.tokens), 384)
    pieces = word_positions(tokenizer, reading.tokens, "unbelievably")
    assert len(pieces) > 1 and reading.tokens[pieces[1]].startswith("##")
    expected = reading.attn_weights[:, :, word_positions(tokenizer, reading.tokens, "bank")[0], pieces].sum(-1)
    torch.testing.assert_close(word_to_word(tokenizer, reading, "bank", "unbelievably"), expected)
    with pytest.raises(ValueError, match="not in the tokens"):
        word_positions(tokenizer, reading.tokens, "river")
    with pytest.raises(ValueError, match="at least one"):
        mean_score([], next_token_score)


def test_word_vectors_are_the_hidden_states_of_that_token(model):
    encoder, tokenizer = model
    vectors = word_vectors(encoder, tokenizer, ["The bank.", "A river bank."], "bank")
    assert vectors.shape == (7, 2, 384)
    torch.testing.assert_close(vectors[:, 1], read_sentence(encoder, tokenizer, "A river bank.").hidden[:, 3])


def test_pronoun_pairs_row_order_and_values(model):
    encoder, tokenizer = model
    pairs = [("The animal didn't cross the street because it was too {}.", "it", ("animal", "street"),
              ("tired", "wide"))]
    right = pronoun_pairs(encoder, tokenizer, pairs)
    assert right.shape == (2, 6, 12) and set(right.unique().tolist()) <= {0.0, 1.0}
    wide = read_sentence(encoder, tokenizer, pairs[0][0].format("wide"))
    expected = (word_to_word(tokenizer, wide, "it", "street") > word_to_word(tokenizer, wide, "it", "animal")).float()
    torch.testing.assert_close(right[1], expected)  # row 1: the second word, where "it" means the street


def test_paraphrase_margin_and_knock_outs(model):
    encoder, tokenizer = model
    pairs = [("A dog runs.", "A puppy is running."), ("The stock fell.", "Shares dropped."),
             ("I like tea.", "Tea is what I enjoy.")]
    top1, margin = paraphrase_margin(encoder, tokenizer, pairs)
    assert top1 == 1.0 and 0 < margin < 1
    effects = knock_out_effects(encoder, tokenizer, pairs, {"layer 5": [(5, h) for h in range(12)]})
    assert effects["none"] == (top1, margin) and effects["layer 5"][1] != margin


def test_importing_the_model_code_does_not_import_safetensors():
    code = "import helpers, helpers.pretrained, helpers.bert_heads, sys; print('safetensors' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_pronoun_vectors_by_hand(model):
    from helpers.bert_heads import pronoun_vectors
    encoder, tokenizer = model
    pairs = [("The trophy doesn't fit in the suitcase because it is too {}.", "it", ("trophy", "suitcase"),
              ("big", "small"))]
    closer = pronoun_vectors(encoder, tokenizer, pairs)
    assert closer.shape == (7, 2) and set(closer.unique().tolist()) <= {0.0, 1.0}
    small = read_sentence(encoder, tokenizer, pairs[0][0].format("small"))  # "it" means the suitcase
    at = {w: small.tokens.index(w) for w in ("it", "trophy", "suitcase")}
    for layer in (0, 6):
        cos = {w: torch.cosine_similarity(small.hidden[layer, at["it"]], small.hidden[layer, at[w]], dim=0)
               for w in ("trophy", "suitcase")}
        assert closer[layer, 1] == float(cos["suitcase"] > cos["trophy"])
