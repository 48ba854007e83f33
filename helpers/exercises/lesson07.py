"""Exercises for notebook 07: efficient attention (the online softmax behind flash attention)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["online_update", "one_query_tiled", "sdpa_mask", "value_width_scale"]


# --- 1. fold one tile of scores into the running max and sum ------------------------------------------
def _update_cases(g: torch.Generator) -> list[Case]:
    first = (torch.full((3,), float("-inf")), torch.zeros(3), randn(g, 3, 4))
    return [
        Case("the first tile (running max -inf, running sum 0), 3 rows x 4 keys", first),
        Case("a tile whose scores beat the running max", (torch.tensor([0.5, 1.0]), torch.tensor([2.0, 1.5]),
                                                          torch.tensor([[3.0, 0.0], [4.0, -1.0]]))),
        Case("a tile below the running max", (torch.tensor([5.0, 6.0]), torch.tensor([1.2, 2.0]),
                                              randn(g, 2, 3))),
        Case("a batch of 2 x 4 rows, tile of 8 keys", (randn(g, 2, 4), torch.rand(2, 4, generator=g) + 1.0,
                                                       randn(g, 2, 4, 8, scale=2.0))),
    ]


def _reference_update(running_max, running_sum, scores):
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    rebased = running_sum * torch.exp(running_max - new_max)
    return new_max, rebased + torch.exp(scores - new_max.unsqueeze(-1)).sum(dim=-1)


def _solution_online_update(running_max, running_sum, scores):
    new_max = torch.maximum(running_max, scores.max(dim=-1).values)        # (...,)
    correction = torch.exp(running_max - new_max)                            # old terms were exp(s - old max)
    new_sum = running_sum * correction + torch.exp(scores - new_max[..., None]).sum(dim=-1)
    return new_max, new_sum


online_update = FunctionExercise(
    "Online softmax update",
    "write online_update(running_max, running_sum, scores): fold a tile of `scores` (..., tile) into each row's "
    "running maximum m and running sum s = Σ exp(score - m) of the keys seen so far; return (new_max, new_sum).",
    reference=_reference_update,
    cases=_update_cases,
    hint="the new max is the larger of the old max and the tile's max; the old sum was measured against the old "
         "max, so multiply it by exp(old_max - new_max) before adding the tile's terms.",
    solution=_solution_online_update,
    mistakes=[
        Mistake(lambda m, s, x: (torch.maximum(m, x.amax(-1)),
                                 s + torch.exp(x - torch.maximum(m, x.amax(-1))[..., None]).sum(-1)),
                "the new max is right, but the old running sum was not rescaled. Its terms were measured against "
                "the old max: multiply it by exp(old_max - new_max) first."),
        Mistake(lambda m, s, x: (torch.maximum(m, x.amax(-1)), s * torch.exp(m - torch.maximum(m, x.amax(-1)))
                                 + torch.exp(x - m[..., None]).sum(-1)),
                "the tile's terms use the OLD max. Everything in the sum must be relative to the new max."),
        Mistake(lambda m, s, x: (x.amax(-1), s * torch.exp(m - x.amax(-1)) + torch.exp(x - x.amax(-1)[..., None]).sum(-1)),
                "your new max is the tile's max only; it must be the larger of the running max and the tile's max."),
    ],
)


# --- 2. one query, tile by tile --------------------------------------------------------------------------
def _one_query_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("10 keys, d_k=4, d_v=3, tiles of 4 (the last tile is short)", (randn(g, 4), randn(g, 10, 4),
                                                                            randn(g, 10, 3), 4)),
        Case("8 keys with large scores, tiles of 2", (randn(g, 6, scale=4.0), randn(g, 8, 6, scale=4.0),
                                                      randn(g, 8, 2), 2)),
        Case("5 keys, one tile holding them all", (randn(g, 3), randn(g, 5, 3), randn(g, 5, 5), 8)),
    ]


def _solution_one_query_tiled(query, keys, values, tile_size):
    scale = 1 / math.sqrt(keys.shape[-1])
    running_max = torch.tensor(float("-inf"))
    running_sum = torch.tensor(0.0)
    accumulator = torch.zeros(values.shape[-1])
    for start in range(0, keys.shape[0], tile_size):
        scores = keys[start:start + tile_size] @ query * scale     # (tile,)
        new_max = torch.maximum(running_max, scores.max())
        correction = torch.exp(running_max - new_max)               # rebase what was summed so far
        weights = torch.exp(scores - new_max)                       # (tile,), unnormalised
        running_sum = running_sum * correction + weights.sum()
        accumulator = accumulator * correction + weights @ values[start:start + tile_size]
        running_max = new_max
    return accumulator / running_sum                                # (d_v,)


def _per_tile_softmax_mean(query, keys, values, tile_size):
    scale = 1 / math.sqrt(keys.shape[-1])
    parts = [torch.softmax(keys[s:s + tile_size] @ query * scale, dim=-1) @ values[s:s + tile_size]
             for s in range(0, keys.shape[0], tile_size)]
    return torch.stack(parts).mean(dim=0)


one_query_tiled = FunctionExercise(
    "One query, tile by tile",
    "write one_query_tiled(query, keys, values, tile_size): the context vector softmax(q Kᵀ / sqrt(d_k)) V of one "
    "query (d_k,), visiting the keys (T, d_k) and values (T, d_v) tile_size rows at a time with a running max, "
    "running sum and running weighted sum; never build all T weights at once.",
    reference=lambda q, k, v, tile: scaled_dot_product_attention(q[None], k, v)[0][0],
    cases=_one_query_cases,
    hint="keep three running quantities; whenever the max grows, multiply BOTH the running sum and the running "
         "weighted sum by exp(old_max - new_max). Divide once, at the end.",
    solution=_solution_one_query_tiled,
    mistakes=[
        Mistake(_per_tile_softmax_mean,
                "you took a softmax inside every tile and averaged the tiles. Tiles are not equally important: "
                "a tile's share depends on its scores relative to ALL keys. Carry a running max and sum instead."),
    ],
    atol=1e-5,
)


# --- 3. spot the bug: PyTorch's mask convention -------------------------------------------------------------
def _qkv_cases(g: torch.Generator) -> list[Case]:
    return [Case("batch 2, 2 heads, 5 tokens, head_dim 4", (randn(g, 2, 2, 5, 4), randn(g, 2, 2, 5, 4),
                                                             randn(g, 2, 2, 5, 4))),
            Case("batch 1, 1 head, 3 tokens, head_dim 8", (randn(g, 1, 1, 3, 8), randn(g, 1, 1, 3, 8),
                                                            randn(g, 1, 1, 3, 8)))]


def _reference_causal(queries, keys, values):
    return scaled_dot_product_attention(queries, keys, values, mask=causal_mask(queries.shape[-2]))[0]


def buggy_causal_sdpa(queries, keys, values):
    num_tokens = queries.shape[-2]
    mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)  # True = the future
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)


def _solution_causal_sdpa(queries, keys, values):
    return F.scaled_dot_product_attention(queries, keys, values, is_causal=True)  # or attn_mask=~mask


sdpa_mask = SpotTheBug(
    "Spot the bug: a mask for PyTorch",
    "causal_sdpa(queries, keys, values) should run causal attention with PyTorch's fused "
    "F.scaled_dot_product_attention, on (batch, heads, num_tokens, head_dim) tensors. It returns nan and "
    "numbers from the future.",
    reference=_reference_causal,
    cases=_qkv_cases,
    hint="read the docs of attn_mask: for a bool mask, what does True mean to PyTorch, and what does it mean "
         "in helpers.causal_mask?",
    solution=_solution_causal_sdpa,
    buggy=buggy_causal_sdpa,
    bug_message="PyTorch's bool attn_mask means True = TAKE PART in attention, the opposite of this course's "
                "causal_mask (True = hide). This mask lets each query see only the future (and the last one "
                "nothing: nan). Pass is_causal=True, or the inverted mask ~mask.",
)


# --- 4. spot the bug: scaling by the wrong width ------------------------------------------------------------
def _wide_value_cases(g: torch.Generator) -> list[Case]:
    return [Case("9 keys, d_k=4, d_v=4, tiles of 3", (randn(g, 4), randn(g, 9, 4), randn(g, 9, 4), 3)),
            Case("9 keys, d_k=4, d_v=16, tiles of 3", (randn(g, 4), randn(g, 9, 4), randn(g, 9, 16), 3))]


def buggy_one_query_tiled(query, keys, values, tile_size):
    scale = 1 / math.sqrt(values.shape[-1])
    running_max, running_sum = torch.tensor(float("-inf")), torch.tensor(0.0)
    accumulator = torch.zeros(values.shape[-1])
    for start in range(0, keys.shape[0], tile_size):
        scores = keys[start:start + tile_size] @ query * scale
        new_max = torch.maximum(running_max, scores.max())
        correction = torch.exp(running_max - new_max)
        weights = torch.exp(scores - new_max)
        running_sum = running_sum * correction + weights.sum()
        accumulator = accumulator * correction + weights @ values[start:start + tile_size]
        running_max = new_max
    return accumulator / running_sum


value_width_scale = SpotTheBug(
    "Spot the bug: the scale of the scores",
    "this tiled attention for one query agrees with the formula when keys and values are equally wide, and not "
    "otherwise. Fix it.",
    reference=lambda q, k, v, tile: scaled_dot_product_attention(q[None], k, v)[0][0],
    cases=_wide_value_cases,
    hint="which tensor's width is d_k in softmax(q Kᵀ / sqrt(d_k))?",
    solution=_solution_one_query_tiled,
    buggy=buggy_one_query_tiled,
    bug_message="the scores are scaled by 1/sqrt(d_v), the width of the VALUES. The dot products run over the "
                "keys' features: scale by 1/sqrt(keys.shape[-1]).",
)
