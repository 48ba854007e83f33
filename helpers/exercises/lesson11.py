"""Exercises for notebook 11: attention at generation time.

1. the sliding-window mask for new queries that meet cached keys;
2. spot the bug: cached generation whose new tokens all sit at the first positions.
"""

from __future__ import annotations

import torch

from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids

__all__ = ["window_mask", "cached_positions"]


# --- 1. the window mask for queries at the end of the keys -------------------------------------------------------
def _mask_cases(g: torch.Generator) -> list[Case]:
    return [Case("1 new query, 6 keys, window 3", (1, 6, 3)),
            Case("4 new queries, 9 keys, window 2", (4, 9, 2)),
            Case("5 queries, 5 keys (no cache), window 3", (5, 5, 3)),
            Case("3 new queries, 7 keys, window 1", (3, 7, 1)),
            Case("2 new queries, 4 keys, window 10 (longer than the sequence)", (2, 4, 10))]


def _reference_window_mask(num_queries, num_keys, window_size):
    from ..gqa import decode_mask
    return decode_mask(num_queries, num_keys, window_size)


def _solution_window_mask(num_queries, num_keys, window_size):
    query_positions = torch.arange(num_keys - num_queries, num_keys).unsqueeze(1)   # (T_q, 1): the last T_q
    key_positions = torch.arange(num_keys).unsqueeze(0)                             # (1, T_k)
    future = key_positions > query_positions
    too_old = key_positions <= query_positions - window_size
    return future | too_old                                                         # (T_q, T_k), True = hide


def _top_left(num_queries, num_keys, window_size):
    i, j = torch.arange(num_queries).unsqueeze(1), torch.arange(num_keys).unsqueeze(0)
    return (j > i) | (j <= i - window_size)


def _one_too_many(num_queries, num_keys, window_size):
    p, j = torch.arange(num_keys - num_queries, num_keys).unsqueeze(1), torch.arange(num_keys).unsqueeze(0)
    return (j > p) | (j < p - window_size)


def _window_only(num_queries, num_keys, window_size):
    p, j = torch.arange(num_keys - num_queries, num_keys).unsqueeze(1), torch.arange(num_keys).unsqueeze(0)
    return j <= p - window_size


window_mask = FunctionExercise(
    "The window mask for new queries",
    "write window_mask(num_queries, num_keys, window_size): the bool mask (num_queries, num_keys), True = hide, "
    "for the last num_queries tokens of a sequence of num_keys tokens (the new tokens, after a cache) meeting "
    "all num_keys keys, with a sliding window: a query at position p sees the keys j with p - window_size < j <= p.",
    reference=_reference_window_mask,
    cases=_mask_cases,
    hint=["Write down the position of each query first: with 2 new queries among 4 keys, which positions are they "
          "at? Then the rule is a comparison between two position vectors.",
          "Two conditions hide a key: it lies after the query, or it is window_size or more places before it. "
          "Broadcasting a (T_q, 1) column of query positions against a (1, T_k) row of key positions gives both."],
    solution=_solution_window_mask,
    mistakes=[
        Mistake(_top_left, "your queries sit at positions 0, 1, 2, ...: the mask is aligned top-left, as "
                           "F.scaled_dot_product_attention's is_causal=True aligns it. The new queries are the LAST "
                           "tokens: query i sits at position num_keys - num_queries + i."),
        Mistake(_one_too_many, "each query sees window_size + 1 keys: you kept j = p - window_size. The window "
                               "holds the query itself and the window_size - 1 keys before it."),
        Mistake(_window_only, "your mask lets every query see the keys after it: a window does not replace the "
                              "causal mask, it adds to it."),
    ],
)


# --- 2. spot the bug: the position offset forgotten after the first step ---------------------------------------
def _lm(seed: int, vocab_size: int, context_length: int, d_model: int, num_heads: int, num_kv_heads: int):
    from ..generation import TinyCausalLM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyCausalLM(vocab_size, context_length, d_model, num_heads, num_kv_heads).eval()
        with torch.no_grad():   # position vectors as large as token vectors, so a wrong position shows
            model.position_embedding.weight.normal_(0.0, 1.0)
            model.token_embedding.weight.normal_(0.0, 1.0)
    return model


def _lm_cases(g: torch.Generator) -> list[Case]:
    def case(description, batch, prompt, new, vocab, context, d_model, heads, kv_heads):
        model = _lm(int(torch.randint(0, 2**31 - 1, (1,), generator=g)), vocab, context, d_model, heads, kv_heads)
        return Case(description, (model, torch.randint(0, vocab, (batch, prompt), generator=g), new))
    return [case("the lesson's sizes: a prompt of 4 tokens, 12 new ones, 4 heads", 2, 4, 12, 10, 16, 32, 4, 4),
            case("a prompt of 3 tokens, 5 new ones, 2 query heads sharing 1 key/value head", 1, 3, 5, 6, 8, 16, 2, 1),
            case("a prompt of 1 token, 7 new ones", 3, 1, 7, 8, 8, 12, 3, 3)]


def _reference_generate(model, prompt_ids, num_new_tokens):
    from ..generation import generate
    return generate(model, prompt_ids, num_new_tokens).logits


def buggy_generate(model, prompt_ids, num_new_tokens):
    # prompt_ids (B, T_prompt) -> logits (B, num_new_tokens, vocab_size) of the greedily generated tokens
    cache = model.new_cache()
    new_ids, all_logits = prompt_ids, []
    for _ in range(num_new_tokens):
        positions = torch.arange(new_ids.shape[1])                               # positions of the new tokens
        x = model.token_embedding(new_ids) + model.position_embedding(positions)  # (B, T_new, d_model)
        logits = model.unembed(model.attention(x, cache=cache))[:, -1]           # (B, vocab_size)
        all_logits.append(logits)
        new_ids = logits.argmax(dim=-1, keepdim=True)                            # (B, 1): the next input
    return torch.stack(all_logits, dim=1)


def _solution_generate(model, prompt_ids, num_new_tokens):
    cache = model.new_cache()
    new_ids, all_logits = prompt_ids, []
    for _ in range(num_new_tokens):
        start = cache.num_seen                                                   # tokens already cached
        positions = torch.arange(start, start + new_ids.shape[1])                # where the new tokens sit
        x = model.token_embedding(new_ids) + model.position_embedding(positions)  # (B, T_new, d_model)
        logits = model.unembed(model.attention(x, cache=cache))[:, -1]           # (B, vocab_size)
        all_logits.append(logits)
        new_ids = logits.argmax(dim=-1, keepdim=True)                            # (B, 1): the next input
    return torch.stack(all_logits, dim=1)


def _one_ahead(model, prompt_ids, num_new_tokens):
    cache = model.new_cache()
    new_ids, all_logits = prompt_ids, []
    for _ in range(num_new_tokens):
        start = cache.num_seen + 1
        positions = torch.arange(start, start + new_ids.shape[1]).clamp(max=model.context_length - 1)
        x = model.token_embedding(new_ids) + model.position_embedding(positions)
        logits = model.unembed(model.attention(x, cache=cache))[:, -1]
        all_logits.append(logits)
        new_ids = logits.argmax(dim=-1, keepdim=True)
    return torch.stack(all_logits, dim=1)


cached_positions = SpotTheBug(
    "Spot the bug: generation that forgets where it is",
    "generate_logits(model, prompt_ids, num_new_tokens) should return the logits (B, num_new_tokens, vocab_size) "
    "of greedy generation with a KV cache, built from the parts of a TinyCausalLM (model.token_embedding, "
    "model.position_embedding, model.attention with cache=..., model.unembed), without calling model(...). "
    "Its first token is right; the later ones are not. Find the bug and fix it.",
    reference=_reference_generate,
    cases=_lm_cases,
    hint=["The first step feeds the whole prompt; every later step feeds one token. At which position does that "
          "one token sit in the sequence, and at which position does this code put it?",
          "The cache knows how many tokens came before: see KVCache.num_seen."],
    solution=_solution_generate,
    buggy=buggy_generate,
    bug_message="after the first step every new token gets position 0: torch.arange(1). Its query and key are "
                "then made from the position vector of position 0, not of its own position. The offset is the "
                "number of tokens already in the cache, cache.num_seen, read before the attention adds the new ones.",
    mistakes=[Mistake(_one_ahead, "your positions are one too far: cache.num_seen is already the position of the "
                                  "next token (positions count from 0).")],
    rules=[forbids("helpers.generation.TinyCausalLM.forward",
                   why="Build the logits from the model's parts, as the model's own forward does.")],
)
