"""Exercises for notebook 07: efficient attention (the online softmax behind flash attention, and SDPA's masks)."""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids, requires

__all__ = ["merge_states", "padded_causal_sdpa", "one_query_tiled_bug"]

_NEG_INF = float("-inf")


# --- 1. merge two partial online-softmax states ------------------------------------------------------------
def _state(scores: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(running_max, running_sum, accumulator) of rows ``scores`` (..., n) over ``values`` (n, d_v), in one go."""
    running_max = scores.amax(dim=-1)
    exp_scores = torch.exp(scores - running_max.unsqueeze(-1))
    return running_max, exp_scores.sum(dim=-1), exp_scores @ values


def _empty(rows: tuple[int, ...], d_v: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.full(rows, _NEG_INF), torch.zeros(rows), torch.zeros(*rows, d_v)


def _merge_cases(g: torch.Generator) -> list[Case]:
    def two_parts(rows, keys_a, keys_b, d_v, shift_a=0.0, shift_b=0.0):
        values_a, values_b = randn(g, keys_a, d_v), randn(g, keys_b, d_v)
        part_a = _state(randn(g, *rows, keys_a, scale=2.0) + shift_a, values_a)
        part_b = _state(randn(g, *rows, keys_b, scale=2.0) + shift_b, values_b)
        return (*part_a, *part_b)

    mixed = two_parts((4,), 3, 3, 2)
    return [
        Case("3 rows, d_v = 4, part b holds the larger maxima", two_parts((3,), 5, 4, 4, shift_b=3.0)),
        Case("3 rows, d_v = 4, part a holds the larger maxima", two_parts((3,), 4, 6, 4, shift_a=3.0)),
        Case("4 rows, d_v = 2, the larger maximum sometimes in a, sometimes in b", mixed),
        Case("2 rows, part b has seen no keys yet: (-inf, 0, 0)",
             (*_state(randn(g, 2, 3), randn(g, 3, 3)), *_empty((2,), 3))),
        Case("2 rows, part a has seen no keys yet: (-inf, 0, 0)",
             (*_empty((2,), 3), *_state(randn(g, 2, 3), randn(g, 3, 3)))),
        Case("2 rows, neither part has seen a key (every key hidden so far)", (*_empty((2,), 3), *_empty((2,), 3))),
        Case("a batch of 2 x 3 rows, d_v = 5", two_parts((2, 3), 4, 7, 5, shift_a=1.0)),
    ]


def _reference_merge(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max = torch.maximum(max_a, max_b)
    # Where both parts are empty the new max is -inf too: rescale against 0 there, so exp(-inf - 0) = 0, not nan.
    finite_max = torch.where(torch.isneginf(new_max), torch.zeros_like(new_max), new_max)
    scale_a, scale_b = torch.exp(max_a - finite_max), torch.exp(max_b - finite_max)
    return (new_max, sum_a * scale_a + sum_b * scale_b,
            acc_a * scale_a.unsqueeze(-1) + acc_b * scale_b.unsqueeze(-1))


def _solution_merge_states(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max = torch.maximum(max_a, max_b)                       # (...,)
    safe_max = new_max.masked_fill(new_max == float("-inf"), 0.0)  # both parts empty: avoid -inf - (-inf)
    correction_a = torch.exp(max_a - safe_max)                 # bring part a onto the common maximum
    correction_b = torch.exp(max_b - safe_max)
    new_sum = sum_a * correction_a + sum_b * correction_b
    new_acc = acc_a * correction_a[..., None] + acc_b * correction_b[..., None]   # (..., d_v)
    return new_max, new_sum, new_acc


def _merge_without_guard(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max = torch.maximum(max_a, max_b)
    ca, cb = torch.exp(max_a - new_max), torch.exp(max_b - new_max)
    return new_max, sum_a * ca + sum_b * cb, acc_a * ca[..., None] + acc_b * cb[..., None]


def _merge_upside_down(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max = torch.maximum(max_a, max_b)
    ca, cb = torch.exp(new_max - max_a), torch.exp(new_max - max_b)
    return new_max, sum_a * ca + sum_b * cb, acc_a * ca[..., None] + acc_b * cb[..., None]


def _merge_sums_only(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max, new_sum, _ = _reference_merge(max_a, sum_a, acc_a, max_b, sum_b, acc_b)
    return new_max, new_sum, acc_a + acc_b


merge_states = FunctionExercise(
    "Merge two partial states",
    "write merge_states(max_a, sum_a, acc_a, max_b, sum_b, acc_b): two online softmaxes ran over two different "
    "blocks of keys for the same query rows; part a ended with running max m (`max_a`, shape (...)), running sum ℓ "
    "(`sum_a`, shape (...)) and accumulator acc (`acc_a`, shape (..., d_v)), part b likewise. Return the state "
    "(new_max, new_sum, new_acc) after all the keys of both parts. A part that has seen no keys is (-inf, 0, 0): "
    "merging it must give the other part back, and two empty parts give (-inf, 0, 0), never nan.",
    reference=_reference_merge,
    cases=_merge_cases,
    hint=["Each part's sum and accumulator are measured against its own maximum. Which maximum should the merged "
          "state use, and what must happen to each part before the two can be added?",
          "Try your function on two empty parts and look for exp(-inf - (-inf))."],
    solution=_solution_merge_states,
    mistakes=[
        Mistake(lambda ma, la, aa, mb, lb, ab: (torch.maximum(ma, mb), la + lb, aa + ab),
                "you added the two parts as they were. Part a's terms are exp(s - m_a), part b's exp(s - m_b): "
                "they can only be added once both are measured against the same maximum."),
        Mistake(_merge_sums_only,
                "the maximum and the running sum are right, but the accumulators were added as they were. They were "
                "summed against each part's own maximum, exactly like the sums."),
        Mistake(_merge_without_guard,
                "right whenever one part has seen a key, but two empty parts give nan: their maxima are both -inf, "
                "and exp(-inf - (-inf)) is nan. An empty merged state must stay (-inf, 0, 0)."),
        Mistake(_merge_upside_down,
                "your correction factors are upside down: they grow the part with the smaller maximum. A term "
                "exp(s - m_a) becomes exp(s - m) by multiplying it with exp(m_a - m), which is at most 1."),
    ],
)


# --- 2. SDPA with a causal and a padding mask -----------------------------------------------------------------
def _padded_cases(g: torch.Generator) -> list[Case]:
    def qkv(batch, heads, tokens, d_k, d_v):
        return randn(g, batch, heads, tokens, d_k), randn(g, batch, heads, tokens, d_k), randn(g, batch, heads,
                                                                                                tokens, d_v)
    return [
        Case("2 sequences of T = 5 (lengths 5 and 3), 1 head", (*qkv(2, 1, 5, 4, 4), torch.tensor([5, 3]))),
        Case("3 sequences of T = 6 (lengths 6, 1 and 4), 2 heads, d_v = 3",
             (*qkv(3, 2, 6, 4, 3), torch.tensor([6, 1, 4]))),
        Case("1 sequence of T = 4 without padding, 4 heads", (*qkv(1, 4, 4, 8, 8), torch.tensor([4]))),
        Case("2 sequences of T = 7 (lengths 2 and 7), 3 heads", (*qkv(2, 3, 7, 4, 4), torch.tensor([2, 7]))),
    ]


def _hide(num_tokens: int, lengths: torch.Tensor) -> torch.Tensor:
    """The course's mask M (True = hide), (B, 1, T, T): future keys and padding keys."""
    positions = torch.arange(num_tokens)
    future = positions[None, :] > positions[:, None]                      # (T, T)
    padding = positions[None, None, :] >= lengths[:, None, None]          # (B, 1, T): key j is padding
    return (future[None] | padding)[:, None]                              # (B, 1, T, T)


def _reference_padded(queries, keys, values, lengths):
    return scaled_dot_product_attention(queries, keys, values, mask=_hide(queries.shape[-2], lengths))[0]


def _solution_padded_causal_sdpa(queries, keys, values, lengths):
    num_tokens = queries.shape[-2]
    positions = torch.arange(num_tokens)
    past = positions[None, :] <= positions[:, None]                       # (T, T): key j at or before query i
    real = positions[None, :] < lengths[:, None]                          # (B, T): key j is a real token
    take_part = past[None] & real[:, None, :]                             # (B, T, T)
    return torch.nn.functional.scaled_dot_product_attention(
        queries, keys, values, attn_mask=take_part[:, None])              # (B, 1, T, T) broadcasts over heads


def _sdpa_with(mask_fn):
    def wrong(queries, keys, values, lengths):
        return torch.nn.functional.scaled_dot_product_attention(queries, keys, values,
                                                                attn_mask=mask_fn(queries.shape[-2], lengths))
    return wrong


padded_causal_sdpa = FunctionExercise(
    "Causal attention on a padded batch with SDPA",
    "write padded_causal_sdpa(queries, keys, values, lengths): queries and keys (B, H, T, d_k), values "
    "(B, H, T, d_v); sequence b of the batch holds lengths[b] real tokens followed by padding. Return the context "
    "vectors (B, H, T, d_v) in which every query attends only to keys that are at or before its own position AND "
    "are real tokens. Use torch.nn.functional.scaled_dot_product_attention, with one attn_mask that says both: "
    "PyTorch's documentation says that setting attn_mask and is_causal=True together is an error (some paths accept "
    "the pair anyway; do not rely on that).",
    reference=_reference_padded,
    cases=_padded_cases,
    hint=["Write down the (T, T) table of which key each query may use for a sequence of length 3 in T = 5. "
          "Which of SDPA's two ways of masking can say that?",
          "Build it from two simpler tables (position vs position, position vs length) and check its shape against "
          "the scores (B, H, T, T): which dimension can stay 1?"],
    solution=_solution_padded_causal_sdpa,
    rules=[requires("torch.nn.functional.scaled_dot_product_attention",
                    why="The exercise is about SDPA's own masks.")],
    mistakes=[
        Mistake(lambda q, k, v, n: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                "the future is hidden, but the padding keys still take part: a query of a short sequence attends to "
                "padding."),
        Mistake(_sdpa_with(lambda t, n: ~_hide(t, n) | torch.ones(t, t, dtype=torch.bool).triu(1)),
                "the padding keys are hidden, but every query sees the future: the mask must also hide later keys."),
        Mistake(_sdpa_with(_hide),
                "your mask says True where a key must be HIDDEN, this course's convention. In SDPA's attn_mask, "
                "True means 'takes part'."),
        Mistake(_sdpa_with(lambda t, n: (torch.ones(t, t, dtype=torch.bool).tril()[None]
                                         & (torch.arange(t)[:, None] < n[:, None, None]))[:, None]),
                "your mask hides the padding QUERIES (rows), not the padding KEYS (columns): a padding token must "
                "not be attended to, whoever asks."),
    ],
)


# --- 3. spot the bug: one query, tile by tile ---------------------------------------------------------------
def _scores_rising(g: torch.Generator, num_keys: int, d_k: int, d_v: int, tile_size: int):
    """One query, keys and values whose row maximum grows from tile to tile (every tile raises the running max)."""
    query, keys, values = randn(g, d_k), randn(g, num_keys, d_k), randn(g, num_keys, d_v)
    direction = query / query.norm()
    ramp = torch.arange(num_keys, dtype=torch.float32) // tile_size           # 0, 0, 1, 1, 2, 2, ...
    return query, keys + (ramp * 1.5)[:, None] * direction, values, tile_size


def _one_query_cases(g: torch.Generator) -> list[Case]:
    query, keys, values = randn(g, 4), randn(g, 6, 4), randn(g, 6, 3)
    keys[0] = 4.0 * query / query.norm()                          # the largest score sits in the first tile
    return [Case("6 keys, d_k = 4, d_v = 3, tiles of 2, the largest score in the first tile",
                 (query, keys, values, 2)),
            Case("9 keys, d_k = 4, d_v = 4, tiles of 3, the maximum growing from tile to tile",
                 _scores_rising(g, 9, 4, 4, 3)),
            Case("10 keys, d_k = 4, d_v = 16, tiles of 4", (randn(g, 4), randn(g, 10, 4), randn(g, 10, 16), 4)),
            Case("7 keys, d_k = 9, d_v = 2, tiles of 2", (randn(g, 9), randn(g, 7, 9), randn(g, 7, 2), 2)),
            Case("5 keys, d_k = 4, d_v = 4, one tile of 8 (all keys at once)",
                 (randn(g, 4), randn(g, 5, 4), randn(g, 5, 4), 8))]


def buggy_one_query_tiled(query, keys, values, tile_size):
    scale = 1 / math.sqrt(keys.shape[-1])
    running_max, running_sum = torch.tensor(float("-inf")), torch.tensor(0.0)
    accumulator = torch.zeros(values.shape[-1])
    for start in range(0, keys.shape[0], tile_size):
        scores = keys[start:start + tile_size] @ query * scale
        new_max = torch.maximum(running_max, scores.max())
        running_max = new_max
        correction = torch.exp(running_max - new_max)
        exp_scores = torch.exp(scores - new_max)
        running_sum = running_sum * correction + exp_scores.sum()
        accumulator = accumulator * correction + exp_scores @ values[start:start + tile_size]
    return accumulator / running_sum


def _solution_one_query_tiled(query, keys, values, tile_size):
    scale = 1 / math.sqrt(keys.shape[-1])
    running_max, running_sum = torch.tensor(float("-inf")), torch.tensor(0.0)
    accumulator = torch.zeros(values.shape[-1])
    for start in range(0, keys.shape[0], tile_size):
        scores = keys[start:start + tile_size] @ query * scale     # (tile,)
        new_max = torch.maximum(running_max, scores.max())
        correction = torch.exp(running_max - new_max)               # uses the OLD maximum: 0 on the first tile
        exp_scores = torch.exp(scores - new_max)
        running_sum = running_sum * correction + exp_scores.sum()
        accumulator = accumulator * correction + exp_scores @ values[start:start + tile_size]
        running_max = new_max                                       # only now does the old maximum go
    return accumulator / running_sum                                # (d_v,)


def _one_query_with(rescale_sum: bool, rescale_acc: bool, upside_down: bool = False):
    def tiled(query, keys, values, tile_size):
        running_max, running_sum = torch.tensor(float("-inf")), torch.tensor(0.0)
        accumulator = torch.zeros(values.shape[-1])
        for start in range(0, keys.shape[0], tile_size):
            scores = keys[start:start + tile_size] @ query / math.sqrt(keys.shape[-1])
            new_max = torch.maximum(running_max, scores.max())
            correction = torch.exp(new_max - running_max) if upside_down else torch.exp(running_max - new_max)
            exp_scores = torch.exp(scores - new_max)
            running_sum = running_sum * (correction if rescale_sum else 1.0) + exp_scores.sum()
            new_terms = exp_scores @ values[start:start + tile_size]
            accumulator = accumulator * (correction if rescale_acc else 1.0) + new_terms
            running_max = new_max
        return accumulator / running_sum
    return tiled


one_query_tiled_bug = SpotTheBug(
    "Spot the bug: one query, tile by tile",
    "this online softmax for one query (d_k,) over keys (T, d_k) and values (T, d_v) returns the right context "
    "vector for some inputs and a wrong one for others. Find the bug and write the fixed function, still tile by "
    "tile (torch.softmax and scaled_dot_product_attention are not allowed).",
    reference=lambda q, k, v, tile: scaled_dot_product_attention(q[None], k, v)[0][0],
    cases=_one_query_cases,
    hint=["Find an input on which it is right and one on which it is wrong. Where does the largest score sit in "
          "each?",
          "Print every variable of the loop after each tile and compare with section 2's update rule, term by term."],
    solution=_solution_one_query_tiled,
    buggy=buggy_one_query_tiled,
    bug_message="the correction is always exp(0) = 1: running_max is overwritten with new_max before "
                "exp(running_max - new_max) is computed, so nothing summed before a larger maximum arrives is ever "
                "re-based onto it. Compute the correction from the old maximum, then update running_max.",
    mistakes=[
        Mistake(_one_query_with(rescale_sum=True, rescale_acc=False),
                "the running sum is re-based when the maximum grows, but the accumulator is not: its old terms "
                "are still measured against the old maximum."),
        Mistake(_one_query_with(rescale_sum=False, rescale_acc=True),
                "the accumulator is re-based when the maximum grows, but the running sum is not: its old terms "
                "are still measured against the old maximum."),
        Mistake(_one_query_with(rescale_sum=True, rescale_acc=True, upside_down=True),
                "your correction is upside down: exp(new_max - running_max) is infinite on the first tile and "
                "grows the old terms. A term exp(s - m) becomes exp(s - m') by multiplying it with exp(m - m'), "
                "which is at most 1."),
    ],
    rules=[forbids("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax",
                   "torch.nn.functional.scaled_dot_product_attention",
                   why="The fix keeps the online softmax: one tile at a time, never the whole row of weights.")],
)
