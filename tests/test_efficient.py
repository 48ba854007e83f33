"""Tiled online-softmax attention, FastMultiHeadAttention, and the measuring helpers."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import scaled_dot_product_attention
from helpers.efficient import (
    FastMultiHeadAttention,
    aten_ops_called,
    iter_tile_steps,
    ops_inside,
    peak_tensor_bytes,
    tiled_attention,
)
from helpers.masks import causal_mask
from helpers.modules import MultiHeadAttention

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _qkv(lead, num_queries, num_keys, d_k=8, d_v=5, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    queries = torch.randn(*lead, num_queries, d_k, generator=generator, dtype=dtype)
    keys = torch.randn(*lead, num_keys, d_k, generator=generator, dtype=dtype)
    values = torch.randn(*lead, num_keys, d_v, generator=generator, dtype=dtype)
    return queries, keys, values


# (lead dims, T_q, T_k, tile_size): tiles that divide T, that do not, one tile, tiles of one token.
SHAPES = [((), 8, 8, 2), ((2,), 37, 37, 8), ((2, 3), 16, 16, 16), ((2, 3), 5, 9, 4), ((3,), 9, 5, 4),
          ((1,), 7, 7, 1), ((2,), 6, 6, 100)]


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("lead,num_queries,num_keys,tile_size", SHAPES)
def test_tiled_attention_equals_torch_sdpa(lead, num_queries, num_keys, tile_size, is_causal):
    queries, keys, values = _qkv(lead, num_queries, num_keys)
    expected = F.scaled_dot_product_attention(queries, keys, values, is_causal=is_causal)
    got = tiled_attention(queries, keys, values, is_causal=is_causal, tile_size=tile_size)
    assert got.shape == (*lead, num_queries, values.shape[-1])
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("tile_size", [1, 3, 8])
def test_tiled_attention_equals_the_explicit_formula(tile_size):
    queries, keys, values = _qkv((2, 4), 11, 11, dtype=torch.float32)
    expected, _ = scaled_dot_product_attention(queries, keys, values, mask=causal_mask(11))
    got = tiled_attention(queries, keys, values, is_causal=True, tile_size=tile_size)
    torch.testing.assert_close(got, expected)


def test_tiled_attention_survives_scores_that_overflow_a_naive_softmax():
    queries, keys, values = _qkv((2,), 10, 10, dtype=torch.float32)
    queries = queries * 200.0  # scores in the thousands: exp() alone would be inf
    got = tiled_attention(queries, keys, values, is_causal=True, tile_size=3)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, F.scaled_dot_product_attention(queries, keys, values, is_causal=True))


def test_tiled_attention_gradients_match_the_explicit_formula():
    inputs = [t.requires_grad_() for t in _qkv((2,), 9, 9)]
    tiled_attention(*inputs, is_causal=True, tile_size=4).pow(2).sum().backward()
    tiled_grads = [t.grad.clone() for t in inputs]
    for t in inputs:
        t.grad = None
    scaled_dot_product_attention(*inputs, mask=causal_mask(9))[0].pow(2).sum().backward()
    for tiled_grad, t in zip(tiled_grads, inputs):
        torch.testing.assert_close(tiled_grad, t.grad)


@pytest.mark.parametrize("is_causal,expected_steps", [(False, 16), (True, 10)])
def test_tile_steps_skip_the_future_and_stay_small(is_causal, expected_steps):
    queries, keys, values = _qkv((), 8, 8)
    steps = list(iter_tile_steps(queries, keys, values, is_causal=is_causal, tile_size=2))
    assert len(steps) == expected_steps  # causal: 1 + 2 + 3 + 4 tiles on or below the diagonal
    for step in steps:
        assert len(step.query_rows) == 2 and len(step.key_cols) == 2
        if is_causal:
            assert step.key_cols.start <= step.query_rows.stop - 1, "a tile wholly in the future was computed"
    assert sum(step.done for step in steps) == 4  # one finished block of rows per query tile


def test_tile_steps_end_with_the_true_row_max_and_softmax_denominator():
    queries, keys, values = _qkv((), 8, 8)
    scores = (queries @ keys.T / keys.shape[-1] ** 0.5).masked_fill(causal_mask(8), float("-inf"))
    row_max = scores.amax(dim=-1)
    row_sum = torch.exp(scores - row_max[:, None]).sum(dim=-1)
    for step in iter_tile_steps(queries, keys, values, is_causal=True, tile_size=3):
        rows = list(step.query_rows)
        seen = scores[rows][:, : step.key_cols.stop]  # every key tile up to this one
        torch.testing.assert_close(step.running_max, seen.amax(dim=-1))
        if step.done:
            torch.testing.assert_close(step.running_max, row_max[rows])
            torch.testing.assert_close(step.running_sum, row_sum[rows])


def test_tiled_attention_rejects_bad_input():
    queries, keys, values = _qkv((2,), 4, 4)
    with pytest.raises(TypeError, match="queries"):
        tiled_attention(queries.long(), keys, values)
    with pytest.raises(ValueError, match="d_k"):
        tiled_attention(queries, keys[..., :3], values)
    with pytest.raises(ValueError, match="same number of tokens"):
        tiled_attention(queries, keys, values[:, :3])
    with pytest.raises(ValueError, match="tile_size"):
        tiled_attention(queries, keys, values, tile_size=0)
    with pytest.raises(TypeError, match="is_causal"):
        tiled_attention(queries, keys, values, is_causal=1)
    with pytest.raises(ValueError, match="values"):
        tiled_attention(queries, keys, values[0, 0])
    with pytest.raises(ValueError, match="at least one token"):
        tiled_attention(queries[:, :0], keys, values)


def _pair(seed=123, **options):
    settings = dict(d_in=6, d_out=8, context_length=12, dropout=0.0, num_heads=2) | options
    torch.manual_seed(seed)
    slow = MultiHeadAttention(**settings)
    torch.manual_seed(seed)
    fast = FastMultiHeadAttention(**settings)
    return slow, fast


def test_fast_mha_has_the_same_parameters_in_the_same_order():
    slow, fast = _pair(qkv_bias=True)
    assert isinstance(fast, MultiHeadAttention)
    slow_state, fast_state = slow.state_dict(), fast.state_dict()
    assert list(slow_state) == list(fast_state)
    for name in slow_state:
        assert torch.equal(slow_state[name], fast_state[name]), name


@pytest.mark.parametrize("qkv_bias", [False, True])
@pytest.mark.parametrize("num_tokens", [1, 5, 12])
def test_fast_mha_equals_multi_head_attention(qkv_bias, num_tokens):
    slow, fast = _pair(qkv_bias=qkv_bias, dropout=0.3)
    slow.eval(), fast.eval()
    x = torch.randn(3, num_tokens, 6, generator=torch.Generator().manual_seed(1))
    out = fast(x)
    assert out.shape == (3, num_tokens, 8)
    torch.testing.assert_close(out, slow(x))


def test_fast_mha_with_weights_falls_back_to_the_explicit_path():
    slow, fast = _pair()
    x = torch.randn(2, 7, 6, generator=torch.Generator().manual_seed(2))
    context_vecs, attn_weights = fast(x, return_weights=True)
    expected_context, expected_weights = slow(x, return_weights=True)
    assert attn_weights.shape == (2, 2, 7, 7)
    torch.testing.assert_close(context_vecs, expected_context)
    torch.testing.assert_close(attn_weights, expected_weights)


def test_fast_mha_runs_a_fused_kernel_not_the_weights_matrix():
    _, fast = _pair()
    x = torch.randn(2, 7, 6)
    with torch.no_grad():
        ops = aten_ops_called(fast, x)
    assert any("scaled_dot_product" in op for op in ops), ops
    assert not {"aten._safe_softmax", "aten._softmax", "aten.softmax"} & set(ops), ops


def test_fast_mha_gradients_match():
    slow, fast = _pair(qkv_bias=True)
    x = torch.randn(2, 9, 6, generator=torch.Generator().manual_seed(3))
    slow(x).sum().backward()
    fast(x).sum().backward()
    for (name, slow_param), fast_param in zip(slow.named_parameters(), fast.parameters()):
        assert fast_param.grad is not None, name
        torch.testing.assert_close(fast_param.grad, slow_param.grad, msg=name)


def test_fast_mha_dropout_is_live_in_train_mode_only():
    _, fast = _pair(dropout=0.5)
    x = torch.randn(2, 10, 6, generator=torch.Generator().manual_seed(4))
    torch.manual_seed(0)
    train_out = fast(x)
    fast.eval()
    eval_out = fast(x)
    assert not torch.allclose(train_out, eval_out)
    torch.testing.assert_close(fast(x), eval_out)


def test_state_dicts_load_both_ways():
    slow, _ = _pair(seed=5, qkv_bias=True)
    _, fast = _pair(seed=6, qkv_bias=True)
    x = torch.randn(2, 6, 6, generator=torch.Generator().manual_seed(5))
    fast.load_state_dict(slow.state_dict())
    torch.testing.assert_close(fast(x), slow(x))
    torch.manual_seed(99)
    other = FastMultiHeadAttention(6, 8, 12, 0.0, num_heads=2, qkv_bias=True)
    slow.load_state_dict(other.state_dict())
    torch.testing.assert_close(slow(x), other(x))


def test_fast_mha_equals_torch_multihead_attention():
    _, fast = _pair(d_in=8, qkv_bias=True)
    torch_mha = nn.MultiheadAttention(embed_dim=8, num_heads=2, bias=True, batch_first=True)
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(torch.cat([fast.W_query.weight, fast.W_key.weight, fast.W_value.weight]))
        torch_mha.in_proj_bias.copy_(torch.cat([fast.W_query.bias, fast.W_key.bias, fast.W_value.bias]))
        torch_mha.out_proj.load_state_dict(fast.out_proj.state_dict())
    x = torch.randn(2, 7, 8, generator=torch.Generator().manual_seed(6))
    expected, _ = torch_mha(x, x, x, attn_mask=causal_mask(7), need_weights=False)
    torch.testing.assert_close(fast(x), expected)


def test_fast_mha_rejects_bad_input():
    _, fast = _pair()
    with pytest.raises(ValueError, match="d_in"):
        fast(torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="context_length"):
        fast(torch.randn(2, 13, 6))
    with pytest.raises(ValueError, match="batch"):
        fast(torch.randn(5, 6))
    with pytest.raises(TypeError, match="floating-point"):
        fast(torch.ones(2, 5, 6, dtype=torch.long))
    with pytest.raises(ValueError, match="divisible"):
        FastMultiHeadAttention(6, 9, 12, 0.0, num_heads=2)


@CUDA
def test_fast_mha_equals_multi_head_attention_on_cuda():
    slow, fast = _pair(d_in=64, d_out=128, context_length=256, num_heads=4)
    slow, fast = slow.cuda().eval(), fast.cuda().eval()
    x = torch.randn(2, 200, 64, generator=torch.Generator().manual_seed(7)).cuda()
    with torch.no_grad():
        torch.testing.assert_close(fast(x), slow(x), atol=1e-4, rtol=1e-4)


@CUDA
def test_tiled_attention_on_cuda():
    queries, keys, values = (t.cuda() for t in _qkv((2, 2), 33, 33, dtype=torch.float32))
    expected = F.scaled_dot_product_attention(queries, keys, values, is_causal=True)
    torch.testing.assert_close(tiled_attention(queries, keys, values, is_causal=True, tile_size=8), expected,
                               atol=1e-4, rtol=1e-4)


def test_peak_tensor_bytes_sees_the_weights_matrix_only_on_the_explicit_path():
    queries, keys, values = _qkv((2, 4), 128, 128, d_k=16, d_v=16, dtype=torch.float32)
    weights_bytes = 2 * 4 * 128 * 128 * 4  # one (B, H, T, T) float32 tensor
    with torch.no_grad():
        (explicit, _), explicit_peak = peak_tensor_bytes(
            scaled_dot_product_attention, queries, keys, values, mask=causal_mask(128))
        tiled, tiled_peak = peak_tensor_bytes(tiled_attention, queries, keys, values, is_causal=True, tile_size=32)
    torch.testing.assert_close(tiled, explicit)
    assert explicit_peak >= 2 * weights_bytes  # scores and weights are alive together
    assert tiled_peak < weights_bytes / 2


def test_peak_tensor_bytes_ignores_views_and_counts_frees():
    x = torch.randn(1000)
    with torch.no_grad():
        _, view_peak = peak_tensor_bytes(lambda t: t.view(10, 100).transpose(0, 1), x)
        _, temp_peak = peak_tensor_bytes(lambda t: [(t * 2).sum() for _ in range(5)], x)
    assert view_peak == 0
    assert temp_peak == 4000 + 5 * 4  # one (1000,) temporary at a time, plus the five kept sums


def test_aten_ops_called_names_the_backend():
    queries, keys, values = _qkv((1, 2), 16, 16, d_v=8, dtype=torch.float32)  # fused kernels want d_v == d_k
    with torch.no_grad():
        fused = aten_ops_called(F.scaled_dot_product_attention, queries, keys, values, is_causal=True)
        math_path = aten_ops_called(F.scaled_dot_product_attention, queries, keys, values, dropout_p=0.5)
    assert any("flash_attention" in op or "efficient_attention" in op for op in fused), fused
    assert "aten._safe_softmax" in math_path and "aten.bmm" in math_path, math_path


def test_measuring_helpers_refuse_inference_mode():
    queries, keys, values = _qkv((1,), 4, 4, dtype=torch.float32)
    with torch.inference_mode():
        with pytest.raises(RuntimeError, match="inference_mode"):
            aten_ops_called(F.scaled_dot_product_attention, queries, keys, values)
        with pytest.raises(RuntimeError, match="inference_mode"):
            peak_tensor_bytes(F.scaled_dot_product_attention, queries, keys, values)


def test_ops_inside_sees_what_nn_multihead_attention_hides_from_the_dispatch_hook(capfd):
    """With a mask, nn.MultiheadAttention's own operator builds the (B, H, T, T) weights on the CPU: the dispatch
    hook sees only the operator, the profiler sees the products and the softmax inside it, and prints nothing."""
    torch.manual_seed(0)
    layer = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    x, mask = torch.randn(3, 10, 16), causal_mask(10)

    def call():
        return layer(x, x, x, attn_mask=mask, need_weights=False)[0]

    with torch.no_grad():
        outer = aten_ops_called(call)
        capfd.readouterr()
        inside = ops_inside(call, "aten._native_multi_head_attention")
    assert "aten._native_multi_head_attention" in outer and "aten.bmm" not in outer, outer
    assert capfd.readouterr().err == ""
    heavy = [(name, shape) for name, shape in inside if name in ("aten.bmm", "aten._masked_softmax")]
    assert heavy == [("aten.bmm", (6, 10, 8)), ("aten._masked_softmax", (3, 2, 10, 10)), ("aten.bmm", (6, 10, 10))]
    assert ops_inside(call, "aten.no_such_operator") == []
