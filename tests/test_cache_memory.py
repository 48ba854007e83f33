"""kv_cache_bytes against the bytes that the course's own caches hold, on small models of every kind, and against
the published configurations of real models (config.json of each model's official repository)."""

import pytest
import torch

from helpers.generation import kv_cache_bytes
from helpers.gqa import GroupedQueryAttention, KVCache
from helpers.latent_attention import MultiHeadLatentAttention


def _held(layers, caches, x, steps):
    """Feed ``x`` through each layer with its cache, a token at a time; sum the bytes of the distinct caches."""
    with torch.no_grad():
        for t in range(steps):
            for layer, cache in zip(layers, caches):
                if cache is not None:
                    layer(x[:, t:t + 1], cache=cache)
    distinct = {id(cache): cache for cache in caches if cache is not None}
    return sum(cache.memory_bytes() for cache in distinct.values())


@pytest.mark.parametrize("num_heads, num_kv_heads", [(4, 4), (4, 2), (4, 1)])        # MHA, GQA, MQA
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_full_layers(num_heads, num_kv_heads, dtype):
    torch.manual_seed(0)
    layers = [GroupedQueryAttention(16, 16, 12, 0.0, num_heads, num_kv_heads).to(dtype) for _ in range(3)]
    caches = [KVCache() for _ in layers]
    x = torch.randn(2, 9, 16, dtype=dtype)
    assert _held(layers, caches, x, 9) == kv_cache_bytes(3, num_kv_heads, 16 // num_heads, 9, batch_size=2,
                                                         num_heads=num_heads, dtype=dtype)


@pytest.mark.parametrize("num_tokens", [3, 6, 10])                 # shorter than the window, equal, longer
def test_sliding_window_layers_on_some_layers(num_tokens):
    torch.manual_seed(0)
    windowed = [0, 2, 3]
    layers = [GroupedQueryAttention(16, 16, 12, 0.0, 4, 2, window_size=6 if i in windowed else None)
              for i in range(5)]
    caches = [KVCache(window_size=layer.window_size) for layer in layers]
    x = torch.randn(1, num_tokens, 16)
    assert _held(layers, caches, x, num_tokens) == kv_cache_bytes(5, 2, 4, num_tokens, 4, window_size=6,
                                                                  window_layers=windowed)


def test_layers_sharing_another_layers_cache():
    torch.manual_seed(0)
    layers = [GroupedQueryAttention(16, 16, 12, 0.0, 4, 2) for _ in range(4)]
    own = [KVCache(), KVCache()]
    caches = [own[0], None, own[1], None]          # layers 1 and 3 read the caches of layers 0 and 2
    x = torch.randn(2, 7, 16)
    held = _held(layers, caches, x, 7)
    caches = [own[0], own[0], own[1], own[1]]
    assert sum(c.memory_bytes() for c in {id(c): c for c in caches}.values()) == held
    assert held == kv_cache_bytes(4, 2, 4, 7, 4, 2, shared_layers={1: 0, 3: 2})


def test_latent_layers_and_keys_wider_than_values():
    torch.manual_seed(0)
    layers = [MultiHeadLatentAttention(16, 16, 12, 0.0, 4, latent_dim=6, rope_dim=2, head_dim=8) for _ in range(2)]
    caches = [layer.new_cache() for layer in layers]
    x = torch.randn(3, 8, 16)
    assert _held(layers, caches, x, 8) == kv_cache_bytes(2, latent_dim=6, rope_dim=2, num_tokens=8, batch_size=3,
                                                         dtype=torch.float32)
    cache = KVCache()                               # MHA with keys of D + d_R and values of D (DeepSeek-V3 unabsorbed)
    cache.update(torch.zeros(3, 4, 8, 10), torch.zeros(3, 4, 8, 8))
    assert cache.memory_bytes() == kv_cache_bytes(1, 4, 10, 8, 4, 3, value_head_dim=8)


# Per token in 16-bit numbers, from each model's config.json (num_hidden_layers, num_key_value_heads, head_dim or
# hidden_size / num_attention_heads where the file gives no head_dim; DeepSeek: kv_lora_rank, qk_rope_head_dim).
def test_published_configurations():
    KiB, MiB, GiB = 2**10, 2**20, 2**30
    assert kv_cache_bytes(32, 8, 128, num_heads=32) == 128 * KiB                       # Llama 3 8B
    assert kv_cache_bytes(36, 8, 128, num_heads=32) == 144 * KiB                       # Qwen3-8B
    assert kv_cache_bytes(28, 8, 128, num_heads=16) == 112 * KiB                       # Qwen3-0.6B (head_dim 128)
    assert kv_cache_bytes(28, 8, 1024 // 16) == 56 * KiB                               # ... with d_model / H: wrong
    assert kv_cache_bytes(12, 12, 64) == 36 * KiB                                      # GPT-2 small
    assert kv_cache_bytes(32, 8, 128, 32768, window_size=4096) == GiB // 2              # Mistral 7B v0.1
    assert kv_cache_bytes(32, 8, 128, 4096, window_size=4096) == kv_cache_bytes(32, 8, 128, 10**6, window_size=4096)
    assert kv_cache_bytes(61, latent_dim=512, rope_dim=64) == 61 * 576 * 2              # DeepSeek-V3: 68.6 KiB
    assert round(kv_cache_bytes(61, latent_dim=512, rope_dim=64) / KiB, 1) == 68.6
    assert round(kv_cache_bytes(61, 128, 192, value_head_dim=128) / MiB, 2) == 4.77     # ... as full MHA
    gemma2 = kv_cache_bytes(42, 8, 256, 8192, window_size=4096, window_layers=range(0, 42, 2))
    assert gemma2 == 21 * 2 * 8 * 256 * 2 * (8192 + 4096)                                # Gemma 2 9B


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(num_layers=2), ValueError, "num_kv_heads and head_dim are needed"),
    (dict(num_layers=2, num_kv_heads=2, head_dim=4, latent_dim=8, rope_dim=2), ValueError, "not both"),
    (dict(num_layers=2, latent_dim=8), TypeError, "rope_dim must be an int"),
    (dict(num_layers=2, num_kv_heads=3, head_dim=4, num_heads=8), ValueError, "multiple of num_kv_heads"),
    (dict(num_layers=2, num_kv_heads=2, head_dim=4, dtype="bf16"), TypeError, "torch.dtype"),
    (dict(num_layers=2, num_kv_heads=2, head_dim=4, dtype=torch.float32, bytes_per_value=2), ValueError,
     "contradicts"),
    (dict(num_layers=2, num_kv_heads=2, head_dim=4, window_layers=[0]), ValueError, "needs a window_size"),
    (dict(num_layers=2, num_kv_heads=2, head_dim=4, window_size=4, window_layers=[2]), ValueError, "0 .. 1"),
    (dict(num_layers=3, num_kv_heads=2, head_dim=4, shared_layers={1: 1}), ValueError, "keeps its own"),
    (dict(num_layers=3, num_kv_heads=2, head_dim=4, shared_layers={1: 0, 2: 1}), ValueError, "keeps its own"),
    (dict(num_layers=2, num_kv_heads=2, head_dim=0), ValueError, "head_dim must be at least 1"),
])
def test_bad_configurations_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        kv_cache_bytes(**kwargs)
