"""Exercises for notebook 02: softmax and context vectors."""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention, softmax_stable
from ._inputs import journey_inputs, randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids

__all__ = ["stable_softmax", "temperature_limits", "scaled_attention", "context_from_scores"]


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
    hint=["Which number in a row makes exp overflow? What happens to a row's softmax if you subtract the same "
          "number from every entry of that row?",
          "Each row needs its own number, and it must broadcast back against the row: look at keepdim."],
    solution=_solution_stable_softmax,
    rules=[forbids("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax", "torch.special.softmax",
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


# --- 2. predict the weights at the two extremes of the temperature ------------------------------------
def _limit_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("the journey scores of 'journey'", (torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]),)),
        Case("scores with a tie for the largest, [2, 5, 1, 5]", (torch.tensor([2.0, 5.0, 1.0, 5.0]),)),
        Case("a (3, 5) matrix of random scores (one row per query)", (randn(g, 3, 5, scale=2.0),)),
        Case("one score", (torch.tensor([0.3]),)),
    ]


def _reference_limits(attn_scores):
    is_max = attn_scores == attn_scores.amax(dim=-1, keepdim=True)
    cold = is_max.float() / is_max.sum(dim=-1, keepdim=True)           # tau -> 0: the largest scores share it all
    hot = torch.full_like(attn_scores, 1.0 / attn_scores.shape[-1])     # tau -> infinity: uniform
    return cold, hot


def _solution_temperature_limits(attn_scores):
    num_keys = attn_scores.shape[-1]
    winners = (attn_scores == attn_scores.max(dim=-1, keepdim=True).values).float()
    very_cold = winners / winners.sum(dim=-1, keepdim=True)   # ties share the weight equally
    very_hot = torch.ones_like(attn_scores) / num_keys         # every key gets the same weight
    return very_cold, very_hot


def _one_hot_first(s):
    first = torch.nn.functional.one_hot(s.argmax(dim=-1), s.shape[-1]).float()
    return first, torch.full_like(s, 1.0 / s.shape[-1])


temperature_limits = FunctionExercise(
    "Predict the weights at the extremes of the temperature",
    "write temperature_limits(attn_scores) returning two tensors of the shape of `attn_scores`: the weights "
    "softmax(attn_scores / tau) tends to as tau -> 0, and as tau -> infinity (over the last dimension). "
    "Predict them from the scores; do not call softmax.",
    reference=_reference_limits,
    cases=_limit_cases,
    hint=["Dividing by a tiny tau multiplies every gap between two scores by a huge number; dividing by a huge "
          "tau shrinks every gap towards 0. What does softmax do with huge gaps, and with no gaps at all?",
          "In the cold limit, only the keys with the largest score keep any weight. What if two keys tie?"],
    solution=_solution_temperature_limits,
    rules=[forbids("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax", "torch.special.softmax",
                   why="Predict the limits from the scores themselves.")],
    mistakes=[
        Mistake(lambda s: _reference_limits(s)[::-1],
                "you swapped the two limits. A small tau divides the scores by a small number: the gaps grow and "
                "the weights sharpen. A large tau flattens them."),
        Mistake(_one_hot_first,
                "when two keys tie for the largest score, your cold limit gives all the weight to the first of "
                "them. The softmax of two equal scores is equal, at every temperature."),
        Mistake(lambda s: (_reference_limits(s)[0], torch.zeros_like(s)),
                "your hot limit is all zeros, but weights always sum to 1: as every score counts the same, each "
                "key gets 1 / (number of keys)."),
        Mistake(lambda s: (_reference_limits(s)[0], torch.full_like(s, 1.0 / s.numel())),
                "your hot limit divides by the number of all scores in the tensor. Each row (one query) sums to "
                "1 on its own: divide by the number of keys, the last dimension."),
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
    hint=["Write the shape of every step, with the batch dimensions as `...`. Which dimension of the keys is "
          "d_k, and which two dimensions must a transpose swap so that it still works with a batch in front?",
          "The scale is a number computed from the width of the keys, not from the number of tokens."],
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
    hint="Two (T, T) matrices exist in this function. Which one has rows that sum to 1?",
    solution=_solution_all_context_vectors,
    buggy=buggy_all_context_vectors,
    bug_message="the last line still multiplies the raw scores with the inputs: the scores are not normalised, "
                "so the result is not a weighted average. Use attn_weights there.",
)
