"""Exercises for notebook 05: dropout on attention weights.

1. Predict a row's sum: its average over many draws and the chance that a draw drops the whole row (exact
   values, no simulation).
2. Dropout written by hand, with a ``training`` switch. Dropout's answers are random, so the check judges an answer
   by what every draw must show: zeros where a weight was dropped, survivors at exactly ``a / (1 - p)``, about a
   fraction ``p`` dropped, a mask drawn independently for every entry, and a new mask on every call.
3. Spot the bug: an attention map, drawn in the middle of training, that changes from call to call.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from ..attention import softmax_stable
from ..masks import causal_mask
from ..modules import CausalAttention
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, Rule, SpotTheBug, forbids

__all__ = ["row_sum_facts", "attention_dropout", "attention_map"]


def _weights(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.softmax(randn(g, *shape, scale=2.0), dim=-1)


def _causal_weights(attn_scores: torch.Tensor) -> torch.Tensor:
    """Causal softmax weights of ``(..., T, T)`` scores: zeros above the diagonal, rows summing to 1."""
    return softmax_stable(attn_scores.masked_fill(causal_mask(attn_scores.shape[-1]), float("-inf")))


# --- 1. predict a row's sum -----------------------------------------------------------------------------
def _row_cases(g: torch.Generator) -> list[Case]:
    causal = _causal_weights(randn(g, 6, 6, scale=2.0))
    loose = _causal_weights(randn(g, 2, 5, 5)) * torch.rand(2, 5, 1, generator=g) * 2  # rows not summing to 1
    return [Case("6x6 causal weights, p=0.5", (causal, 0.5)),
            Case("the same weights, p=0.1", (causal.clone(), 0.1)),
            Case("a batch of 2 x 5x5 causal weights whose rows do not sum to 1, p=0.3", (loose, 0.3)),
            Case("4x4 weights with no zeros, p=0.0", (_weights(g, 4, 4), 0.0))]


def _reference_row_sum_facts(attn_weights, p):
    usable = (attn_weights != 0).sum(dim=-1)  # (..., T): weights that dropout can remove
    return attn_weights.sum(dim=-1), torch.full_like(attn_weights[..., 0], p) ** usable


def _solution_row_sum_facts(attn_weights, p):
    # Each weight averages a * (1 - p) / (1 - p) + 0 * p = a, so a row averages its own sum.
    mean_row_sums = attn_weights.sum(dim=-1)
    # The row sums to 0 only if every non-zero weight is dropped: independent coin flips, p each.
    num_nonzero = (attn_weights != 0).sum(dim=-1)
    prob_all_dropped = p ** num_nonzero.double()
    return mean_row_sums, prob_all_dropped


row_sum_facts = FunctionExercise(
    "Predict a row's sum",
    "write row_sum_facts(attn_weights, p) that returns, exactly, for every row: the average of its sum over many "
    "dropout draws, and the probability that one draw drops every non-zero weight of the row.",
    reference=_reference_row_sum_facts,
    cases=_row_cases,
    hint=["Take one weight a: what does it become with probability 1 - p, and with probability p? Average the two, "
          "then add up a row.",
          "A row sums to 0 only when every weight that could contribute is dropped. Which weights of a causal row "
          "are 0 whatever happens, and how do independent coin flips combine?"],
    solution=_solution_row_sum_facts,
    mistakes=[
        Mistake(lambda w, p: (w.sum(-1) * (1 - p), p ** (w != 0).sum(-1).double()),
                "output 1: your average row sums are (1 - p) times too small: the survivors are rescaled by "
                "1/(1 - p), which is what keeps the average."),
        Mistake(lambda w, p: (w.sum(-1), torch.full_like(w[..., 0], p)),
                "output 2: a row sums to 0 only if ALL of its non-zero weights are dropped, not just one."),
        Mistake(lambda w, p: (w.sum(-1), torch.full_like(w[..., 0], p) ** w.shape[-1]),
                "output 2: you counted every column. The weights above the diagonal are already 0: whether they are "
                "dropped or not, they add nothing. Count only the non-zero weights."),
        Mistake(lambda w, p: (w.sum(-1), (1 - torch.full_like(w[..., 0], p)) ** (w != 0).sum(-1)),
                "output 2: that is the probability that every weight SURVIVES. p is the probability of being "
                "dropped."),
        Mistake(lambda w, p: (w.sum(-1), 1 - (1 - torch.full_like(w[..., 0], p)) ** (w != 0).sum(-1)),
                "output 2: that is the probability that at least one weight is dropped; the row sums to 0 only "
                "when all of them are."),
        Mistake(lambda w, p: (torch.ones_like(w[..., 0]), p ** (w != 0).sum(-1).double()),
                "output 1: you returned 1 for every row. That holds for softmax rows, but not for every input (one "
                "case has rows that do not sum to 1): what does each weight average to?"),
    ],
)


# --- 2. the whole dropout, with its own random draws ------------------------------------------------------
def _dropout_cases(g: torch.Generator) -> list[Case]:
    return [Case("200x200 weights, p=0.5", (_weights(g, 200, 200), 0.5)),
            Case("a batch of 4 x 50x50 weights, p=0.1", (_weights(g, 4, 50, 50), 0.1)),
            Case("100x100 causal weights (zeros above the diagonal), p=0.3",
                 (_causal_weights(randn(g, 100, 100, scale=2.0)), 0.3)),
            Case("10x10 weights, p=0.0", (_weights(g, 10, 10), 0.0)),
            Case("50x50 weights, p=0.5, training=False", (_weights(g, 50, 50), 0.5), {"training": False})]


def _solution_attention_dropout(attn_weights, p, training=True):
    if not training:                              # eval(): dropout is off
        return attn_weights
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
    if not case.kwargs.get("training", True):
        return ("with training=False dropout is switched off (what eval() does): return the weights unchanged, "
                "with nothing dropped or rescaled.")
    usable = weights != 0  # a weight that is already 0 (the causal mask) stays 0 whatever happens
    if bool((got[~usable] != 0).any()):
        return "a weight that was 0 is no longer 0. Dropout only multiplies: a hidden (future) weight stays 0."
    dropped = (got == 0) & usable
    return (_survivor_problem(got, weights, p, "weight") or _same_mask_everywhere(got == 0, p)
            or _fraction_problem(dropped, usable, p) or _fresh_problem(got == 0, case, function, p))


attention_dropout = FunctionExercise(
    "Dropout on attention weights",
    "write attention_dropout(attn_weights, p, training=True) for 0 <= p < 1: in training, zero each weight with "
    "probability p (a new random draw on every call) and rescale the survivors, like nn.Dropout; with "
    "training=False, return the weights unchanged. Do not call PyTorch's dropout.",
    reference=lambda w, p, training=True: F.dropout(w, p, training=training),
    cases=_dropout_cases,
    hint=["You need one random number per weight, and new ones on every call. Which torch function gives uniform "
          "numbers in [0, 1) shaped like a tensor you already have?",
          "A uniform number u in [0, 1) is below p with probability p. Turn that into a bool 'keep' tensor, then "
          "use the two lines of section 4.",
          "What did eval() do to CausalAttention's weights in section 6? training=False asks for the same."],
    solution=_solution_attention_dropout,
    properties=_dropout_properties,
    rules=[forbids("torch.nn.functional.dropout", "torch.dropout",
                   why="Write the coin flips and the rescaling yourself (nn.Dropout calls the same function).")],
)


# --- 3. spot the bug: an attention map that changes from call to call --------------------------------------
class _ModeKept(Rule):
    """The model must leave ``attention_map`` in the mode (and with the dropout) it came in."""

    def __init__(self):
        self.models: list[tuple[torch.nn.Module, bool, float]] = []  # filled by the cases of each check

    def after(self, calls: list[str]) -> str | None:
        for model, was_training, p in self.models:
            if model.dropout.p != p:
                return ("your function changed the model's dropout probability. Training goes on after the picture "
                        "with the dropout it had: leave p alone and switch dropout off another way.")
            if model.training != was_training:
                came, left = ("training", "eval") if was_training else ("eval", "training")
                return (f"your function leaves a model that came in {came} mode in {left} mode, so training (or "
                        f"evaluation) goes on in the wrong mode. Put it back in the mode you found it in.")
        return None

    def __repr__(self) -> str:
        return "_ModeKept()"


_mode_kept = _ModeKept()


def _model_cases(g: torch.Generator) -> list[Case]:
    def model(d_in, d_out, num_tokens, p, training):
        torch.manual_seed(int(torch.randint(0, 10_000, (1,), generator=g)))
        module = CausalAttention(d_in, d_out, context_length=num_tokens, dropout=p).train(training)
        _mode_kept.models.append((module, training, p))
        return module

    _mode_kept.models.clear()
    with torch.random.fork_rng(devices=[]):  # building the models must not move the learner's random stream
        cases = [Case("a model in training mode (dropout 0.5), one sequence of 6 tokens",
                      (model(3, 2, 6, 0.5, True), randn(g, 1, 6, 3))),
                 Case("a model in training mode (dropout 0.1), a batch of 2 sequences of 5 tokens",
                      (model(4, 3, 5, 0.1, True), randn(g, 2, 5, 4))),
                 Case("a model already in eval mode (dropout 0.5)", (model(3, 2, 6, 0.5, False), randn(g, 1, 6, 3)))]
    return cases


def _reference_attention_map(model, batch):
    frozen = copy.deepcopy(model).eval()
    with torch.no_grad():
        return frozen(batch, return_weights=True)[1]


def buggy_attention_map(model, batch):
    # model: an attention module, maybe in the middle of training; batch: (B, T, d_in)
    with torch.no_grad():                       # a picture needs no gradients
        _, attn_weights = model(batch, return_weights=True)
    return attn_weights                         # (B, T, T), to draw


def _solution_attention_map(model, batch):
    was_training = model.training               # remember the mode, to put it back
    model.eval()                                # dropout off: the weights the model uses when put to use
    with torch.no_grad():
        _, attn_weights = model(batch, return_weights=True)
    model.train(was_training)                   # training goes on as before
    return attn_weights


_STILL_DROPPING = (
    "some weights are 0 or larger than the model's own, and a second call gives another picture: dropout is still "
    "on. Gradients or not, a module in training mode drops weights. What switches it off?"
)


def _map_properties(got: torch.Tensor, case: Case, function) -> str | None:
    model, batch = case.args
    expected = _reference_attention_map(model, batch)
    visible = ~causal_mask(expected.shape[-1]).expand_as(expected)
    if bool((got[visible] == 0).any()) or not torch.allclose(got, expected, atol=1e-5):
        if model.dropout.p > 0 and bool(((got[visible] == 0) | torch.isclose(
                got[visible], expected[visible] / (1 - model.dropout.p), atol=1e-5)).any()):
            return _STILL_DROPPING
        return "these are not the weights the model gives in eval mode (dropout off) for this batch."
    return None


attention_map = SpotTheBug(
    "Spot the bug: an attention map that flickers",
    "attention_map(model, batch) should return the attention weights (B, T, T) that the model uses when it is put "
    "to use, the same on every call, and leave the model in the mode it found it in. Fix it.",
    reference=_reference_attention_map,
    cases=_model_cases,
    hint=["Call buggy_attention_map twice on the same CausalAttention(3, 2, 6, dropout=0.5) and compare. Then call "
          "it on the same module after switching its mode (section 6).",
          "Which attribute of a module tells you its current mode, so that you can restore it afterwards?"],
    solution=_solution_attention_map,
    buggy=buggy_attention_map,
    bug_message=_STILL_DROPPING,
    properties=_map_properties,
    rules=[_mode_kept],
)
