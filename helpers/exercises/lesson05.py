"""Exercises for notebook 05: dropout on attention weights."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..attention import softmax_stable
from ..masks import causal_mask
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["rescale_survivors", "attention_dropout", "softmax_over_queries"]


def _weights(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.softmax(randn(g, *shape, scale=2.0), dim=-1)


# --- 1. keep some weights, rescale them -----------------------------------------------------------------
def _keep_cases(g: torch.Generator) -> list[Case]:
    def case(description, p, *shape):
        weights = _weights(g, *shape)
        keep = torch.rand(weights.shape, generator=g) >= p
        return Case(description, (weights, keep, p))
    return [case("6x6 weights, p=0.5", 0.5, 6, 6), case("a batch of 2 x 4x4 weights, p=0.2", 0.2, 2, 4, 4),
            case("5x5 weights, p=0.0 (nothing dropped)", 0.0, 5, 5)]


def _solution_rescale_survivors(attn_weights, keep, p):
    return attn_weights * keep / (1 - p)  # dropped weights become 0, survivors grow by 1/(1-p)


rescale_survivors = FunctionExercise(
    "Rescale the survivors",
    "write rescale_survivors(attn_weights, keep, p): `keep` is a bool tensor of the same shape (True = this "
    "weight survives). Return the weights after dropout with rate p: dropped weights 0, survivors rescaled.",
    reference=lambda w, keep, p: torch.where(keep, w / (1 - p), torch.zeros_like(w)),
    cases=_keep_cases,
    hint="survivors are multiplied by 1/(1-p), so the expected value of every weight stays the same.",
    solution=_solution_rescale_survivors,
    mistakes=[
        Mistake(lambda w, keep, p: w * keep,
                "you dropped the right weights but did not rescale the survivors: divide them by (1 - p) so each "
                "weight keeps its expected value."),
        Mistake(lambda w, keep, p: w * keep * (1 - p),
                "you multiplied the survivors by (1 - p). It is the other way round: divide by (1 - p)."),
        Mistake(lambda w, keep, p: w * keep / p if p > 0 else w * keep,
                "you divided by p, the rate of DROPPED weights. Survivors are rescaled by 1/(1 - p)."),
        Mistake(lambda w, keep, p: w * ~keep / (1 - p),
                "you kept the weights where `keep` is False. True means the weight survives."),
    ],
)


# --- 2. the whole dropout, with its own random draws ------------------------------------------------------
def _dropout_cases(g: torch.Generator) -> list[Case]:
    return [Case("200x200 weights, p=0.5", (_weights(g, 200, 200), 0.5)),
            Case("a batch of 4 x 50x50 weights, p=0.1", (_weights(g, 4, 50, 50), 0.1)),
            Case("10x10 weights, p=0.0", (_weights(g, 10, 10), 0.0))]


def _solution_attention_dropout(attn_weights, p):
    keep = torch.rand_like(attn_weights) >= p     # each weight survives with probability 1 - p
    return attn_weights * keep / (1 - p)


def _dropout_properties(got: torch.Tensor, case: Case, function) -> str | None:
    weights, p = case.args
    dropped = got == 0
    survivors, originals = got[~dropped].double(), weights[~dropped].double()
    if not torch.allclose(survivors, originals / (1 - p), rtol=1e-4, atol=1e-7):
        ratio = (survivors / originals).median().item() if len(survivors) else float("nan")
        if abs(ratio - 1.0) < 1e-4 and p > 0:
            return "the surviving weights are unchanged. Rescale them by 1/(1 - p)."
        if abs(ratio - (1 - p)) < 1e-4:
            return "the surviving weights were multiplied by (1 - p); divide by (1 - p) instead."
        return (f"a weight that survives dropout must be exactly weight / (1 - p) = weight x {1 / (1 - p):.3f}; "
                f"yours are about weight x {ratio:.3f}.")
    fraction = dropped.double().mean().item()
    if abs(fraction - p) > 0.02:
        if abs(fraction - (1 - p)) <= 0.02:
            return f"you dropped {fraction:.0%} of the weights: p is the rate of DROPPED weights, not kept ones."
        return f"you dropped {fraction:.1%} of the weights; with p={p} it should be close to {p:.0%}."
    if p > 0:
        again = function(*case.fresh_args()[0])
        if isinstance(again, torch.Tensor) and torch.equal(again == 0, dropped):
            return ("two calls dropped exactly the same weights. Draw a fresh random mask on every call "
                    "(e.g. torch.rand_like(attn_weights) >= p).")
    return None


attention_dropout = FunctionExercise(
    "Dropout on attention weights",
    "write attention_dropout(attn_weights, p) that zeroes each weight with probability p (a fresh random draw "
    "every call) and rescales the survivors, like nn.Dropout in training mode. Do not call nn.Dropout or "
    "F.dropout.",
    reference=lambda w, p: F.dropout(w, p, training=True),
    cases=_dropout_cases,
    hint="torch.rand_like(attn_weights) >= p gives a bool 'keep' mask with P(keep) = 1 - p; then exercise 1.",
    solution=_solution_attention_dropout,
    properties=_dropout_properties,
)


# --- 3. spot the bug: softmax over the wrong dimension -------------------------------------------------
def _batched_cases(g: torch.Generator) -> list[Case]:
    return [Case("a batch of 2 sequences of 6 tokens", (randn(g, 2, 6, 6),)),
            Case("a batch of 3 sequences of 4 tokens", (randn(g, 3, 4, 4, scale=2.0),))]


def buggy_batched_weights(attn_scores):
    num_tokens = attn_scores.shape[-1]
    mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    masked = attn_scores.masked_fill(mask, float("-inf"))    # (batch, T, T)
    return torch.softmax(masked, dim=1)


def _solution_batched_weights(attn_scores):
    num_tokens = attn_scores.shape[-1]
    mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    masked = attn_scores.masked_fill(mask, float("-inf"))
    return torch.softmax(masked, dim=-1)                      # over the keys: each query's row sums to 1


softmax_over_queries = SpotTheBug(
    "Spot the bug: a batch of weights",
    "batched_weights(attn_scores) takes scores of shape (batch, num_tokens, num_tokens) and should return causal "
    "attention weights (each row summing to 1) ready for dropout. Its rows do not sum to 1. Fix it.",
    reference=lambda s: softmax_stable(s.masked_fill(causal_mask(s.shape[-1]), float("-inf"))),
    cases=_batched_cases,
    hint="with a batch dimension in front, which dimension holds the keys?",
    solution=_solution_batched_weights,
    buggy=buggy_batched_weights,
    bug_message="softmax(dim=1) normalises over the queries (the middle dimension of (batch, T, T)), so columns "
                "sum to 1, not rows. Use dim=-1, the keys, which stays right with or without a batch.",
)
