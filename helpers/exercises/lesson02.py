"""Exercises for notebook 02: softmax and context vectors."""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention, softmax_stable
from ._inputs import journey_inputs, randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids

__all__ = ["stable_softmax", "scaled_attention", "weights_at_temperature"]


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
    "without overflowing for large scores and without calling any built-in softmax (torch.softmax and its "
    "relatives, helpers.softmax_stable).",
    reference=softmax_stable,
    cases=_softmax_cases,
    hint=["Which number in a row makes exp overflow? What happens to a row's softmax if you subtract the same "
          "number from every entry of that row?",
          "Each row needs its own number, and it must broadcast back against the row: look at keepdim."],
    solution=_solution_stable_softmax,
    rules=[forbids("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax", "torch.special.softmax",
                   "helpers.softmax_stable", "helpers.attention.softmax_stable",
                   why="Write the exponentials and the sum yourself.")],
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


# --- 2. scaled dot-product attention: queries and keys of different lengths, any batch in front ---------------
def _attention_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("3 queries, 5 keys and values, d_k=4, d_v=2", (randn(g, 3, 4), randn(g, 5, 4), randn(g, 5, 2))),
        Case("6 queries, 6 keys, d_k=16, d_v=4 (scaling matters)", (randn(g, 6, 16), randn(g, 6, 16), randn(g, 6, 4))),
        Case("a batch of 2, each with 4 queries and 3 keys, d_k=8, d_v=5",
             (randn(g, 2, 4, 8), randn(g, 2, 3, 8), randn(g, 2, 3, 5))),
        Case("two batch dimensions (2, 3), 1 query and 7 keys, d_k=6, d_v=3",
             (randn(g, 2, 3, 1, 6), randn(g, 2, 3, 7, 6), randn(g, 2, 3, 7, 3))),
    ]


def _solution_scaled_attention(queries, keys, values):
    d_k = keys.shape[-1]
    attn_scores = queries @ keys.transpose(-2, -1)        # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
    attn_weights = torch.softmax(attn_scores / math.sqrt(d_k), dim=-1)  # (..., T_q, T_k), rows sum to 1
    context_vecs = attn_weights @ values                  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return context_vecs, attn_weights


def _softmax_attention(queries, keys, values, scale):
    attn_weights = torch.softmax(queries @ keys.transpose(-2, -1) * scale, dim=-1)
    return attn_weights @ values, attn_weights


def _scores_as_weights(queries, keys, values):
    attn_scores = queries @ keys.transpose(-2, -1) / math.sqrt(keys.shape[-1])
    return torch.softmax(attn_scores, dim=-1) @ values, attn_scores


def _weights_over_queries(queries, keys, values):
    attn_weights = torch.softmax(queries @ keys.transpose(-2, -1) / math.sqrt(keys.shape[-1]), dim=-2)
    return attn_weights @ values, attn_weights


scaled_attention = FunctionExercise(
    "Scaled dot-product attention",
    "write scaled_attention(queries, keys, values) for queries (..., T_q, d_k), keys (..., T_k, d_k) and values "
    "(..., T_k, d_v), with any batch dimensions in front, returning the pair (context_vecs, attn_weights): "
    "Z = softmax(Q Kᵀ / sqrt(d_k)) V and the weights A it used, without calling a library's attention function.",
    reference=lambda q, k, v: scaled_dot_product_attention(q, k, v),
    cases=_attention_cases,
    hint=["Write the shape of every step, with the batch dimensions as `...`. Which dimension of the keys is "
          "d_k, and which two dimensions must a transpose swap so that it still works with a batch in front?",
          "The scale is a number computed from the width of the keys: not from the number of queries or keys, "
          "and not from the width of the values.",
          "Before you run it, say which shape each of the two results must have, for 4 queries and 3 keys: one "
          "of them has a row per query and a column per key."],
    solution=_solution_scaled_attention,
    rules=[forbids("torch.nn.functional.scaled_dot_product_attention", "helpers.scaled_dot_product_attention",
                   "helpers.attention.scaled_dot_product_attention",
                   why="Write the scores, the softmax and the weighted sum yourself.")],
    mistakes=[
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1.0),
                "you did not scale the scores. Divide them by sqrt(d_k) before the softmax, or large d_k makes "
                "the softmax nearly one-hot."),
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1 / k.shape[-1]),
                "you divided by d_k instead of its square root."),
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1 / math.sqrt(k.shape[-2])),
                "you scaled by the square root of the number of keys. The scale is sqrt(d_k), the width of "
                "the keys (keys.shape[-1])."),
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1 / math.sqrt(q.shape[-2])),
                "you scaled by the square root of the number of queries. The scale is sqrt(d_k), the width of "
                "the keys (keys.shape[-1])."),
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1 / math.sqrt(v.shape[-1])),
                "you scaled by the width of the values, d_v. The scores are dot products of queries and keys: "
                "their spread grows with d_k, the width of the keys."),
        Mistake(_weights_over_queries,
                "your softmax normalises over the queries (dim=-2). Each query's weights over the keys must sum "
                "to 1: softmax over the last dimension."),
        Mistake(_scores_as_weights,
                "the context vectors are right, but the second result is the scaled scores, not the weights: "
                "return what the softmax made of them (each row sums to 1)."),
        Mistake(lambda q, k, v: _solution_scaled_attention(q, k, v)[0],
                "you returned only the context vectors. Return the pair (context_vecs, attn_weights): the "
                "weights are what a picture of attention shows."),
        Mistake(lambda q, k, v: tuple(reversed(_solution_scaled_attention(q, k, v))),
                "you returned the weights first. Return (context_vecs, attn_weights), in that order, as "
                "helpers.scaled_dot_product_attention does."),
    ],
)


# --- 3. spot the bug: a temperature applied to the weights ---------------------------------------------------
def _temperature_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("the journey scores of 'journey' at temperature 0.5",
             (torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]), 0.5)),
        Case("a (3, 5) matrix of random scores at temperature 0.1", (randn(g, 3, 5), 0.1)),
        Case("a (2, 3, 4) batch of random scores at temperature 4", (randn(g, 2, 3, 4, scale=2.0), 4.0)),
        Case("large scores [1000, 1001, 1002] at temperature 0.5", (torch.tensor([1000.0, 1001.0, 1002.0]), 0.5)),
    ]


def buggy_weights_at_temperature(attn_scores, temperature):
    attn_weights = torch.softmax(attn_scores, dim=-1)              # (..., num_keys), each row sums to 1
    attn_weights = attn_weights / temperature                      # apply the temperature tau
    return attn_weights / attn_weights.sum(dim=-1, keepdim=True)   # make each row sum to 1 again


def _solution_weights_at_temperature(attn_scores, temperature):
    return torch.softmax(attn_scores / temperature, dim=-1)       # tau acts on the scores, before the exponential


def _exp_without_shift(s, t):
    exps = torch.exp(s / t)
    return exps / exps.sum(dim=-1, keepdim=True)


weights_at_temperature = SpotTheBug(
    "Spot the bug: weights at a temperature",
    "weights_at_temperature(attn_scores, temperature) should turn scores into weights over the last dimension "
    "(any shape, large scores included) at a temperature, as section 4 describes: a small temperature sharpens "
    "each row, a large one flattens it. The code below runs and each row of its answer sums to 1, yet the answer "
    "is wrong. Why?",
    reference=lambda s, t: softmax_stable(s / t),
    cases=_temperature_cases,
    hint=["Follow the temperature through the three lines. What becomes of a number that multiplies every "
          "weight of a row, once the row is divided by its own sum?",
          "Softmax turns the differences between scores into the differences between weights. Where must a "
          "temperature act so that it can widen or narrow those differences?"],
    solution=_solution_weights_at_temperature,
    buggy=buggy_weights_at_temperature,
    bug_message="your weights do not depend on the temperature at all: dividing every weight of a row by the "
                "same number, then by the row's sum, cancels it. The temperature must act on the scores, before "
                "the exponential, so that it changes the gaps between them.",
    mistakes=[
        Mistake(lambda s, t: torch.softmax(s * t, dim=-1),
                "you multiplied the scores by the temperature. A small temperature must sharpen the weights: "
                "divide the scores by it."),
        Mistake(lambda s, t: torch.softmax(s, dim=-1) / t,
                "your rows sum to 1 / temperature, not to 1, and dividing weights by a number cannot make them "
                "sharper or flatter: the temperature must act on the scores, before the softmax."),
        Mistake(_exp_without_shift,
                "you exponentiate scores / temperature without subtracting the row's maximum: a small "
                "temperature makes the scores larger still, and exp overflows to inf (then inf / inf = nan)."),
        Mistake(lambda s, t: torch.softmax(s / t, dim=0),
                "your softmax normalises over the first dimension. Each row (the last dimension) must sum to 1."),
    ],
)
