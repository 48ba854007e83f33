"""The attention functions: values, shapes, equivalence with PyTorch, and clear errors."""

import math

import pytest
import torch
import torch.nn.functional as F

import helpers
from helpers import dot_product_scores, scaled_dot_product_attention, softmax_naive, softmax_stable


def test_dot_product_scores_match_the_worked_example():
    tokens, inputs = helpers.your_journey()
    query = inputs[tokens.index("journey")]
    expected = torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])
    torch.testing.assert_close(dot_product_scores(query, inputs), expected, atol=1e-4, rtol=0)


def test_dot_product_scores_matrix_equals_loop_of_dots():
    torch.manual_seed(0)
    queries, keys = torch.randn(4, 5), torch.randn(7, 5)
    scores = dot_product_scores(queries, keys)
    assert scores.shape == (4, 7)
    for i in range(4):
        for j in range(7):
            torch.testing.assert_close(scores[i, j], torch.dot(queries[i], keys[j]))


def test_dot_product_scores_batched():
    torch.manual_seed(0)
    queries, keys = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8)
    assert dot_product_scores(queries, keys).shape == (2, 3, 4, 5)


def test_softmax_naive_overflows_where_stable_does_not():
    scores = torch.tensor([1000.0, 999.0, 998.0])
    assert torch.isnan(softmax_naive(scores)).any()
    stable = softmax_stable(scores)
    assert torch.isfinite(stable).all()
    torch.testing.assert_close(stable, torch.softmax(scores, dim=0))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_versions_agree_with_torch_on_moderate_scores(dim):
    torch.manual_seed(1)
    scores = torch.randn(3, 4, 5)
    torch.testing.assert_close(softmax_naive(scores, dim=dim), torch.softmax(scores, dim=dim))
    torch.testing.assert_close(softmax_stable(scores, dim=dim), torch.softmax(scores, dim=dim))
    torch.testing.assert_close(softmax_stable(scores, dim=dim).sum(dim), torch.ones(()).expand_as(scores.sum(dim)))


def test_softmax_stable_turns_minus_infinity_into_zero_weight():
    weights = softmax_stable(torch.tensor([0.5, float("-inf"), 1.5]))
    assert weights[1] == 0
    torch.testing.assert_close(weights.sum(), torch.tensor(1.0))


SHAPES = [((5, 4), (5, 4), (5, 6)), ((2, 3, 4), (2, 6, 4), (2, 6, 2)), ((2, 4, 7, 8), (2, 4, 7, 8), (2, 4, 7, 8))]


@pytest.mark.parametrize("q_shape,k_shape,v_shape", SHAPES)
def test_scaled_dot_product_attention_matches_pytorch(q_shape, k_shape, v_shape):
    torch.manual_seed(2)
    queries, keys, values = torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape)
    context_vecs, attn_weights = scaled_dot_product_attention(queries, keys, values)
    torch.testing.assert_close(context_vecs, F.scaled_dot_product_attention(queries, keys, values))
    assert attn_weights.shape == (*q_shape[:-1], k_shape[-2])
    torch.testing.assert_close(attn_weights.sum(-1), torch.ones(attn_weights.shape[:-1]))


def test_scaled_dot_product_attention_with_causal_mask_matches_pytorch():
    torch.manual_seed(3)
    queries, keys, values = torch.randn(3, 2, 6, 4), torch.randn(3, 2, 6, 4), torch.randn(3, 2, 6, 5)
    mask = helpers.causal_mask(6)
    context_vecs, attn_weights = scaled_dot_product_attention(queries, keys, values, mask=mask)
    reference = F.scaled_dot_product_attention(queries, keys, values, is_causal=True)
    torch.testing.assert_close(context_vecs, reference)
    assert (attn_weights.masked_select(mask) == 0).all()


def test_scaled_dot_product_attention_uses_the_keys_own_dimension():
    torch.manual_seed(4)
    queries, keys, values = torch.randn(3, 16), torch.randn(3, 16), torch.randn(3, 2)
    _, attn_weights = scaled_dot_product_attention(queries, keys, values)
    expected = torch.softmax(queries @ keys.T / math.sqrt(16), dim=-1)
    torch.testing.assert_close(attn_weights, expected)


def test_dropout_only_in_training_and_rescales_survivors():
    torch.manual_seed(5)
    queries = keys = torch.zeros(1, 8, 4)  # equal scores -> every weight is 1/8
    values = torch.randn(1, 8, 3)
    _, no_drop = scaled_dot_product_attention(queries, keys, values, dropout_p=0.5, training=False)
    torch.testing.assert_close(no_drop, torch.full((1, 8, 8), 1 / 8))
    _, dropped = scaled_dot_product_attention(queries, keys, values, dropout_p=0.5, training=True)
    assert (dropped == 0).any()
    survivors = dropped[dropped != 0]
    torch.testing.assert_close(survivors, torch.full_like(survivors, 1 / 8 / (1 - 0.5)))


@pytest.mark.parametrize(
    "kwargs,error,words",
    [
        (dict(queries=[[1.0]]), TypeError, "queries must be a torch.Tensor"),
        (dict(queries=torch.ones(2, 3, dtype=torch.long)), TypeError, "floating-point"),
        (dict(keys=torch.ones(2, 4)), ValueError, "same last dimension"),
        (dict(values=torch.ones(5, 3)), ValueError, "same number of tokens"),
        (dict(mask=torch.ones(2, 2)), TypeError, "mask must be a bool"),
        (dict(mask=torch.zeros(3, 3, dtype=torch.bool)), ValueError, "does not broadcast"),
        (dict(mask=torch.ones(2, 2, dtype=torch.bool)), ValueError, "hides every key"),
        (dict(dropout_p=1.0), ValueError, "dropout_p must be in [0, 1)"),
        (dict(dropout_p="0.1"), TypeError, "dropout_p must be a float"),
    ],
)
def test_scaled_dot_product_attention_rejects_bad_input(kwargs, error, words):
    arguments = dict(queries=torch.ones(2, 3), keys=torch.ones(2, 3), values=torch.ones(2, 5))
    arguments.update(kwargs)
    with pytest.raises(error, match=words.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        scaled_dot_product_attention(**arguments)


def test_masks():
    mask = helpers.causal_mask(4)
    assert mask.dtype == torch.bool and mask.shape == (4, 4)
    assert mask.sum() == 6 and not mask.diagonal().any() and mask[0, 1] and not mask[1, 0]
    with pytest.raises(ValueError, match="num_tokens must be at least 1"):
        helpers.causal_mask(0)


def test_renormalising_equals_masking_before_softmax():
    torch.manual_seed(6)
    scores = torch.randn(2, 5, 5)
    renormalised = helpers.mask_by_renormalising(torch.softmax(scores, dim=-1))
    masked_first = torch.softmax(scores.masked_fill(helpers.causal_mask(5), float("-inf")), dim=-1)
    torch.testing.assert_close(renormalised, masked_first)
    with pytest.raises(ValueError, match="num_tokens, num_tokens"):
        helpers.mask_by_renormalising(torch.ones(2, 3))
