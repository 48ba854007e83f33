"""Exercises for notebook 02: softmax and context vectors."""

from __future__ import annotations

import importlib
import math
import re

import torch

from ..attention import scaled_dot_product_attention, softmax_stable
from ._inputs import journey_inputs, randn
from .core import Case, FunctionExercise, Mistake, Rule, SpotTheBug, forbids

__all__ = ["stable_softmax", "attention_any_shape"]


# --- 1. a softmax that never overflows --------------------------------------------------------------
def _softmax_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("the journey scores of 'journey'", (torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]),)),
        Case("large scores [1000, 1001, 1002]", (torch.tensor([1000.0, 1001.0, 1002.0]),)),
        Case("a (2, 3) batch whose rows have very different sizes",
             (torch.tensor([[1000.0, 1001.0, 1002.0], [0.0, 1.0, 2.0]]),)),
        Case("a (2, 4, 5) tensor of random scores (softmax over the last dimension)", (randn(g, 2, 4, 5, scale=3.0),)),
        Case("very negative scores [-1000, -1001, -1002]", (torch.tensor([-1000.0, -1001.0, -1002.0]),)),
        Case("two scores far apart [0, 120]", (torch.tensor([0.0, 120.0]),)),
        Case("sharply peaked rows [[0, -1000, -1000], [3, 1, 200]]",
             (torch.tensor([[0.0, -1000.0, -1000.0], [3.0, 1.0, 200.0]]),)),
        Case("a row with a hidden entry (-inf)", (torch.tensor([1.0, float("-inf"), 2.0]),)),
        Case("a (3, 3) matrix whose middle row is all -inf (every key hidden: its weights must all be 0)",
             (torch.tensor([[1.0, float("-inf"), 2.0], [float("-inf")] * 3, [0.0, 0.0, 0.0]]),)),
    ]


def _reference_softmax(scores):
    """The course's stable softmax, with weight 0 for every key of a row whose scores are all -inf.

    torch.softmax gives nan there (0/0); PyTorch's fused attention gives such a row zeros, as does its
    ``torch._safe_softmax`` (tests/test_exercises_lesson02.py compares the two)."""
    hidden = torch.isneginf(scores).all(dim=-1, keepdim=True)         # (..., 1): a row with nothing to attend to
    weights = softmax_stable(scores.masked_fill(hidden, 0.0))          # such a row is given any finite scores ...
    return weights.masked_fill(hidden, 0.0)                            # ... and then weight 0 everywhere


# Every built-in of the softmax family: the softmax, its log and its mirror image (softmin), and the log-sum-exp
# that is a softmax's normaliser with the shift already built in. Found by name, so a new relative is covered too.
_SOFTMAX_FAMILY = re.compile(r"soft(max|min)|logsumexp")


def _softmax_family() -> tuple[str, ...]:
    names = []
    for owner in ("torch", "torch.nn.functional", "torch.special", "torch.Tensor", "torch.sparse"):
        holder = torch.Tensor if owner == "torch.Tensor" else importlib.import_module(owner)
        for attribute in sorted(dir(holder)):
            if (_SOFTMAX_FAMILY.search(attribute) and not any(w in attribute for w in ("backward", "_get_"))
                    and callable(getattr(holder, attribute))):
                names.append(f"{owner}.{attribute}")
    return (*names, "helpers.softmax_stable", "helpers.attention.softmax_stable", "helpers.attention.softmax_naive")


class _NoBuiltinSoftmax(Rule):
    """No call of any function of the softmax family (torch.softmax, log_softmax, softmin, logsumexp, ...)."""

    def __init__(self):
        self.watch = _softmax_family()

    def after(self, calls: list[str]) -> str | None:
        used = [name for name in calls if name in self.watch]
        if used:
            return (f"the task asks for no built-in softmax (no softmax, log_softmax, softmin or logsumexp, from "
                    f"torch or helpers), and your function calls `{used[0]}`. Write the shift, the exponentials "
                    f"and the sum yourself.")
        return None

    def __repr__(self) -> str:
        return "no_builtin_softmax()"


_SHIFT_TOO_SMALL = ("you subtracted a number smaller than the row's maximum (its minimum, or its first entry): an "
                    "entry more than about 88 above that number still overflows to inf. Subtract the row's maximum.")


def _shifted_by(shift):
    def softmax(scores):
        exps = torch.exp(scores - shift(scores))
        return exps / exps.sum(dim=-1, keepdim=True)
    return softmax


def _shift_without_guard(scores):
    shifted = scores - scores.max(dim=-1, keepdim=True).values
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=-1, keepdim=True)


def _solution_stable_softmax(scores):
    row_max = scores.max(dim=-1, keepdim=True).values           # (..., 1): each row's largest score
    row_max = torch.where(row_max == float("-inf"), 0.0, row_max)  # a row of -inf: -inf - (-inf) would be nan
    exps = torch.exp(scores - row_max)                          # the largest entry becomes 0: exp cannot overflow
    sums = exps.sum(dim=-1, keepdim=True)                       # at least 1, or 0 for a row with every key hidden
    return exps / torch.where(sums == 0, 1.0, sums)             # 0 / 1 = 0 there, instead of 0 / 0


stable_softmax = FunctionExercise(
    "Stable softmax",
    "write stable_softmax(scores) that normalises the last dimension of `scores` (any shape) with softmax, "
    "right for large, very negative and sharply peaked rows and a row with a -inf entry, and giving weight 0 to "
    "every key of a row whose scores are all -inf (torch.softmax gives nan there), without calling any built-in "
    "softmax (softmax, log_softmax, softmin or logsumexp, from torch or helpers).",
    reference=_reference_softmax,
    cases=_softmax_cases,
    hint=["Which number in a row makes exp overflow? What happens to a row's softmax if you subtract the same "
          "number from every entry of that row?",
          "Each row needs its own number, and it must broadcast back against the row: look at keepdim.",
          "With a dim argument, .max returns two tensors, the largest values and where they are: keep the first.",
          "A row of -inf: what is its maximum, and what is -inf minus that? Which number could you subtract "
          "instead, and what does the sum of its exponentials become? torch.where picks, entry by entry, "
          "between two tensors."],
    solution=_solution_stable_softmax,
    rules=[_NoBuiltinSoftmax()],
    mistakes=[
        Mistake(_shift_without_guard,
                "right on every row that has a visible key, but the row whose scores are all -inf gives nan: its "
                "maximum is -inf, and -inf - (-inf) is nan. Such a row has nothing to attend to: give every key "
                "weight 0 (subtract a finite number there, and do not divide 0 by 0)."),
        # Shifting by another number than the maximum also cancels, but only the maximum keeps every exponent
        # <= 0 and the largest one at exactly 0 (no overflow, no 0/0). These come first: on a peaked row their
        # nan looks like the unshifted one's.
        Mistake(_shifted_by(lambda s: s.mean(dim=-1, keepdim=True)),
                "you subtracted each row's mean. That cancels too, but an entry far above the mean still overflows "
                "(a sharply peaked row), and a row with -inf has mean -inf. Only the maximum makes every exponent "
                "<= 0 with the largest exactly 0."),
        Mistake(_shifted_by(lambda s: s.min(dim=-1, keepdim=True).values), _SHIFT_TOO_SMALL),
        Mistake(_shifted_by(lambda s: s[..., :1]), _SHIFT_TOO_SMALL),
        Mistake(lambda s: torch.exp(s) / torch.exp(s).sum(dim=-1, keepdim=True),
                "you exponentiate the raw scores: exp(1000) overflows to inf and inf / inf is nan, and exp(-1000) "
                "underflows to 0 and 0 / 0 is nan. Subtract each row's maximum first."),
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


# --- 2. spot the bug: queries and keys swapped, invisible while Q = K ------------------------------------------
def _attention_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("6 queries and 6 keys, queries different from keys, d_k=16, d_v=4",
             (randn(g, 6, 16), randn(g, 6, 16), randn(g, 6, 4))),
        Case("3 queries, 5 keys and values, d_k=4, d_v=2", (randn(g, 3, 4), randn(g, 5, 4), randn(g, 5, 2))),
        Case("a batch of 2, each with 4 queries and 3 keys, d_k=8, d_v=5",
             (randn(g, 2, 4, 8), randn(g, 2, 3, 8), randn(g, 2, 3, 5))),
        Case("two batch dimensions (2, 3), 1 query and 7 keys, d_k=6, d_v=3",
             (randn(g, 2, 3, 1, 6), randn(g, 2, 3, 7, 6), randn(g, 2, 3, 7, 3))),
        Case("1 query and 4 keys whose scaled scores reach ±1050 (d_k=4, d_v=3)",
             (torch.tensor([[30.0, 0.0, 0.0, 0.0]]), torch.tensor([[70.0, 0.0, 0.0, 0.0], [67.0, 0.0, 0.0, 0.0],
                                                                 [-70.0, 0.0, 0.0, 0.0], [0.0, 9.0, 0.0, 0.0]]),
              randn(g, 4, 3))),
    ]


def buggy_attention(queries, keys, values):
    # queries (..., T_q, d_k), keys (..., T_k, d_k), values (..., T_k, d_v)
    d_k = queries.shape[-1]
    scaled_scores = keys @ queries.transpose(-2, -1) / math.sqrt(d_k)
    attn_weights = torch.softmax(scaled_scores, dim=-1)               # each row sums to 1
    return attn_weights @ values, attn_weights


def _solution_attention(queries, keys, values):
    d_k = queries.shape[-1]
    # One row per query, one column per key: (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
    scaled_scores = queries @ keys.transpose(-2, -1) / math.sqrt(d_k)
    attn_weights = torch.softmax(scaled_scores, dim=-1)               # over the keys: each query's row sums to 1
    return attn_weights @ values, attn_weights                        # (..., T_q, T_k) @ (..., T_k, d_v)


_COUNT_NOT_WIDTH = ("you scaled by the square root of a number of tokens (queries or keys). The scale is sqrt(d_k), "
                    "the width of the queries and keys.")


def _softmax_attention(queries, keys, values, scale):
    attn_weights = torch.softmax(queries @ keys.transpose(-2, -1) * scale, dim=-1)
    return attn_weights @ values, attn_weights


def _weights_over_queries(queries, keys, values):
    attn_weights = torch.softmax(queries @ keys.transpose(-2, -1) / math.sqrt(keys.shape[-1]), dim=-2)
    return attn_weights @ values, attn_weights


def _turned_for_the_product(queries, keys, values):  # the shape clash of T_q != T_k mended, the bug kept
    attn_weights = torch.softmax(keys @ queries.transpose(-2, -1) / math.sqrt(queries.shape[-1]), dim=-1)
    return attn_weights.transpose(-2, -1) @ values, attn_weights


def _mixes_the_keys(queries, keys, values):
    attn_weights = torch.softmax(queries @ keys.transpose(-2, -1) / math.sqrt(keys.shape[-1]), dim=-1)
    return attn_weights @ keys, attn_weights


attention_any_shape = SpotTheBug(
    "Spot the bug: attention for any shapes",
    "attention(queries, keys, values) should return (context_vecs, attn_weights) for queries (..., T_q, d_k), "
    "keys (..., T_k, d_k) and values (..., T_k, d_v), any batch dimensions in front: Z = softmax(Q Kᵀ / "
    "sqrt(d_k)) V and the weights A, one row per query, without calling a library's attention function. The "
    "code below runs and its rows sum to 1, yet it is wrong. Find inputs of your own on which it runs and still "
    "gives wrong weights, then fix it.",
    reference=lambda q, k, v: scaled_dot_product_attention(q, k, v),
    cases=_attention_cases,
    hint=["In sections 1 to 3 the queries and the keys were the same vectors. What does that make of the score "
          "matrix, and so of any mistake that turns it round?",
          "Make up 2 queries and 2 keys, all different, with d_v = 1: the code runs. Work out the score of query 0 "
          "for key 1 by hand and find where it lands in the code's scores. Which axis of the weights must belong "
          "to the queries? (With 2 queries and 3 keys the code stops at a shape clash instead.)",
          "The scale is sqrt(d_k), the width of the keys: not the number of queries or keys, and not d_v."],
    solution=_solution_attention,
    buggy=buggy_attention,
    bug_message="your score matrix is K Qᵀ: one row per key, one column per query. It equals Q Kᵀ only when the "
                "queries are the keys (as in sections 1 to 3); otherwise each row's softmax weighs queries, not "
                "keys (and with T_q != T_k the shapes clash). Each query needs its own row of scores over the keys.",
    rules=[forbids("torch.nn.functional.scaled_dot_product_attention", "helpers.scaled_dot_product_attention",
                   "helpers.attention.scaled_dot_product_attention",
                   why="Write the scores, the softmax and the weighted sum yourself.")],
    mistakes=[
        Mistake(_turned_for_the_product,
                "turning the weights round before the product makes the shapes fit, but they are still K Qᵀ's "
                "weights: one row per key, each a softmax over the queries. With as many queries as keys the code "
                "runs and is still wrong. Each query needs its own row of scores over the keys."),
        Mistake(_weights_over_queries,  # also K Qᵀ, softmax over its last axis, then turned round
                "your weights have one row per query, but each column sums to 1, not each row: the softmax ran "
                "over the queries (over dim=-2 of Q Kᵀ, or over the last axis of K Qᵀ before turning it round). "
                "Each query's weights over the keys must sum to 1."),
        Mistake(_mixes_the_keys,
                "the weights are right, but you mixed the keys instead of the values: a key is matched, the value "
                "is handed over (section 3)."),
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1.0),
                "you did not scale the scores. Divide them by sqrt(d_k) before the softmax."),
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1 / k.shape[-1]),
                "you divided by d_k instead of its square root."),
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1 / math.sqrt(k.shape[-2])),
_COUNT_NOT_WIDTH),
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1 / math.sqrt(q.shape[-2])),
_COUNT_NOT_WIDTH),
        Mistake(lambda q, k, v: _softmax_attention(q, k, v, 1 / math.sqrt(v.shape[-1])),
                "you scaled by the width of the values, d_v. The scores are dot products of queries and keys: "
                "their spread grows with d_k."),
        Mistake(lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],
                "you returned only the context vectors. Return the pair (context_vecs, attn_weights)."),
        Mistake(lambda q, k, v: tuple(reversed(scaled_dot_product_attention(q, k, v))),
                "you returned the weights first. Return (context_vecs, attn_weights), in that order."),
    ],
)
