"""Exercises for notebook 05: dropout on attention weights.

Dropout's answers are random, so exercises 2 and 3 judge an answer by what every draw must show: zeros where a
weight was dropped, survivors at exactly ``a / (1 - p)``, about a fraction ``p`` dropped, a mask drawn
independently for every entry, and a new mask on every call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..attention import softmax_stable
from ..masks import causal_mask
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids

__all__ = ["rescale_survivors", "attention_dropout", "dropout_after_softmax"]


def _weights(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.softmax(randn(g, *shape, scale=2.0), dim=-1)


def _causal_weights(attn_scores: torch.Tensor) -> torch.Tensor:
    """Causal softmax weights of ``(..., T, T)`` scores: zeros above the diagonal, rows summing to 1."""
    return softmax_stable(attn_scores.masked_fill(causal_mask(attn_scores.shape[-1]), float("-inf")))


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
    "weight survives). Return the weights after dropout with probability p: dropped weights 0, survivors rescaled.",
    reference=lambda w, keep, p: torch.where(keep, w / (1 - p), torch.zeros_like(w)),
    cases=_keep_cases,
    hint=["Take one weight a. It survives with probability 1 - p and is 0 otherwise. What must a survivor become "
          "so that the average over many draws is a again?",
          "Multiplying a float tensor by a bool tensor treats True as 1 and False as 0."],
    solution=_solution_rescale_survivors,
    mistakes=[
        Mistake(lambda w, keep, p: w * keep,
                "you dropped the right weights but did not rescale the survivors, so every weight now averages "
                "(1 - p) times its old value. Scale the survivors so the average stays the same."),
        Mistake(lambda w, keep, p: w * keep * (1 - p),
                "you multiplied the survivors by (1 - p), which makes them smaller still. It is the other way "
                "round."),
        Mistake(lambda w, keep, p: w * keep / p if p > 0 else w * keep,
                "you divided by p, the probability of being DROPPED. Survivors are rescaled by the probability "
                "of surviving."),
        Mistake(lambda w, keep, p: w * ~keep / (1 - p),
                "you kept the weights where `keep` is False. True means the weight survives."),
        Mistake(lambda w, keep, p: torch.where(keep, w / (1 - p), w),
                "your survivors are right, but the dropped weights kept their old value: a dropped weight is 0."),
    ],
)


# --- 2. the whole dropout, with its own random draws ------------------------------------------------------
def _dropout_cases(g: torch.Generator) -> list[Case]:
    return [Case("200x200 weights, p=0.5", (_weights(g, 200, 200), 0.5)),
            Case("a batch of 4 x 50x50 weights, p=0.1", (_weights(g, 4, 50, 50), 0.1)),
            Case("100x100 causal weights (zeros above the diagonal), p=0.3",
                 (_causal_weights(randn(g, 100, 100, scale=2.0)), 0.3)),
            Case("10x10 weights, p=0.0", (_weights(g, 10, 10), 0.0))]


def _solution_attention_dropout(attn_weights, p):
    keep = torch.rand_like(attn_weights) >= p     # one fresh draw per weight: True with probability 1 - p
    return attn_weights * keep / (1 - p)


def _same_mask_everywhere(dropped: torch.Tensor, p: float) -> str | None:
    """A mask that repeats along a dimension was not drawn once per weight."""
    if p == 0 or dropped.dim() < 2:
        return None
    if bool((dropped == dropped[..., :1, :]).all()):
        return ("every row dropped the same keys: your mask has one coin flip per key, shared by all queries. "
                "Draw one for every weight (same shape as attn_weights).")
    if bool((dropped == dropped[..., :, :1]).all()):
        return ("each row is either kept whole or dropped whole: your mask has one coin flip per query. Draw one "
                "for every weight (same shape as attn_weights).")
    if dropped.dim() > 2 and bool((dropped == dropped[:1]).all()):
        return ("every sequence of the batch got the same mask: draw one coin flip for every weight of every "
                "sequence (same shape as attn_weights).")
    return None


def _survivor_problem(got: torch.Tensor, weights: torch.Tensor, p: float, what: str) -> str | None:
    """Every non-zero entry of ``got`` must be exactly ``weights / (1 - p)``."""
    kept = got != 0
    survivors, originals = got[kept].double(), weights[kept].double()
    if torch.allclose(survivors, originals / (1 - p), rtol=1e-5, atol=1e-8):
        return None
    if p > 0 and torch.allclose(survivors, originals, rtol=1e-5, atol=1e-8):
        return ("no weight is ever 0 or rescaled: dropped weights must become 0, survivors must grow. Is the "
                "dropout still there?" if bool(kept.all()) else
                "the surviving weights are unchanged. Rescale them so that each weight keeps its average.")
    scaled = torch.isclose(survivors, originals / (1 - p), rtol=1e-5, atol=1e-8)
    unchanged = torch.isclose(survivors, originals, rtol=1e-5, atol=1e-8)
    if p > 0 and bool((scaled | unchanged).all()) and bool(unchanged.any()):
        return "some weights kept their old value instead of becoming 0: a dropped weight is exactly 0."
    ratio = (survivors / originals).median().item() if len(survivors) else float("nan")
    if abs(ratio - (1 - p)) < 1e-4:
        return "the surviving weights were multiplied by (1 - p), which shrinks them; they must grow."
    return (f"a weight that survives must be exactly {what} / (1 - p) = {what} x {1 / (1 - p):.3f}; yours are "
            f"about {what} x {ratio:.3f}.")


def _fraction_problem(dropped: torch.Tensor, usable: torch.Tensor, p: float) -> str | None:
    fraction = (dropped & usable).double().sum().item() / max(int(usable.sum()), 1)
    if abs(fraction - p) > 0.03:
        if abs(fraction - (1 - p)) <= 0.03:
            return f"you dropped {fraction:.0%} of the weights: p is the probability of being DROPPED, not kept."
        return f"you dropped {fraction:.1%} of the weights; with p={p} it should be close to {p:.0%}."
    return None


def _fresh_problem(dropped: torch.Tensor, case: Case, function, p: float) -> str | None:
    if p == 0:
        return None
    again = function(*case.fresh_args()[0])
    if isinstance(again, torch.Tensor) and torch.equal(again == 0, dropped):
        return ("two calls dropped exactly the same weights. Dropout draws a new mask on every call; does your "
                "function seed a generator of its own?")
    return None


def _dropout_properties(got: torch.Tensor, case: Case, function) -> str | None:
    weights, p = case.args
    usable = weights != 0  # a weight that is already 0 (the causal mask) stays 0 whatever happens
    if bool((got[~usable] != 0).any()):
        return "a weight that was 0 is no longer 0. Dropout only multiplies: a hidden (future) weight stays 0."
    dropped = (got == 0) & usable
    return (_survivor_problem(got, weights, p, "weight") or _same_mask_everywhere(got == 0, p)
            or _fraction_problem(dropped, usable, p) or _fresh_problem(got == 0, case, function, p))


attention_dropout = FunctionExercise(
    "Dropout on attention weights",
    "write attention_dropout(attn_weights, p) that zeroes each weight with probability p (a new random draw on "
    "every call) and rescales the survivors, like nn.Dropout in training mode, without calling PyTorch's dropout.",
    reference=lambda w, p: F.dropout(w, p, training=True),
    cases=_dropout_cases,
    hint=["You need one random number per weight, and new ones on every call. Which torch function gives uniform "
          "numbers in [0, 1) shaped like a tensor you already have?",
          "A uniform number u in [0, 1) is below p with probability p. Turn that into a bool 'keep' tensor, then "
          "reuse exercise 1."],
    solution=_solution_attention_dropout,
    properties=_dropout_properties,
    rules=[forbids("torch.nn.functional.dropout", "torch.dropout",
                   why="Write the coin flips and the rescaling yourself (nn.Dropout calls the same function).")],
)


# --- 3. spot the bug: dropout in the wrong place ---------------------------------------------------------
def _scores_cases(g: torch.Generator) -> list[Case]:
    return [Case("64 tokens, p=0.5", (randn(g, 64, 64, scale=2.0), 0.5)),
            Case("a batch of 4 sequences of 32 tokens, p=0.2", (randn(g, 4, 32, 32, scale=2.0), 0.2)),
            Case("6 tokens, p=0.0", (randn(g, 6, 6), 0.0))]


def buggy_weights_with_dropout(attn_scores, p):
    # attn_scores: (..., T, T), already divided by sqrt(d_k)
    num_tokens = attn_scores.shape[-1]
    mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    attn_scores = torch.nn.functional.dropout(attn_scores, p)   # switch off some query-key connections
    attn_scores = attn_scores.masked_fill(mask, float("-inf"))
    return torch.softmax(attn_scores, dim=-1)


def _solution_dropout_after_softmax(attn_scores, p):
    num_tokens = attn_scores.shape[-1]
    mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    attn_weights = torch.softmax(attn_scores.masked_fill(mask, float("-inf")), dim=-1)
    return torch.nn.functional.dropout(attn_weights, p)         # a dropped WEIGHT is 0: that key is ignored


_BEFORE_SOFTMAX = (
    "none of the weights a query may use is ever 0, and every row still sums to exactly 1: the dropout runs "
    "before the softmax. A dropped score becomes 0, and the softmax gives a score of 0 a weight of its own "
    "(e to the 0 is 1), so no key is switched off; the doubled surviving scores only make the rows sharper. "
    "Dropping must happen where a 0 means 'ignore this key'."
)


def _after_softmax_properties(got: torch.Tensor, case: Case, function) -> str | None:
    scores, p = case.args
    weights = _causal_weights(scores)
    future = causal_mask(scores.shape[-1]).expand_as(got)
    if bool((got[future] != 0).any()):
        return "a weight above the diagonal is not 0: the query sees a future token. Keep the causal mask."
    usable = ~future
    dropped = (got == 0) & usable
    row_sums = got.sum(dim=-1).double()[(got != 0).any(dim=-1)]  # rows that kept at least one weight
    rows_sum_to_one = torch.allclose(row_sums, torch.ones_like(row_sums), atol=1e-5)
    if p > 0 and not bool(dropped.any()) and rows_sum_to_one:
        return _BEFORE_SOFTMAX
    if p > 0 and bool(dropped.any()) and rows_sum_to_one:
        return ("your rows sum to exactly 1 although weights were dropped: you renormalised after dropout. A row "
                "after dropout sums to 1 only on average; that is what the 1/(1 - p) is for.")
    return (_survivor_problem(got, weights, p, "causal weight") or _fraction_problem(dropped, usable, p)
            or _fresh_problem(got == 0, case, function, p))


dropout_after_softmax = SpotTheBug(
    "Spot the bug: dropout on attention",
    "weights_with_dropout(attn_scores, p) takes scaled scores of shape (..., T, T) and should return causal "
    "attention weights after dropout with probability p. It runs without an error, yet dropout never removes "
    "a single key. Fix it.",
    reference=lambda s, p: F.dropout(_causal_weights(s), p, training=True),
    cases=_scores_cases,
    hint=["Call it a few times on small scores with p=0.5 and print the rows. Which weights are 0, and what do "
          "the rows sum to?",
          "What does the softmax make of a score that is 0? And of a score that is -inf?"],
    solution=_solution_dropout_after_softmax,
    buggy=buggy_weights_with_dropout,
    bug_message=_BEFORE_SOFTMAX,
    properties=_after_softmax_properties,
)
