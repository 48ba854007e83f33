"""Padding masks and fully-masked rows: shapes, conventions, nan-free outputs and gradients, errors."""

import pytest
import torch
import torch.nn.functional as F

from helpers.attention import scaled_dot_product_attention
from helpers.masks import causal_mask, is_causal_mask, padding_mask


def test_padding_mask_right_and_left():
    right = padding_mask([3, 1, 4])
    assert right.dtype == torch.bool and right.shape == (3, 4)
    assert right.tolist() == [[False, False, False, True],
                              [False, True, True, True],
                              [False, False, False, False]]
    left = padding_mask(torch.tensor([3, 1]), num_tokens=5, padding_side="left")
    assert left.tolist() == [[True, True, False, False, False],
                             [True, True, True, True, False]]


def test_padding_mask_counts_the_padding():
    lengths = torch.tensor([0, 2, 5, 7])
    for side in ("right", "left"):
        mask = padding_mask(lengths, num_tokens=7, padding_side=side)
        assert mask.sum(dim=-1).tolist() == (7 - lengths).tolist()


@pytest.mark.parametrize(
    "lengths,kwargs,error,words",
    [
        ([2.0, 3.0], {}, TypeError, "lengths must be a 1-d int tensor or a list of ints"),
        (torch.tensor([1.0]), {}, TypeError, "lengths must hold integers"),
        ([], {}, ValueError, "lengths must be 1-d"),
        (torch.ones(2, 2, dtype=torch.long), {}, ValueError, "lengths must be 1-d"),
        ([2, -1], {}, ValueError, "must not be negative"),
        ([2, 5], dict(num_tokens=4), ValueError, "at most num_tokens=4"),
        ([2], dict(num_tokens=0), ValueError, "num_tokens must be at least 1"),
        ([2], dict(padding_side="top"), ValueError, "padding_side must be 'right' or 'left'"),
    ],
)
def test_padding_mask_rejects_bad_input(lengths, kwargs, error, words):
    with pytest.raises(error, match=words):
        padding_mask(lengths, **kwargs)


def _left_padded_batch():
    torch.manual_seed(11)
    queries, keys, values = torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3)
    pad = padding_mask([5, 2], padding_side="left")  # (2, 5); sequence 2 starts with three pads
    mask = causal_mask(5) | pad[:, None, :]  # (5, 5) | (2, 1, 5) -> (2, 5, 5)
    return queries, keys, values, mask


def test_left_padding_under_a_causal_mask_hides_whole_rows():
    *_, mask = _left_padded_batch()
    assert mask.all(dim=-1).tolist() == [[False] * 5, [True, True, True, False, False]]
    scores = torch.randn(2, 5, 5).masked_fill(mask, float("-inf"))
    assert torch.softmax(scores, dim=-1).isnan().any()  # the trap the option exists for


def test_fully_masked_rows_raise_by_default():
    queries, keys, values, mask = _left_padded_batch()
    with pytest.raises(ValueError, match="hides every key.*fully_masked_rows='zero'"):
        scaled_dot_product_attention(queries, keys, values, mask=mask)


def test_fully_masked_rows_zero_gives_zero_rows_and_matches_pytorch():
    queries, keys, values, mask = _left_padded_batch()
    context_vecs, attn_weights = scaled_dot_product_attention(queries, keys, values, mask=mask,
                                                              fully_masked_rows="zero")
    hidden = mask.all(dim=-1)  # (2, 5)
    assert not context_vecs.isnan().any() and not attn_weights.isnan().any()
    assert (attn_weights[hidden] == 0).all() and (context_vecs[hidden] == 0).all()
    torch.testing.assert_close(attn_weights[~hidden].sum(-1), torch.ones(int((~hidden).sum())))
    assert (attn_weights.masked_select(mask) == 0).all()
    # PyTorch's own function (True = keep) returns zeros for such rows on the CPU as well.
    torch.testing.assert_close(context_vecs, F.scaled_dot_product_attention(queries, keys, values, attn_mask=~mask))


def test_rows_that_see_something_are_unchanged_by_the_option():
    queries, keys, values, mask = _left_padded_batch()
    _, zeroed = scaled_dot_product_attention(queries, keys, values, mask=mask, fully_masked_rows="zero")
    _, first = scaled_dot_product_attention(queries[:1], keys[:1], values[:1], mask=mask[:1])
    torch.testing.assert_close(zeroed[:1], first)  # sequence 1 has no hidden row: same as the default


def test_fully_masked_rows_zero_never_makes_a_nan_not_even_in_backward():
    queries, keys, values, mask = _left_padded_batch()
    for tensor in (queries, keys, values):
        tensor.requires_grad_(True)
    # Anomaly mode stops at the first backward step that produces a nan, even one that a
    # later step would have hidden: no nan may appear anywhere, not just in the result.
    with pytest.warns(UserWarning, match="Anomaly Detection"), torch.autograd.detect_anomaly():
        context_vecs, _ = scaled_dot_product_attention(queries, keys, values, mask=mask,
                                                       fully_masked_rows="zero")
        context_vecs.square().sum().backward()
    for name, tensor in (("queries", queries), ("keys", keys), ("values", values)):
        assert torch.isfinite(tensor.grad).all(), name
    assert (queries.grad[1, :3] == 0).all()  # the hidden queries get no gradient at all


def test_a_broadcast_key_padding_mask_works_with_the_option():
    torch.manual_seed(12)
    queries, keys, values = torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.randn(2, 3, 2)
    empty = padding_mask([3, 0], num_tokens=3)[:, None, :]  # (2, 1, 3): sequence 2 is all padding
    context_vecs, attn_weights = scaled_dot_product_attention(queries, keys, values, mask=empty,
                                                              fully_masked_rows="zero")
    assert (attn_weights[1] == 0).all() and (context_vecs[1] == 0).all()
    torch.testing.assert_close(attn_weights[0].sum(-1), torch.ones(3))


def test_fully_masked_rows_option_is_checked():
    x = torch.ones(2, 3)
    with pytest.raises(ValueError, match="fully_masked_rows must be 'raise' or 'zero', got 'nan'"):
        scaled_dot_product_attention(x, x, x, fully_masked_rows="nan")


def test_pytorch_style_keep_mask_is_caught():
    # tril = "may see" in PyTorch's convention; read as "hide", the last query hides every key.
    x = torch.ones(4, 3)
    keep = ~causal_mask(4)
    with pytest.raises(ValueError, match="Check the convention"):
        scaled_dot_product_attention(x, x, x, mask=keep)


def test_is_causal_mask_measures_pytorchs_top_left_triangle():
    # T_q = T_k: the causal triangle; fewer queries than keys: still top-left (query n sees keys 0..n only).
    assert torch.equal(is_causal_mask(5, 5), causal_mask(5))
    assert torch.equal(is_causal_mask(1, 5), torch.tensor([[False, True, True, True, True]]))
    assert torch.equal(is_causal_mask(3, 6), causal_mask(6)[:3])
    with pytest.raises(ValueError, match="num_keys"):
        is_causal_mask(1, 0)
