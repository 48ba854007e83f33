"""Grouped-query attention, the decoding mask and the KV cache: equal to PyTorch and to notebook 06's layer,
edge cases of the cache and the window, and clear errors."""

import pytest
import torch
import torch.nn.functional as F

from helpers.gqa import GroupedQueryAttention, KVCache, decode_mask, expand_kv_heads
from helpers.masks import causal_mask, sliding_window_mask
from helpers.modules import MultiHeadAttention


def _layer(num_heads=4, num_kv_heads=2, window_size=None, context_length=12, d_out=16, seed=0):
    torch.manual_seed(seed)
    return GroupedQueryAttention(8, d_out, context_length, 0.0, num_heads, num_kv_heads,
                                 window_size=window_size).eval()


def _inputs(batch=2, tokens=7, d_in=8, seed=1):
    return torch.randn(batch, tokens, d_in, generator=torch.Generator().manual_seed(seed))


# --- masks ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_tokens, window_size", [(1, 1), (5, 1), (6, 3), (4, 4), (4, 9)])
def test_sliding_window_mask_counts_the_keys_each_query_sees(num_tokens, window_size):
    mask = sliding_window_mask(num_tokens, window_size)
    seen = (~mask).sum(dim=1)
    assert seen.tolist() == [min(i + 1, window_size) for i in range(num_tokens)]
    assert not mask.diagonal().any()   # every query sees itself
    if window_size >= num_tokens:
        assert torch.equal(mask, causal_mask(num_tokens))
    if window_size == 1:
        assert torch.equal(~mask, torch.eye(num_tokens, dtype=torch.bool))


def test_decode_mask_is_the_causal_or_window_mask_when_square_and_aligned_bottom_right_otherwise():
    assert torch.equal(decode_mask(6, 6), causal_mask(6))
    assert torch.equal(decode_mask(6, 6, window_size=3), sliding_window_mask(6, 3))
    assert torch.equal(decode_mask(3, 6), causal_mask(6)[3:])
    assert torch.equal(decode_mask(3, 9, window_size=4), sliding_window_mask(9, 4)[6:])
    assert not decode_mask(1, 5).any()   # one new query sees every key
    assert decode_mask(1, 5, window_size=2).tolist() == [[True, True, True, False, False]]


def test_is_causal_aligns_top_left_so_a_single_query_sees_key_0_only():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, 4, generator=g) for n in (1, 5, 5))
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, is_causal=True), v[:, :, :1])
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=~decode_mask(1, 5)),
                               F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("call, match", [
    (lambda: sliding_window_mask(4, 0), "window_size must be at least 1"),
    (lambda: sliding_window_mask(4, 2.0), "window_size must be an int"),
    (lambda: decode_mask(5, 3), "num_queries must be at most num_keys"),
    (lambda: decode_mask(1, 3, window_size=0), "window_size must be at least 1"),
])
def test_masks_reject_bad_input(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# --- expand_kv_heads ---------------------------------------------------------------------------------------------
def test_expand_kv_heads_gives_query_head_h_the_kv_head_h_over_g():
    kv = torch.arange(3.0).view(1, 3, 1, 1).expand(1, 3, 2, 2)   # head index as value
    expanded = expand_kv_heads(kv, 6)
    assert expanded[0, :, 0, 0].tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="multiple of the 3 key/value heads"):
        expand_kv_heads(kv, 4)


# --- the layer ---------------------------------------------------------------------------------------------------
def test_with_as_many_kv_heads_as_heads_it_is_multi_head_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 16, 12, 0.0, 4).eval()
    gqa = _layer(num_heads=4, num_kv_heads=4)
    assert [n for n, _ in gqa.named_parameters()] == [n for n, _ in mha.named_parameters()]
    x = _inputs()
    torch.testing.assert_close(gqa(x), mha(x))
    _, weights = gqa(x, return_weights=True)
    _, mha_weights = mha(x, return_weights=True)
    torch.testing.assert_close(weights, mha_weights)


@pytest.mark.skipif("enable_gqa" not in (F.scaled_dot_product_attention.__doc__ or ""),
                    reason="this torch has no enable_gqa option")
@pytest.mark.parametrize("num_heads, num_kv_heads", [(4, 2), (4, 1), (8, 2), (6, 3)])
def test_equals_pytorch_enable_gqa(num_heads, num_kv_heads):
    layer = _layer(num_heads, num_kv_heads, d_out=4 * num_heads)
    x = _inputs()
    b, t, _ = x.shape
    with torch.no_grad():
        q = layer.W_query(x).view(b, t, num_heads, 4).transpose(1, 2)
        k = layer.W_key(x).view(b, t, num_kv_heads, 4).transpose(1, 2)
        v = layer.W_value(x).view(b, t, num_kv_heads, 4).transpose(1, 2)
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        expected = layer.out_proj(z.transpose(1, 2).reshape(b, t, 4 * num_heads))
        torch.testing.assert_close(layer(x), expected)


def test_repeat_instead_of_repeat_interleave_would_differ():
    layer = _layer(4, 2)
    x = _inputs()
    b, t, _ = x.shape
    with torch.no_grad():
        q = layer.W_query(x).view(b, t, 4, 4).transpose(1, 2)
        k = layer.W_key(x).view(b, t, 2, 4).transpose(1, 2).repeat(1, 2, 1, 1)
        v = layer.W_value(x).view(b, t, 2, 4).transpose(1, 2).repeat(1, 2, 1, 1)
        wrong = layer.out_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, 16))
        assert not torch.allclose(layer(x), wrong, atol=1e-4)


def test_gradients_reach_every_parameter():
    layer = _layer(4, 2).train()
    layer(_inputs()).sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("num_kv_heads, window_size", [(2, None), (1, None), (4, 3), (2, 1), (2, 50)])
def test_cached_steps_equal_the_full_pass(num_kv_heads, window_size):
    layer = _layer(4, num_kv_heads, window_size=window_size)
    x = _inputs(tokens=9)
    full = layer(x)
    cache = KVCache(window_size=window_size)
    pieces = [layer(x[:, :4], cache=cache)] + [layer(x[:, i:i + 1], cache=cache) for i in range(4, 9)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full)
    assert cache.num_seen == 9
    assert len(cache) == (9 if window_size is None else min(window_size, 9))
    assert cache.keys.shape == (2, num_kv_heads, len(cache), 4)


def test_a_window_larger_than_the_sequence_is_plain_causal_attention():
    x = _inputs()
    torch.testing.assert_close(_layer(window_size=50)(x), _layer()(x))


def test_the_cache_may_not_grow_past_the_context_length():
    layer = _layer(context_length=6)
    cache = KVCache()
    layer(_inputs(tokens=5), cache=cache)
    layer(_inputs(tokens=1), cache=cache)
    with pytest.raises(ValueError, match="6 cached \\+ 1 new tokens exceed context_length=6"):
        layer(_inputs(tokens=1), cache=cache)
    with pytest.raises(ValueError, match="exceed context_length"):
        layer(_inputs(tokens=13))


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(num_heads=4, num_kv_heads=3), ValueError, "num_heads must be divisible by num_kv_heads"),
    (dict(num_heads=4, num_kv_heads=0), ValueError, "num_kv_heads must be at least 1"),
    (dict(num_heads=4, num_kv_heads=2, window_size=0), ValueError, "window_size must be at least 1"),
    (dict(num_heads=3, num_kv_heads=1), ValueError, "d_out must be divisible by num_heads"),
    (dict(num_heads=4, num_kv_heads=2.0), TypeError, "num_kv_heads must be an int"),
])
def test_bad_construction_is_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        GroupedQueryAttention(8, 16, 12, 0.0, **kwargs)


def test_bad_forward_input_is_named():
    layer = _layer()
    with pytest.raises(ValueError, match="d_in=8"):
        layer(torch.randn(1, 3, 5))
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        layer(_inputs(), cache={})


# --- the cache ---------------------------------------------------------------------------------------------------
def test_an_empty_cache_holds_nothing():
    cache = KVCache()
    assert len(cache) == 0 and cache.num_seen == 0 and cache.keys is None and cache.memory_bytes() == 0
    assert repr(cache) == "KVCache(entries=0, num_seen=0)"


def test_a_rolling_cache_returns_everything_the_step_needs_then_keeps_the_last_w():
    cache = KVCache(window_size=2)
    first = torch.arange(3.0).view(1, 1, 3, 1)
    keys, _ = cache.update(first, first)
    assert keys[0, 0, :, 0].tolist() == [0, 1, 2]
    assert cache.keys[0, 0, :, 0].tolist() == [1, 2] and cache.num_seen == 3
    keys, _ = cache.update(torch.full((1, 1, 1, 1), 3.0), torch.full((1, 1, 1, 1), 3.0))
    assert keys[0, 0, :, 0].tolist() == [1, 2, 3]
    assert cache.keys[0, 0, :, 0].tolist() == [2, 3] and cache.num_seen == 4
    assert cache.memory_bytes() == 2 * 2 * 4


@pytest.mark.parametrize("keys, values, match", [
    (torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), "keys must have shape"),
    (torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 2, 4), "same shape"),
    (torch.zeros(1, 2, 3, 4, dtype=torch.long), torch.zeros(1, 2, 3, 4), "floating-point"),
])
def test_bad_cache_updates_are_named(keys, values, match):
    with pytest.raises((ValueError, TypeError), match=match):
        KVCache().update(keys, values)


def test_entries_that_do_not_fit_the_cache_are_refused():
    cache = KVCache()
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="do not fit"):
        cache.update(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    with pytest.raises(ValueError, match="window_size must be at least 1"):
        KVCache(window_size=0)
