"""Exercises for notebook 11: attention at generation time.

1. the sliding-window mask for new queries that meet cached keys (the course's masks are off limits);
2. spot the bug: RoPE after a cache, new queries and keys rotated as if they stood at position 0.
"""

from __future__ import annotations

import torch

from ..attention import scaled_dot_product_attention
from ..gqa import decode_mask
from ..positions import apply_rope
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids

__all__ = ["window_mask", "rope_cache"]


# --- 1. the window mask for queries at the end of the keys -------------------------------------------------------
def _mask_cases(g: torch.Generator) -> list[Case]:
    return [Case("1 new query, 6 keys, window 3", (1, 6, 3)),
            Case("4 new queries, 9 keys, window 2", (4, 9, 2)),
            Case("5 queries, 5 keys (no cache), window 3", (5, 5, 3)),
            Case("3 new queries, 7 keys, window 1", (3, 7, 1)),
            Case("2 new queries, 4 keys, window 10 (longer than the sequence)", (2, 4, 10))]


def _reference_window_mask(num_queries, num_keys, window_size):
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


def _one_too_few(num_queries, num_keys, window_size):
    p, j = torch.arange(num_keys - num_queries, num_keys).unsqueeze(1), torch.arange(num_keys).unsqueeze(0)
    return (j > p) | (j <= p - window_size + 1)


def _hides_itself(num_queries, num_keys, window_size):
    p, j = torch.arange(num_keys - num_queries, num_keys).unsqueeze(1), torch.arange(num_keys).unsqueeze(0)
    return (j >= p) | (j <= p - window_size)


def _one_future_key(num_queries, num_keys, window_size):
    p, j = torch.arange(num_keys - num_queries, num_keys).unsqueeze(1), torch.arange(num_keys).unsqueeze(0)
    return (j > p + 1) | (j <= p - window_size)


def _keep_convention(num_queries, num_keys, window_size):
    return ~_reference_window_mask(num_queries, num_keys, window_size)


def _window_only(num_queries, num_keys, window_size):
    p, j = torch.arange(num_keys - num_queries, num_keys).unsqueeze(1), torch.arange(num_keys).unsqueeze(0)
    return j <= p - window_size


window_mask = FunctionExercise(
    "The window mask for new queries",
    "write window_mask(num_queries, num_keys, window_size): the bool mask (num_queries, num_keys), True = hide, "
    "for the last num_queries tokens of a sequence of num_keys tokens (the new tokens, after a cache) meeting "
    "all num_keys keys, with a sliding window: a query at position p sees the keys j with p - window_size < j <= p. "
    "Build it from positions, without the course's decode_mask or sliding_window_mask.",
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
        Mistake(_one_too_few, "each query sees only window_size - 1 keys: you also hid j = p - window_size + 1. "
                              "The window holds the query itself and the window_size - 1 keys before it."),
        Mistake(_hides_itself, "your mask hides each query from its own key (j = p): a query always sees itself; "
                               "only the keys after it (j > p) are the future."),
        Mistake(_one_future_key, "each query also sees the key just after it (j = p + 1): hide the keys after "
                                 "the query, j > p, as the causal mask does."),
        Mistake(_keep_convention, "your mask is True where a key is seen: the task asks for True = hide (the "
                                  "course's convention). PyTorch's F.scaled_dot_product_attention takes the "
                                  "opposite; here, invert it."),
        Mistake(_window_only, "your mask lets every query see the keys after it: a window does not replace the "
                              "causal mask, it adds to it."),
    ],
    rules=[forbids("helpers.gqa.decode_mask", "helpers.generation.decode_mask", "helpers.decode_mask",
                   "helpers.masks.sliding_window_mask", "helpers.sliding_window_mask",
                   why="The task asks you to build the mask from positions yourself.")],
)


# --- 2. spot the bug: RoPE after a cache --------------------------------------------------------------------------
def _rope_cases(g: torch.Generator) -> list[Case]:

    def case(description, batch, num_cached, num_new, head_dim, scale=1.0):
        queries = scale * torch.randn(batch, num_new, head_dim, generator=g)
        keys = scale * torch.randn(batch, num_new, head_dim, generator=g)
        values = torch.randn(batch, num_new, head_dim, generator=g)
        cached_keys = apply_rope(scale * torch.randn(batch, num_cached, head_dim, generator=g))  # rotated at 0..
        cached_values = torch.randn(batch, num_cached, head_dim, generator=g)
        return Case(description, (queries, keys, values, cached_keys, cached_values))
    return [case("1 new token after 5 cached ones", 1, 5, 1, 8),
            case("3 new tokens after 4 cached ones, batch of 2", 2, 4, 3, 8),
            case("1 new token after 11 cached ones, large scores (inputs times 8)", 1, 11, 1, 16, scale=8.0),
            case("2 new tokens after 1 cached one, head width 4", 1, 1, 2, 4),
            case("4 new tokens after 7 cached ones, sharply peaked (inputs times 20)", 2, 7, 4, 8, scale=20.0)]


def _reference_rope_step(queries, keys, values, cached_keys, cached_values):
    num_cached, num_new = cached_keys.shape[1], queries.shape[1]
    positions = torch.arange(num_cached, num_cached + num_new)
    all_keys = torch.cat([cached_keys, apply_rope(keys, positions)], dim=1)
    all_values = torch.cat([cached_values, values], dim=1)
    mask = decode_mask(num_new, num_cached + num_new, device=queries.device)
    context_vecs, _ = scaled_dot_product_attention(apply_rope(queries, positions), all_keys, all_values, mask=mask)
    return context_vecs


def buggy_rope_step(queries, keys, values, cached_keys, cached_values):
    # queries, keys, values (B, T_q, D): the new tokens, not rotated yet
    # cached_keys (B, num_cached, D): rotated when they were cached; cached_values (B, num_cached, D)
    queries, keys = apply_rope(queries), apply_rope(keys)                  # R_i q_i, R_i k_i
    keys = torch.cat([cached_keys, keys], dim=1)                           # (B, num_cached + T_q, D)
    values = torch.cat([cached_values, values], dim=1)
    mask = decode_mask(queries.shape[1], keys.shape[1])                    # (T_q, T_k): bottom-right
    context_vecs, _ = scaled_dot_product_attention(queries, keys, values, mask=mask)
    return context_vecs                                                    # (B, T_q, D)


def _solution_rope_step(queries, keys, values, cached_keys, cached_values):
    num_cached = cached_keys.shape[1]
    positions = torch.arange(num_cached, num_cached + queries.shape[1])   # the new tokens come after the cache
    queries, keys = apply_rope(queries, positions), apply_rope(keys, positions)
    keys = torch.cat([cached_keys, keys], dim=1)                           # (B, num_cached + T_q, D)
    values = torch.cat([cached_values, values], dim=1)
    mask = decode_mask(queries.shape[1], keys.shape[1])                    # (T_q, T_k): bottom-right
    context_vecs, _ = scaled_dot_product_attention(queries, keys, values, mask=mask)
    return context_vecs                                                    # (B, T_q, D)


def _rotated_twice(queries, keys, values, cached_keys, cached_values):
    num_cached, num_new = cached_keys.shape[1], queries.shape[1]
    all_keys = apply_rope(torch.cat([cached_keys, keys], dim=1))          # the cached keys turned a second time
    all_values = torch.cat([cached_values, values], dim=1)
    positions = torch.arange(num_cached, num_cached + num_new)
    return _attend(apply_rope(queries, positions), all_keys, all_values)


def _keys_only(queries, keys, values, cached_keys, cached_values):
    num_cached, num_new = cached_keys.shape[1], queries.shape[1]
    positions = torch.arange(num_cached, num_cached + num_new)
    all_keys = torch.cat([cached_keys, apply_rope(keys, positions)], dim=1)
    return _attend(queries, all_keys, torch.cat([cached_values, values], dim=1))


def _rope_top_left(queries, keys, values, cached_keys, cached_values):
    num_cached, num_new = cached_keys.shape[1], queries.shape[1]
    positions = torch.arange(num_cached, num_cached + num_new)
    all_keys = torch.cat([cached_keys, apply_rope(keys, positions)], dim=1)
    all_values = torch.cat([cached_values, values], dim=1)
    return _attend(apply_rope(queries, positions), all_keys, all_values, bottom_right=False)


def _torch_sdpa_with_hide_mask(queries, keys, values, cached_keys, cached_values):
    num_cached, num_new = cached_keys.shape[1], queries.shape[1]
    positions = torch.arange(num_cached, num_cached + num_new)
    all_keys = torch.cat([cached_keys, apply_rope(keys, positions)], dim=1)
    all_values = torch.cat([cached_values, values], dim=1)
    mask = decode_mask(num_new, num_cached + num_new)                      # True = hide, given as True = take part
    return torch.nn.functional.scaled_dot_product_attention(apply_rope(queries, positions), all_keys, all_values,
                                                            attn_mask=mask)


def _attend(queries, keys, values, bottom_right=True):
    num_new, num_keys = queries.shape[1], keys.shape[1]
    offset = num_keys - num_new if bottom_right else 0
    hide = torch.ones(num_new, num_keys, dtype=torch.bool).triu(offset + 1)
    scores = (queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5).masked_fill(hide, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values


rope_cache = SpotTheBug(
    "Spot the bug: RoPE after a cache",
    "rope_step(queries, keys, values, cached_keys, cached_values) should return the context vectors of one causal "
    "attention head with RoPE for T_q new tokens that follow num_cached cached ones. Inputs: queries, keys, values "
    "(B, T_q, D) of the new tokens, not rotated yet; cached_keys (B, num_cached, D), rotated when they were cached, "
    "and cached_values (B, num_cached, D). Output: the new tokens' context vectors (B, T_q, D). Tools: "
    "apply_rope(x, positions=None), decode_mask "
    "(True = hide), the course's scaled_dot_product_attention (True = hide; "
    "PyTorch's F.scaled_dot_product_attention takes the opposite) or your own softmax. The buggy code runs, but "
    "its answer is wrong: run it on a few tokens with 0 cached, then with some of them cached, compare, and fix it.",
    reference=_reference_rope_step,
    cases=_rope_cases,
    hint=["Take 1 new token after 5 cached ones. At which position does it stand, and at which position does "
          "apply_rope(queries) put it?",
          "RoPE scores depend on the offset between a query's position and a key's position (notebook 09). Which "
          "offsets come out right in the buggy code, and which wrong?"],
    solution=_solution_rope_step,
    buggy=buggy_rope_step,
    bug_message="apply_rope(x) without positions turns the new tokens as if they stood at positions 0, 1, ...: "
                "the scores between new tokens keep their right offsets (both sides moved alike), but every "
                "score against a cached key sees the wrong offset. The new tokens stand at positions num_cached, "
                "num_cached + 1, ...: pass those positions to apply_rope, for the queries and the keys.",
    mistakes=[
        Mistake(_rotated_twice, "the cached keys were rotated when they were cached, and your code turns them "
                                "again: key j ends up at angle 2 j omega_r. Rotate only the new keys, at their "
                                "positions, and append them to the cache as they are."),
        Mistake(_keys_only, "the queries are not rotated: a score compares R_p q with R_j k, so the query must be "
                            "turned by its own position too, or the score depends on the key's absolute position."),
        Mistake(_rope_top_left, "your mask is aligned top-left, as is_causal=True aligns it: new query i then sees keys "
                           "0..i only. The new queries are the last tokens: query i sits at position "
                           "num_cached + i and sees every key up to it (section 2, bottom-right)."),
        Mistake(_torch_sdpa_with_hide_mask, "the positions are right, but decode_mask (True = hide) went into "
                                            "F.scaled_dot_product_attention, whose boolean attn_mask means True = "
                                            "take part: each query then reads only the keys it must not see. Pass "
                                            "~mask to F's version, or use the course's scaled_dot_product_attention."),
    ],
)
