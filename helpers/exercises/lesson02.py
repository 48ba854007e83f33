"""Exercises for notebook 02: softmax and context vectors."""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention, softmax_stable
from ._inputs import journey_inputs, randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["stable_softmax", "context_vector", "scaled_attention", "context_from_scores"]


# --- 1. a softmax that never overflows --------------------------------------------------------------
def _softmax_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("the journey scores of 'journey'", (torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]),)),
        Case("large scores [1000, 1001, 1002]", (torch.tensor([1000.0, 1001.0, 1002.0]),)),
        Case("a (2, 3) batch whose rows have very different sizes",
             (torch.tensor([[1000.0, 1001.0, 1002.0], [0.0, 1.0, 2.0]]),)),
        Case("a (2, 4, 5) tensor of random scores (softmax over the last dimension)", (randn(g, 2, 4, 5, scale=3.0),)),
        Case("a row with a hidden entry (-inf)", (torch.tensor([1.0, float("-inf"), 2.0]),)),
    ]


def _solution_stable_softmax(scores):
    shifted = scores - scores.max(dim=-1, keepdim=True).values  # the largest entry becomes 0: exp cannot overflow
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=-1, keepdim=True)


stable_softmax = FunctionExercise(
    "Stable softmax",
    "write stable_softmax(scores) that normalises the last dimension of `scores` (any shape) with softmax, "
    "without overflowing for large scores and without calling torch.softmax.",
    reference=softmax_stable,
    cases=_softmax_cases,
    hint="softmax does not change if you subtract the same number from a row: subtract each row's maximum "
         "(max(dim=-1, keepdim=True)) before exp.",
    solution=_solution_stable_softmax,
    mistakes=[
        Mistake(lambda s: torch.exp(s) / torch.exp(s).sum(dim=-1, keepdim=True),
                "you exponentiate the raw scores: exp(1000) overflows to inf and inf / inf is nan. Subtract each "
                "row's maximum first."),
        Mistake(lambda s: torch.exp(s - s.max()) / torch.exp(s - s.max()).sum(dim=-1, keepdim=True),
                "you subtracted one maximum for the whole tensor. A row whose scores are far below it underflows "
                "to exp(...) = 0 everywhere and gives 0/0 = nan. Subtract each row's own maximum "
                "(keepdim=True)."),
        Mistake(lambda s: s / s.sum(dim=-1, keepdim=True),
                "you divided the scores by their sum without exp. That breaks with negative or cancelling "
                "scores; softmax exponentiates first."),
        Mistake(lambda s: torch.exp(s - s.max(dim=0, keepdim=True).values)
                / torch.exp(s - s.max(dim=0, keepdim=True).values).sum(dim=0, keepdim=True),
                "you normalised over the first dimension. Each row (the last dimension) must sum to 1."),
    ],
)


# --- 2. the context vector of one query -------------------------------------------------------------
def _context_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("the journey sentence, query index 1", (journey_inputs(), 1)),
        Case("5 random tokens of dimension 4, query index 0", (randn(g, 5, 4), 0)),
        Case("5 random tokens of dimension 4, the last token as query", (randn(g, 5, 4), 4)),
    ]


def _solution_context_vector(inputs, query_index):
    attn_scores = inputs @ inputs[query_index]           # (T, d_in) @ (d_in,) -> (T,)
    attn_weights = torch.softmax(attn_scores, dim=-1)    # (T,), sums to 1
    return attn_weights @ inputs                          # (T,) @ (T, d_in) -> (d_in,)


def _reference_context(inputs, query_index):
    weights = softmax_stable(inputs @ inputs[query_index])
    return weights @ inputs


context_vector = FunctionExercise(
    "Context vector of one query",
    "write context_vector(inputs, query_index): scores of token `query_index` against every token (dot "
    "products), softmax weights, and the weighted sum of the input vectors, shape (d_in,).",
    reference=_reference_context,
    cases=_context_cases,
    hint="three lines: scores = inputs @ query, weights = softmax(scores), context = weights @ inputs.",
    solution=_solution_context_vector,
    mistakes=[
        Mistake(lambda x, i: (x @ x[i]) @ x,
                "you summed the inputs with the raw scores as weights. Turn the scores into weights with softmax "
                "first, so they are positive and sum to 1."),
        Mistake(lambda x, i: torch.softmax(x @ x[i], dim=-1),
                "you returned the attention weights (one per token). The context vector is the weighted sum of "
                "the input vectors: weights @ inputs."),
        Mistake(lambda x, i: torch.softmax(x @ x[i], dim=-1) @ x / x.shape[0],
                "you divided the weighted sum by the number of tokens. The softmax weights already sum to 1."),
    ],
)


# --- 3. scaled dot-product attention -----------------------------------------------------------------
def _attention_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("4 queries, 6 keys and values, d_k=3, d_v=2", (randn(g, 4, 3), randn(g, 6, 3), randn(g, 6, 2))),
        Case("5 tokens with d_k=16 (scaling matters)", (randn(g, 5, 16), randn(g, 5, 16), randn(g, 5, 4))),
        Case("a batch of 2 with 3 tokens, d_k=8", (randn(g, 2, 3, 8), randn(g, 2, 3, 8), randn(g, 2, 3, 5))),
    ]


def _solution_scaled_attention(queries, keys, values):
    d_k = keys.shape[-1]
    attn_scores = queries @ keys.transpose(-2, -1)                 # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
    attn_weights = torch.softmax(attn_scores / math.sqrt(d_k), dim=-1)
    return attn_weights @ values                                  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)


def _softmax_attention(queries, keys, values, scale):
    return torch.softmax(queries @ keys.transpose(-2, -1) * scale, dim=-1) @ values


scaled_attention = FunctionExercise(
    "Scaled dot-product attention",
    "write scaled_attention(queries, keys, values) = softmax(Q Kᵀ / sqrt(d_k)) V for inputs of shape "
    "(..., num_tokens, dim), returning the context vectors.",
    reference=lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],
    cases=_attention_cases,
    hint="d_k is keys.shape[-1]; transpose the last two dimensions of keys with keys.transpose(-2, -1) so it "
         "also works with a batch dimension.",
    solution=_solution_scaled_attention,
    mistakes=[
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1.0),
                "you did not scale the scores. Divide them by sqrt(d_k) before the softmax, or large d_k makes "
                "the softmax nearly one-hot."),
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1 / k.shape[-1]),
                "you divided by d_k instead of its square root."),
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1 / math.sqrt(k.shape[-2])),
                "you scaled by the square root of the number of tokens. The scale is sqrt(d_k), the width of "
                "the keys (keys.shape[-1])."),
        Mistake(lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1]), dim=-2) @ v,
                "your softmax normalises over the queries (dim=-2). Each query's weights over the keys must sum "
                "to 1: softmax over the last dimension."),
    ],
)


# --- 4. spot the bug: multiplying by the wrong matrix --------------------------------------------------
def _all_context_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("the journey sentence", (journey_inputs(),)),
        Case("4 random tokens of dimension 5", (randn(g, 4, 5),)),
    ]


def buggy_all_context_vectors(inputs):
    attn_scores = inputs @ inputs.T                      # (T, T)
    attn_weights = torch.softmax(attn_scores, dim=-1)    # (T, T), rows sum to 1
    return attn_scores @ inputs                          # (T, T) @ (T, d_in) -> (T, d_in)


def _solution_all_context_vectors(inputs):
    attn_scores = inputs @ inputs.T
    attn_weights = torch.softmax(attn_scores, dim=-1)
    return attn_weights @ inputs                         # the weights, not the scores, mix the tokens


context_from_scores = SpotTheBug(
    "Spot the bug: all context vectors",
    "all_context_vectors(inputs) should return softmax(X Xᵀ) X, one context vector per token. The code "
    "below has the right shapes and no error, but multiplies by the wrong matrix.",
    reference=lambda x: softmax_stable(x @ x.T) @ x,
    cases=_all_context_cases,
    hint="look at which of the two (T, T) matrices the last line uses.",
    solution=_solution_all_context_vectors,
    buggy=buggy_all_context_vectors,
    bug_message="the last line still multiplies the raw scores with the inputs: the scores are not normalised, "
                "so the result is not a weighted average. Use attn_weights there.",
)
