"""Exercises for notebook 11: attention at generation time.

1. the sliding-window mask for new queries that meet cached keys;
2. spot the bug: a chunk of new tokens after a cache, masked with is_causal=True.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids

__all__ = ["window_mask", "grouped_heads"]


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
          "Two conditions hide a key. Which two?"],
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
    rules=[forbids("helpers.gqa.decode_mask", "helpers.generation.decode_mask", "helpers.decode_mask",
                   "helpers.masks.sliding_window_mask", "helpers.sliding_window_mask",
                   why="Build the mask from positions yourself.")],
)


# --- 2. spot the bug: query heads paired with the wrong key/value heads --------------------------------------
def _heads_cases(g: torch.Generator) -> list[Case]:
    def case(description, batch, heads, kv_heads, num_queries, num_keys, head_dim):
        queries = torch.randn(batch, heads, num_queries, head_dim, generator=g)
        keys = torch.randn(batch, kv_heads, num_keys, head_dim, generator=g)
        values = torch.randn(batch, kv_heads, num_keys, head_dim, generator=g)
        return Case(description, (queries, keys, values))
    return [case("4 query heads, 2 key/value heads, 1 new query, 5 keys", 1, 4, 2, 1, 5, 8),
            case("6 query heads, 3 key/value heads, 3 new queries, 7 keys", 2, 6, 3, 3, 7, 4),
            case("8 query heads, 2 key/value heads, 4 queries, 4 keys (no cache)", 1, 8, 2, 4, 4, 4),
            case("4 query heads, 1 key/value head (multi-query), 2 new queries, 6 keys", 1, 4, 1, 2, 6, 4)]


def _reference_grouped(queries, keys, values):
    from ..attention import scaled_dot_product_attention
    from ..gqa import decode_mask, expand_kv_heads
    mask = decode_mask(queries.shape[2], keys.shape[2], device=queries.device)
    heads = queries.shape[1]
    context_vecs, _ = scaled_dot_product_attention(queries, expand_kv_heads(keys, heads),
                                                   expand_kv_heads(values, heads), mask=mask)
    return context_vecs


def buggy_grouped_attention(queries, keys, values):
    # queries (B, H, T_q, D): a chunk of T_q new tokens; keys, values (B, H_kv, T_k, D): the cache plus the chunk
    group_size = queries.shape[1] // keys.shape[1]                          # G = H / H_kv
    keys = keys.repeat_interleave(group_size, dim=1)                        # (B, H_kv, T_k, D) -> (B, H, T_k, D)
    values = values.repeat_interleave(group_size, dim=1)                    # head h gets key/value head h // G
    return F.scaled_dot_product_attention(queries, keys, values, is_causal=True)   # (B, H, T_q, D)


def _solution_grouped_attention(queries, keys, values):
    group_size = queries.shape[1] // keys.shape[1]                          # G = H / H_kv
    keys = keys.repeat_interleave(group_size, dim=1)                        # head h gets key/value head h // G
    values = values.repeat_interleave(group_size, dim=1)
    num_queries, num_keys = queries.shape[2], keys.shape[2]
    query_positions = torch.arange(num_keys - num_queries, num_keys, device=queries.device)[:, None]  # (T_q, 1)
    key_positions = torch.arange(num_keys, device=queries.device)[None, :]                            # (1, T_k)
    mask = key_positions > query_positions                                  # (T_q, T_k), True = hide
    scores = queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5      # (B, H, T_q, D) @ (B, H, D, T_k)
    weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    return weights @ values                                                 # (B, H, T_q, T_k) @ (B, H, T_k, D)


def _repeat_heads(queries, keys, values):
    keys = keys.repeat(1, queries.shape[1] // keys.shape[1], 1, 1)          # tiles heads: 0, 1, 0, 1
    values = values.repeat(1, queries.shape[1] // values.shape[1], 1, 1)
    num_queries, num_keys = queries.shape[2], keys.shape[2]
    device = queries.device
    positions = torch.arange(num_keys - num_queries, num_keys, device=device)[:, None]
    mask = torch.arange(num_keys, device=device)[None, :] > positions
    scores = queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ values


grouped_heads = SpotTheBug(
    "Spot the bug: a chunk of new tokens after a cache",
    "grouped_attention(queries, keys, values) should return the context vectors (B, H, T_q, D) of causal "
    "grouped-query attention for a chunk of T_q new tokens appended to a non-empty cache: queries (B, H, T_q, D) "
    "of the new tokens, keys and values (B, H_kv, T_k, D) of all T_k tokens (the cache plus the chunk), query "
    "head h reading key/value head h // G with G = H / H_kv. The shapes come out right, yet the answer is wrong "
    "whenever the cache is not empty. Find the bug and fix it.",
    reference=_reference_grouped,
    cases=_heads_cases,
    hint=["Take 2 new tokens after 3 cached ones (T_q = 2, T_k = 5): at which positions do the new queries sit, "
          "and which keys may each see?",
          "Print torch.ones(2, 5, dtype=torch.bool).tril(): the mask is_causal=True uses (True = take part)."],
    solution=_solution_grouped_attention,
    buggy=buggy_grouped_attention,
    bug_message="is_causal=True aligns the causal triangle top-left: new query i sees keys 0..i only, as if the "
                "chunk were the start of the sequence. The T_q new tokens are the LAST ones: query i sits at "
                "position T_k - T_q + i and must see every key up to it (bottom-right), cached keys included. "
                "With T_q = T_k (no cache) the two agree, which is why the bug hides.",
    mistakes=[Mistake(_repeat_heads, "query head h reads key/value head h % H_kv, not h // G: .repeat tiles the "
                                     "whole stack of key/value heads (0, 1, 0, 1 for H = 4, H_kv = 2). "
                                     "repeat_interleave(G, dim=1) keeps the G copies of each head together "
                                     "(0, 0, 1, 1).")],
    rules=[forbids("helpers.gqa.expand_kv_heads",
                   "helpers.generation.expand_kv_heads", "helpers.expand_kv_heads",
                   why="Expand the key/value heads yourself.")],
)
