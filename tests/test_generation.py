"""The tiny language model, token-by-token generation with and without a KV cache, and the cache's memory."""

import pytest
import torch

from helpers.generation import (TinyCausalLM, generate, kv_cache_bytes, repeating_sequences, time_per_token,
                                train_tiny_lm)


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    model = TinyCausalLM(10, 16, d_model=32, num_heads=4)
    losses = train_tiny_lm(model, period=4, num_steps=100)
    return model, losses


def _untrained(num_kv_heads=None, window_size=None, seed=0):
    torch.manual_seed(seed)
    model = TinyCausalLM(8, 12, d_model=16, num_heads=4, num_kv_heads=num_kv_heads, window_size=window_size)
    with torch.no_grad():   # large position vectors, so a wrong position changes the logits
        model.position_embedding.weight.normal_(0.0, 1.0)
    return model.eval()


def test_the_toy_language_repeats_its_first_period():
    ids = repeating_sequences(5, 11, 3, 6, torch.Generator().manual_seed(0))
    assert ids.shape == (5, 11) and ids.max() < 6
    torch.testing.assert_close(ids[:, 3:], ids[:, :-3])


def test_training_learns_the_language(trained):
    model, losses = trained
    assert losses[0] > 2.0 and losses[-1] < 0.01
    prompts = repeating_sequences(100, 4, 4, 10, torch.Generator().manual_seed(9))
    expected = repeating_sequences(100, 16, 4, 10, torch.Generator().manual_seed(9))
    assert torch.equal(generate(model, prompts, 12).token_ids, expected)


@pytest.mark.parametrize("num_kv_heads, window_size", [(None, None), (2, None), (1, None), (None, 3), (2, 1),
                                                       (None, 40)])
def test_cached_generation_equals_recomputing(num_kv_heads, window_size):
    model = _untrained(num_kv_heads, window_size)
    prompts = torch.randint(0, 8, (3, 4), generator=torch.Generator().manual_seed(1))
    cached, plain = generate(model, prompts, 8), generate(model, prompts, 8, use_cache=False)
    assert torch.equal(cached.token_ids, plain.token_ids)
    torch.testing.assert_close(cached.logits, plain.logits)
    assert cached.query_rows == [4] + [1] * 7 and plain.query_rows == list(range(4, 12))
    held = [4 + step - 1 if window_size is None else min(window_size, 4 + step - 1) for step in range(1, 8)]
    assert [w.shape[-1] for w in cached.weights] == [4] + [h + 1 for h in held]   # held entries + the new one
    assert len(cached.cache) == (11 if window_size is None else min(window_size, 11))
    assert plain.cache is None


def test_a_forgotten_position_offset_changes_the_logits():
    """What exercise 3 of the notebook is about: the cached path depends on the offset."""
    model = _untrained()
    prompts = torch.randint(0, 8, (2, 3), generator=torch.Generator().manual_seed(2))
    cache = model.new_cache()
    model(prompts, cache=cache)
    nxt = torch.tensor([[1], [2]])
    right = model(nxt, cache=cache)
    x = model.token_embedding(nxt) + model.position_embedding(torch.tensor([0]))
    cache.num_seen -= 1     # undo the step: the same cache, fed again with position 0
    cache.keys, cache.values = cache.keys[:, :, :-1], cache.values[:, :, :-1]
    wrong = model.unembed(model.attention(x, cache=cache))
    assert not torch.allclose(right, wrong, atol=1e-3)


def test_generation_may_not_run_past_the_context_length():
    model = _untrained()
    prompts = torch.zeros(1, 4, dtype=torch.long)
    assert generate(model, prompts, 9).token_ids.shape == (1, 13)   # the last token is never fed back
    with pytest.raises(ValueError, match="do not fit context_length=12"):
        generate(model, prompts, 10)
    cache = model.new_cache()
    model(torch.zeros(1, 12, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="12 cached \\+ 1 new tokens exceed context_length=12"):
        model(torch.zeros(1, 1, dtype=torch.long), cache=cache)


@pytest.mark.parametrize("call, error, match", [
    (lambda m: m(torch.zeros(1, 3)), TypeError, "torch.long"),
    (lambda m: m(torch.zeros(3, dtype=torch.long)), ValueError, "shape \\(batch_size, num_tokens\\)"),
    (lambda m: m(torch.full((1, 3), 8)), ValueError, "lie in \\[0, 8\\)"),
    (lambda m: generate(m, torch.zeros(1, 2, dtype=torch.long), 0), ValueError, "num_new_tokens must be at least 1"),
    (lambda m: generate(m, torch.zeros(1, 2, dtype=torch.long), 2, use_cache=1), TypeError, "use_cache"),
    (lambda m: train_tiny_lm(m, period=12), ValueError, "period must be shorter"),
    (lambda m: time_per_token(m, 1, True), ValueError, "num_tokens must be in"),
])
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call(_untrained())


def test_kv_cache_bytes_matches_the_tensors_and_the_published_sizes():
    model = _untrained(num_kv_heads=2)
    result = generate(model, torch.zeros(2, 3, dtype=torch.long), 5)
    assert result.cache.memory_bytes() == kv_cache_bytes(1, 2, 4, 7, bytes_per_value=4, batch_size=2)
    assert kv_cache_bytes(12, 12, 64, 1024) == 36 * 2**20          # GPT-2 small, 16-bit
    assert kv_cache_bytes(80, 8, 128, 4096) == 1280 * 2**20        # Llama 2 70B, 16-bit
    assert kv_cache_bytes(32, 8, 128, 8192) == 2**30               # Llama 3 8B, 16-bit
    with pytest.raises(ValueError, match="num_kv_heads must be at least 1"):
        kv_cache_bytes(1, 0, 4, 4)


def test_time_per_token_returns_a_positive_duration():
    model = _untrained()
    assert time_per_token(model, 6, use_cache=True, repeats=1) > 0
    assert time_per_token(model, 6, use_cache=False, repeats=1) > 0
    assert time_per_token(model, 2, use_cache=True, repeats=1) > 0   # nothing to cache before the one token
