"""Exercises for notebook 04: causal attention.

1. ``causal_mask``: build the mask from token positions (no ``triu``/``tril``, no loop): think in indices.
2. ``causal_attention``: write batched causal attention end to end (no fused function, no loop).
3. ``zero_fill`` (spot the bug): the future is "hidden" with a score of 0, not ``-inf``.
"""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask as _causal_mask
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids, no_loops

__all__ = ["causal_mask", "causal_attention", "zero_fill"]


# --- 1. the mask from positions ------------------------------------------------------------------------
def _size_cases(g: torch.Generator) -> list[Case]:
    return [Case(f"num_tokens={n}", (n,)) for n in (4, 1, 6)]


def _solution_causal_mask(num_tokens):
    positions = torch.arange(num_tokens)              # (T,): 0, 1, ..., T-1
    return positions[None, :] > positions[:, None]    # (1, T) > (T, 1) -> (T, T): key j comes after query i


def _hides_the_past(num_tokens):
    positions = torch.arange(num_tokens)
    return positions[:, None] > positions[None, :]


def _hides_itself_too(num_tokens):
    positions = torch.arange(num_tokens)
    return positions[None, :] >= positions[:, None]


def _marks_what_is_seen(num_tokens):
    positions = torch.arange(num_tokens)
    return positions[None, :] <= positions[:, None]


causal_mask = FunctionExercise(
    "Causal mask from positions",
    "write causal_mask(num_tokens) returning a bool tensor (num_tokens, num_tokens) that is True where query i "
    "must not see key j, built from the token positions: without torch.triu or torch.tril and without a "
    "Python loop.",
    reference=_causal_mask,
    cases=_size_cases,
    hint=["Row i is a query, column j a key, both numbered from 0. Say in words when key j is in the future of "
          "query i, then write that as a comparison of two numbers.",
          "torch.arange numbers the positions. A column of positions compared with a row of positions "
          "broadcasts to one answer per (query, key) pair: which one is the row, which one the column?"],
    solution=_solution_causal_mask,
    mistakes=[
        Mistake(_hides_the_past,
                "your mask hides the keys BEFORE each query (the past) and shows the future: the comparison "
                "is the right one, but rows and columns are swapped. Rows are queries, columns are keys."),
        Mistake(_hides_itself_too,
                "your mask also hides the diagonal, so a token cannot attend to itself, and query 0 sees "
                "nothing at all (a row of -inf becomes nan after the softmax). Hide only the keys strictly "
                "after the query."),
        Mistake(_marks_what_is_seen,
                "your mask is True for the keys a query may SEE. In this course True means hide: you need the "
                "opposite."),
    ],
    rules=[no_loops(),
           forbids("torch.triu", "torch.tril", "torch.Tensor.triu", "torch.Tensor.tril", "helpers.causal_mask",
                   "helpers.masks.causal_mask",
                   why="This exercise is about building it from the positions."),
           ],
)


# --- 2. causal attention for a batch, written out ---------------------------------------------------------
def _qkv_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("batch 2, 5 tokens, d_k 4, d_v 3", (randn(g, 2, 5, 4), randn(g, 2, 5, 4), randn(g, 2, 5, 3))),
        Case("batch 3, 6 tokens, d_k 2, d_v 5 (large scores)",
             (randn(g, 3, 6, 2, scale=3.0), randn(g, 3, 6, 2, scale=3.0), randn(g, 3, 6, 5))),
        Case("batch 1, a single token", (randn(g, 1, 1, 4), randn(g, 1, 1, 4), randn(g, 1, 1, 3))),
    ]


def _reference_causal_attention(queries, keys, values):
    return scaled_dot_product_attention(queries, keys, values, mask=_causal_mask(queries.shape[-2]))


def _solution_causal_attention(queries, keys, values):
    num_tokens, d_k = queries.shape[1], keys.shape[-1]
    attn_scores = queries @ keys.transpose(1, 2) / d_k ** 0.5     # (B, T, d_k) @ (B, d_k, T) -> (B, T, T)
    future = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(diagonal=1)   # (T, T), True = hide
    attn_weights = torch.softmax(attn_scores.masked_fill(future, float("-inf")), dim=-1)  # (B, T, T)
    context_vecs = attn_weights @ values                          # (B, T, T) @ (B, T, d_v) -> (B, T, d_v)
    return context_vecs, attn_weights


def _attend(attn_scores, values, fill=float("-inf"), after=False, dim=-1):
    """Helper for the known mistakes: mask (before or after the softmax), softmax, weighted sum."""
    future = _causal_mask(attn_scores.shape[-1])
    if after:
        weights = torch.softmax(attn_scores, dim=dim).masked_fill(future, 0.0)
    else:
        weights = torch.softmax(attn_scores.masked_fill(future, fill), dim=dim)
    return weights @ values, weights


causal_attention = FunctionExercise(
    "Causal attention for a batch",
    "write causal_attention(queries, keys, values) for queries and keys (batch_size, num_tokens, d_k) and "
    "values (batch_size, num_tokens, d_v): scale the scores by sqrt(d_k), hide the future, softmax over the "
    "keys, and return (context_vecs, attn_weights). Any num_tokens; no Python loop, and no "
    "scaled_dot_product_attention (neither PyTorch's nor the course's).",
    reference=_reference_causal_attention,
    cases=_qkv_cases,
    hint=["Follow the 'mask, then softmax' picture from left to right; the values come last.",
          "With a batch axis in front, transpose only the last two axes of the keys. The mask needs the number "
          "of tokens: which axis of the queries holds it?"],
    solution=_solution_causal_attention,
    mistakes=[
        Mistake(lambda q, k, v: _attend(q @ k.transpose(1, 2), v),
                "the scores are not divided by sqrt(d_k): the weights come out too peaked."),
        Mistake(lambda q, k, v: _attend(q @ k.transpose(1, 2) / math.sqrt(v.shape[-1]), v),
                "you divided by sqrt(d_v), the width of the values. The scale belongs to the dot product of a "
                "query and a key: sqrt(d_k)."),
        Mistake(lambda q, k, v: _attend(q @ k.transpose(1, 2) / math.sqrt(k.shape[-1]), v, fill=0.0),
                "you filled the future scores with 0. exp(0) = 1, so the future still gets weight: a hidden "
                "score must become a weight of exactly 0 after the softmax."),
        Mistake(lambda q, k, v: _attend(q @ k.transpose(1, 2) / math.sqrt(k.shape[-1]), v, after=True),
                "you zeroed the weights after the softmax without renormalising: the rows no longer sum to 1. "
                "Mask the scores before the softmax."),
        Mistake(lambda q, k, v: (lambda w: (w @ v, w))(torch.softmax(q @ k.transpose(1, 2)
                                                                      / math.sqrt(k.shape[-1]), dim=-1)),
                "nothing is masked: every query still sees the future. (Did you keep the result of "
                "masked_fill?)"),
        Mistake(lambda q, k, v: _attend(q @ k.transpose(1, 2) / math.sqrt(k.shape[-1]), v, dim=1),
                "your softmax runs over the queries (dim=1 of (B, T, T)): each row, one query's weights over "
                "the keys, must sum to 1. Use the last axis."),
    ],
    rules=[no_loops(),
           forbids("torch.nn.functional.scaled_dot_product_attention",
                   "helpers.attention.scaled_dot_product_attention", "helpers.scaled_dot_product_attention",
                   why="Write the steps out yourself."),
           ],
)


# --- 3. spot the bug: hiding with a zero -------------------------------------------------------------------
def _score_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("scores of 6 tokens", (randn(g, 6, 6),)),
        Case("a batch of 2 sequences of 4 tokens", (randn(g, 2, 4, 4, scale=2.0),)),
        Case("a single token", (randn(g, 1, 1),)),
    ]


def _reference_causal_weights(attn_scores):
    hidden = _causal_mask(attn_scores.shape[-1])
    return torch.softmax(attn_scores.masked_fill(hidden, float("-inf")), dim=-1)


def buggy_causal_weights(attn_scores):
    num_tokens = attn_scores.shape[-1]
    future = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    attn_scores = attn_scores.masked_fill(future, 0.0)   # hide the future
    return torch.softmax(attn_scores, dim=-1)


def _solution_causal_weights(attn_scores):
    num_tokens = attn_scores.shape[-1]
    future = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    attn_scores = attn_scores.masked_fill(future, float("-inf"))   # exp(-inf) = 0: no weight on the future
    return torch.softmax(attn_scores, dim=-1)


zero_fill = SpotTheBug(
    "Spot the bug: hidden, yet weighted",
    "causal_weights(attn_scores) should return causal attention weights for scores (..., num_tokens, "
    "num_tokens). It runs, every row sums to 1, and yet the keys in each query's future still get weight. "
    "Find the bug and write the fixed function.",
    reference=_reference_causal_weights,
    cases=_score_cases,
    hint=["Take query 0 of a 3-token sentence with scores [1, 2, 3]. Work out its weights by hand, as this "
          "code computes them.",
          "What does the softmax turn the value written into the hidden cells into, and what should a hidden "
          "key receive?"],
    solution=_solution_causal_weights,
    buggy=buggy_causal_weights,
    bug_message="the hidden scores are set to 0, and the softmax turns a score of 0 into exp(0) = 1 before "
                "normalising: the future keys still get weight. A hidden score must give exactly 0 after the "
                "softmax.",
    mistakes=[
        Mistake(lambda s: torch.softmax(s, dim=-1).masked_fill(_causal_mask(s.shape[-1]), 0.0),
                "now the future weights are 0, but the rows no longer sum to 1: zeroing after the softmax "
                "needs a renormalisation. Mask the scores before the softmax instead."),
        Mistake(lambda s: torch.softmax(s, dim=-1),
                "nothing is masked any more: every query sees the future."),
    ],
)
