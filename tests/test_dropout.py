"""helpers.dropout: the explicit dropout matches PyTorch's and behaves as the notebook says."""

import re

import pytest
import torch

import itertools

from helpers.dropout import attention_dropout, dropout_row_sums, nearest_attainable_sum, row_sum_std
from helpers.masks import causal_mask


def _causal_weights(num_tokens=6, seed=0):
    scores = torch.randn(num_tokens, num_tokens, generator=torch.Generator().manual_seed(seed))
    return torch.softmax(scores.masked_fill(causal_mask(num_tokens), float("-inf")), dim=-1)  # (T, T)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_same_draw_as_torch_dropout_on_cpu(p):
    weights = _causal_weights()
    torch.manual_seed(7)
    expected = torch.nn.functional.dropout(weights, p=p, training=True)
    dropped, keep = attention_dropout(weights, p, torch.Generator().manual_seed(7))
    torch.testing.assert_close(dropped, expected, rtol=0, atol=0)
    assert torch.equal(keep & (weights != 0), expected != 0)  # a dropped zero looks like a kept zero


def test_default_generator_is_the_global_one():
    weights = _causal_weights()
    torch.manual_seed(3)
    first, _ = attention_dropout(weights, 0.5)
    torch.manual_seed(3)
    second, _ = attention_dropout(weights, 0.5)
    assert torch.equal(first, second)


def test_survivors_are_rescaled_and_the_rest_are_zero():
    weights = _causal_weights()
    dropped, keep = attention_dropout(weights, 0.5, torch.Generator().manual_seed(1))
    assert keep.dtype == torch.bool and keep.shape == weights.shape
    assert torch.equal(dropped[keep], 2.0 * weights[keep])
    assert (dropped[~keep] == 0).all()
    assert (dropped[causal_mask(6)] == 0).all(), "dropout must not bring back masked weights"


def test_fraction_kept_is_one_minus_p():
    ones = torch.ones(400, 500)
    _, keep = attention_dropout(ones, 0.3, torch.Generator().manual_seed(0))
    assert abs(keep.float().mean().item() - 0.7) < 0.01


def test_p_zero_changes_nothing():
    weights = _causal_weights()
    dropped, keep = attention_dropout(weights, 0.0, torch.Generator().manual_seed(0))
    assert torch.equal(dropped, weights) and keep.all()


def test_seeds_repeat_and_differ():
    weights = _causal_weights(12)
    a, _ = attention_dropout(weights, 0.5, torch.Generator().manual_seed(5))
    b, _ = attention_dropout(weights, 0.5, torch.Generator().manual_seed(5))
    c, _ = attention_dropout(weights, 0.5, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_batched_shapes_and_dtype():
    weights = torch.softmax(torch.randn(2, 3, 4, 4, dtype=torch.float64), dim=-1)  # (B, H, T, T)
    dropped, keep = attention_dropout(weights, 0.2, torch.Generator().manual_seed(0))
    assert dropped.shape == keep.shape == (2, 3, 4, 4) and dropped.dtype == torch.float64


def test_row_sums_average_to_one_with_the_predicted_spread():
    weights = _causal_weights()
    sums = dropout_row_sums(weights, 0.5, 20_000, torch.Generator().manual_seed(0))  # (N, T)
    assert sums.shape == (20_000, 6)
    torch.testing.assert_close(sums.mean(dim=0), torch.ones(6), atol=0.05, rtol=0)
    torch.testing.assert_close(sums.std(dim=0), row_sum_std(weights, 0.5), rtol=0.05, atol=0)


def test_row_sum_std_formula():
    weights = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    # p = 0.5: p / (1 - p) = 1, so std = sqrt(sum of squares).
    torch.testing.assert_close(row_sum_std(weights, 0.5), torch.tensor([1.0, 0.5**0.5]))
    torch.testing.assert_close(row_sum_std(weights, 0.0), torch.zeros(2))


@pytest.mark.parametrize("call, error, words", [
    (lambda w: attention_dropout(w, 1.0), ValueError, "p must be in [0, 1)"),
    (lambda w: attention_dropout(w, "0.5"), TypeError, "p must be a float"),
    (lambda w: attention_dropout(w.long(), 0.5), TypeError, "attn_weights"),
    (lambda w: attention_dropout(w, 0.5, generator=123), TypeError, "generator"),
    (lambda w: dropout_row_sums(w, 0.5, 0), ValueError, "num_draws"),
    (lambda w: dropout_row_sums(w[0], 0.5, 10), ValueError, "attn_weights"),
    (lambda w: row_sum_std(w, -0.1), ValueError, "p must be in [0, 1)"),
    (lambda w: nearest_attainable_sum(w[0, 0], 0.5), ValueError, "attn_weights"),
    (lambda w: nearest_attainable_sum(torch.full((1, 21), 1 / 21), 0.5), ValueError, "at most 20"),
])
def test_bad_input_is_named(call, error, words):
    with pytest.raises(error, match=re.escape(words)):
        call(_causal_weights())


def test_nearest_attainable_sum_small_cases():
    weights = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.55, 0.45, 0.0]])
    # Row 0: 0 or 2 (a tie, the smaller wins); row 1: 0, 1 or 2; row 2: 0, 0.9, 1.1 or 2.
    torch.testing.assert_close(nearest_attainable_sum(weights, 0.5), torch.tensor([0.0, 1.0, 0.9], dtype=torch.float64))
    torch.testing.assert_close(nearest_attainable_sum(weights, 0.0), torch.ones(3, dtype=torch.float64))


def test_nearest_attainable_sum_matches_every_subset_written_out():
    weights = _causal_weights()                                  # (6, 6) causal softmax rows
    for p in (0.3, 0.5):
        expected = []
        for row in weights.double():
            nonzero = row[row != 0].tolist()
            sums = [sum(chosen) / (1 - p) for k in range(len(nonzero) + 1)
                    for chosen in itertools.combinations(nonzero, k)]
            expected.append(min(sums, key=lambda s: (abs(s - 1), s)))
        torch.testing.assert_close(nearest_attainable_sum(weights, p), torch.tensor(expected, dtype=torch.float64))
    assert nearest_attainable_sum(weights.expand(2, 6, 6), 0.5).shape == (2, 6)
