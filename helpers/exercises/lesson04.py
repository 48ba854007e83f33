"""Exercises for notebook 04: causal attention."""

from __future__ import annotations

import torch

from ..attention import softmax_stable
from ..masks import causal_mask as _causal_mask, mask_by_renormalising
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["causal_mask", "causal_weights", "renormalise", "leaky_mask"]


# --- 1. the mask itself ------------------------------------------------------------------------------
def _size_cases(g: torch.Generator) -> list[Case]:
    return [Case(f"num_tokens={n}", (n,)) for n in (4, 1, 6)]


def _solution_causal_mask(num_tokens):
    ones = torch.ones(num_tokens, num_tokens, dtype=torch.bool)
    return torch.triu(ones, diagonal=1)  # True strictly above the diagonal: the future, to hide


causal_mask = FunctionExercise(
    "Causal mask",
    "write causal_mask(num_tokens) returning a bool tensor (num_tokens, num_tokens) that is True where query i "
    "must NOT see key j (j > i), as helpers.causal_mask does.",
    reference=_causal_mask,
    cases=_size_cases,
    hint="start from torch.ones(n, n, dtype=torch.bool) and keep the part strictly above the diagonal: "
         "torch.triu(..., diagonal=1).",
    solution=_solution_causal_mask,
    mistakes=[
        Mistake(lambda n: torch.tril(torch.ones(n, n, dtype=torch.bool)),
                "your mask is True on and below the diagonal: that marks what a token may SEE. In this course "
                "True means hide, so you need the part above the diagonal (triu with diagonal=1)."),
        Mistake(lambda n: torch.triu(torch.ones(n, n, dtype=torch.bool)),
                "your mask also hides the diagonal, so a token could not attend to itself (and the first token "
                "would see nothing at all). Use diagonal=1."),
        Mistake(lambda n: torch.triu(torch.ones(n, n), diagonal=1),
                "the pattern is right but the dtype is float. masked_fill needs a bool mask: add "
                "dtype=torch.bool (or .bool())."),
    ],
)


# --- 2. masking the scores before softmax ----------------------------------------------------------
def _score_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("6 random scores per row (6 tokens)", (randn(g, 6, 6),)),
        Case("a batch of 2 sequences of 4 tokens", (randn(g, 2, 4, 4, scale=2.0),)),
        Case("a single token", (randn(g, 1, 1),)),
    ]


def _reference_causal_weights(attn_scores):
    hidden = _causal_mask(attn_scores.shape[-1], device=attn_scores.device)
    return softmax_stable(attn_scores.masked_fill(hidden, float("-inf")))


def _solution_causal_weights(attn_scores):
    num_tokens = attn_scores.shape[-1]
    future = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    masked = attn_scores.masked_fill(future, float("-inf"))  # exp(-inf) = 0: no weight on the future
    return torch.softmax(masked, dim=-1)


def _zero_then_softmax(s):
    return torch.softmax(s.masked_fill(_causal_mask(s.shape[-1]), 0.0), dim=-1)


def _softmax_then_zero(s):
    return torch.softmax(s, dim=-1).masked_fill(_causal_mask(s.shape[-1]), 0.0)


causal_weights = FunctionExercise(
    "Causal attention weights",
    "write causal_weights(attn_scores) for scores of shape (..., num_tokens, num_tokens): hide the future with "
    "-inf, then softmax over the keys. Each row must sum to 1 with zeros above the diagonal.",
    reference=_reference_causal_weights,
    cases=_score_cases,
    hint="masked_fill(mask, float('-inf')) BEFORE torch.softmax(..., dim=-1); build the mask from "
         "attn_scores.shape[-1] so it fits any length.",
    solution=_solution_causal_weights,
    mistakes=[
        Mistake(_zero_then_softmax,
                "you filled the future scores with 0 instead of -inf. exp(0) = 1, so the future still gets "
                "weight after the softmax."),
        Mistake(_softmax_then_zero,
                "you zeroed the weights after the softmax but did not renormalise: the rows no longer sum to 1. "
                "Fill the scores with -inf before the softmax instead."),
        Mistake(lambda s: torch.softmax(s, dim=-1),
                "nothing is masked: every query still sees the future. (If you used masked_fill, did you keep "
                "its result? Without the underscore it returns a new tensor.)"),
    ],
)


# --- 3. the long way round: renormalising ------------------------------------------------------------
def _weight_cases(g: torch.Generator) -> list[Case]:
    """The score cases, turned into softmax weights (each row sums to 1, nothing masked yet)."""
    return [Case(case.description.replace("scores", "softmax weights"), (torch.softmax(case.args[0], dim=-1),))
            for case in _score_cases(g)]


def _solution_renormalise(attn_weights):
    num_tokens = attn_weights.shape[-1]
    keep = torch.tril(torch.ones(num_tokens, num_tokens))       # 1 on and below the diagonal
    masked = attn_weights * keep                                 # the future's weights become 0
    return masked / masked.sum(dim=-1, keepdim=True)             # each row sums to 1 again


renormalise = FunctionExercise(
    "Mask by renormalising",
    "write renormalise(attn_weights) for softmax weights (..., num_tokens, num_tokens): zero the weights above "
    "the diagonal, then divide each row by its new sum.",
    reference=mask_by_renormalising,
    cases=_weight_cases,
    hint="multiply by torch.tril(torch.ones(n, n)), then divide by .sum(dim=-1, keepdim=True).",
    solution=_solution_renormalise,
    mistakes=[
        Mistake(lambda w: w * torch.tril(torch.ones(w.shape[-1], w.shape[-1])),
                "you zeroed the future but did not renormalise: rows now sum to less than 1."),
        Mistake(lambda w: (lambda m: m / m.sum(dim=-2, keepdim=True))(w * torch.tril(torch.ones(w.shape[-1],
                                                                                              w.shape[-1]))),
                "you divided by the column sums (dim=-2). Each row (one query) must sum to 1: dim=-1."),
    ],
)


# --- 4. spot the bug: masked_fill without the underscore -----------------------------------------------
def buggy_causal_weights(attn_scores):
    num_tokens = attn_scores.shape[-1]
    mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    attn_scores.masked_fill(mask, float("-inf"))
    return torch.softmax(attn_scores, dim=-1)


leaky_mask = SpotTheBug(
    "Spot the bug: the future leaks",
    "this causal softmax looks right and raises no error, but its weights above the diagonal are not zero. "
    "Find the bug and fix it.",
    reference=_reference_causal_weights,
    cases=_score_cases,
    hint="what does masked_fill return, and what happens to that return value here?",
    solution=_solution_causal_weights,
    buggy=buggy_causal_weights,
    bug_message="the future still gets weight: masked_fill (no underscore) returns a NEW tensor, which this "
                "code throws away. Keep it (attn_scores = attn_scores.masked_fill(...)) or fill in place with "
                "masked_fill_.",
)
