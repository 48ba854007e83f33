"""Exercises for notebook 05: dropout on attention weights.

1. How far a context vector strays: the chance that a draw wipes out z_i, and the variance of each entry of z_i
   (exact values, no simulation). The lesson shows the average and the spread of a row *sum* of causal weights;
   this asks for the context vector, where the values come in, for any weights: causal, full, padded, with rows
   that see nothing, T_q != T_k.
2. Spot the bug: an attention map, plotted in the middle of training, that changes from call to call. The picture is
   the weights a finished model uses (none dropped); the fix must leave the mode of every part of the model (one
   case holds a frozen layer inside a model that trains), its dropout and PyTorch's global random stream as it
   found them (all stated in the task).
"""

from __future__ import annotations

import copy

import torch

from ..attention import softmax_stable
from ..masks import causal_mask, padding_mask, sliding_window_mask
from ..modules import CausalAttention
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, Rule, SpotTheBug

__all__ = ["dropout_spread", "attention_map"]


def _causal_weights(attn_scores: torch.Tensor) -> torch.Tensor:
    """Causal softmax weights of ``(..., T, T)`` scores: zeros above the diagonal, rows summing to 1."""
    return softmax_stable(attn_scores.masked_fill(causal_mask(attn_scores.shape[-1]), float("-inf")))


# --- 1. how far a context vector strays ----------------------------------------------------------------------
def _spread_cases(g: torch.Generator) -> list[Case]:
    causal = _causal_weights(randn(g, 6, 6, scale=2.0))
    values = randn(g, 6, 4)  # negative entries too: a value enters the variance squared
    # Irregular weights: a full (non-causal) row set, key padding, a query that sees nothing, T_q != T_k.
    padded = torch.softmax(randn(g, 2, 3, 5).masked_fill(padding_mask([5, 2])[:, None, :], float("-inf")), dim=-1)
    windowed = torch.softmax(randn(g, 5, 5).masked_fill(sliding_window_mask(5, 2), float("-inf")), dim=-1)
    windowed[2] = 0.0  # a query that may see nothing gets all-zero weights (fully_masked_rows="zero")
    return [Case("6x6 causal weights, values (6, 4), p=0.5", (causal, values, 0.5)),
            Case("4x4 weights with no zeros (not causal), values (4, 2), p=0.3",
                 (torch.softmax(randn(g, 4, 4), dim=-1), randn(g, 4, 2), 0.3)),
            Case("a batch of 2 x (3 queries, 5 keys) weights, keys 2..4 of the second sequence padded (zero), "
                 "values (2, 5, 3), p=0.1", (padded, randn(g, 2, 5, 3), 0.1)),
            Case("5x5 weights of a window of 2 keys, row 2 all zeros, values (5, 3), p=0.8",
                 (windowed, randn(g, 5, 3), 0.8)),
            Case("the 6x6 causal weights and values, p=0.0", (causal.clone(), values.clone(), 0.0))]


def _prob_all_dropped(attn_weights, p, count=None):
    usable = (attn_weights != 0).sum(dim=-1) if count is None else count  # weights dropout can remove
    return torch.full_like(attn_weights[..., 0], p) ** usable


def _reference_dropout_spread(attn_weights, values, p):
    return _prob_all_dropped(attn_weights, p), p / (1 - p) * attn_weights.pow(2) @ values.pow(2)


def _solution_dropout_spread(attn_weights, values, p):
    # z_i is all zeros when every non-zero weight of row i is dropped: independent coin flips, p each.
    num_nonzero = (attn_weights != 0).sum(dim=-1)                    # (..., T_q)
    prob_all_dropped = p ** num_nonzero.double()
    # One weight: it is a / (1 - p) with probability 1 - p, else 0. Mean a; mean of its square a**2 / (1 - p);
    # variance a**2 / (1 - p) - a**2 = a**2 * p / (1 - p).
    # z_ic = sum_j weight_ij * v_jc (component c < d_v): independent terms, so their variances add; the constant v_jc
    # enters squared.
    variance = p / (1 - p) * attn_weights**2 @ values**2  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return prob_all_dropped, variance


def _with_prob(variance):
    """A known mistake in the variance, with the right probability next to it."""
    return lambda w, v, p: (_prob_all_dropped(w, p), variance(w, v, p))


def _with_variance(prob):
    """A known mistake in the probability, with the right variance next to it."""
    return lambda w, v, p: (prob(w, p), p / (1 - p) * w.pow(2) @ v.pow(2))


dropout_spread = FunctionExercise(
    "How far a context vector strays",
    "write dropout_spread(attn_weights, values, p) for any weights (..., T_q, T_k) (T_q queries x T_k keys; the "
    "lesson has T_q = T_k = T, the checker also uses 3 queries against 5 keys), causal or not, and values "
    "(..., T_k, d_v). Return exactly (no simulation) a tuple "
    "(probability, variance): for every query i, the probability that one dropout draw drops every non-zero weight "
    "of row i, so that z_i is all zeros (1 for a row with no non-zero weight), shape (..., T_q); then the variance "
    "over draws of each entry of z_i = sum_j a_ij v_j after dropout, shape (..., T_q, d_v). One weight a_ij after "
    "dropout has variance a_ij**2 * p / (1 - p) (the lesson's section 5).",
    reference=_reference_dropout_spread,
    cases=_spread_cases,
    hint=["Write one entry z_ic (component c < d_v) as a sum over j of terms, each a random weight times a fixed "
          "number v_jc. The coin flips of different weights are independent. What happens to variances when you add "
          "independent numbers, and when you multiply a random number by a constant?",
          "For the probability: which weights of a row are 0 whatever happens, and how do independent coin "
          "flips combine? A row with no non-zero weight at all is a case of its own: what is z_i then?"],
    solution=_solution_dropout_spread,
    mistakes=[
        Mistake(_with_prob(lambda w, v, p: p * (1 - p) * w.pow(2) @ v.pow(2)),
                "output 2: that is the variance of the coin flip alone. A kept weight is also scaled up by 1/(1 - p): "
                "how does multiplying a random number by a constant change its variance?"),
        Mistake(_with_prob(lambda w, v, p: w.pow(2) @ v.pow(2) / (1 - p)),
                "output 2: that is the mean of the squares. The variance subtracts the square of the mean."),
        Mistake(_with_prob(lambda w, v, p: p / (1 - p) * (w @ v).pow(2)),
                "output 2: you squared the whole sum. The terms a_ij v_j are independent: their variances add, "
                "term by term."),
        Mistake(_with_prob(lambda w, v, p: p / (1 - p) * w.pow(2) @ v),
                "output 2: the value v_jc multiplies a random weight, so it enters the variance squared."),
        Mistake(_with_prob(lambda w, v, p: p / (1 - p) * w @ v.pow(2)),
                "output 2: the weight a_ij is the size of the random term, so it enters the variance squared."),
        Mistake(_with_prob(lambda w, v, p: (p / (1 - p) * w.pow(2) @ v.pow(2)).sqrt()),
                "output 2: that is the standard deviation; the task asks for the variance (its square)."),
        Mistake(_with_variance(lambda w, p: torch.full_like(w[..., 0], p)),
                "output 1: z_i is all zeros only if ALL of the row's non-zero weights are dropped, not just one."),
        Mistake(_with_variance(lambda w, p: _prob_all_dropped(w, p, w.shape[-1])),
                "output 1: you counted every column. A weight that is already 0 (above the diagonal, or a padded "
                "key) adds nothing, dropped or not. Count only the non-zero weights."),
        Mistake(_with_variance(lambda w, p: _prob_all_dropped(w, 1 - p)),
                "output 1: that is the probability that every weight SURVIVES. p is the probability of being "
                "dropped."),
        Mistake(_with_variance(lambda w, p: _prob_all_dropped(w, p, torch.arange(1, w.shape[-2] + 1))),
                "output 1: you counted i + 1 weights in row i, as in a causal row. These weights can be any: "
                "count the non-zero weights each row really has."),
        Mistake(_with_variance(lambda w, p: 1 - _prob_all_dropped(w, 1 - p)),
                "output 1: that is the probability that at least one weight is dropped; z_i is all zeros only when "
                "all of them are."),
    ],
)


# --- 2. spot the bug: an attention map that changes from call to call --------------------------------------
def _modes(model: torch.nn.Module) -> dict[str, tuple[bool, float | None]]:
    """The mode of every part of ``model`` (``""`` is the model itself) and the p of every dropout in it."""
    return {name: (module.training, module.p if isinstance(module, torch.nn.Dropout) else None)
            for name, module in model.named_modules()}


class _ModeKept(Rule):
    """``attention_map`` must leave every part of the model in the mode (and with the dropout) it came in."""

    def __init__(self):
        self.models: list[tuple[torch.nn.Module, dict]] = []  # (model, its _modes), filled by the cases of a check

    def after(self, calls: list[str]) -> str | None:
        for model, came_in in self.models:
            now = _modes(model)
            if any(now[name][1] != p for name, (_, p) in came_in.items()):
                return ("your function changed the model's dropout probability. Training goes on after the picture "
                        "with the dropout it had: leave p alone and switch dropout off another way.")
            for name, (was_training, _) in came_in.items():  # the model itself first, then its parts
                if now[name][0] == was_training:
                    continue
                came, left = ("training", "eval") if was_training else ("eval", "training")
                if not name:
                    return (f"your function leaves a model that came in {came} mode in {left} mode, so training "
                            f"(or evaluation) goes on in the wrong mode. Put it back in the mode you found it in.")
                return (f"your function leaves the model's part `{name}`, which came in {came} mode, in {left} mode. "
                        f"Switching a module's mode switches every module inside it, so a frozen layer of a model "
                        f"in training would train on. Put every part back in the mode you found it in.")
        return None

    def __repr__(self) -> str:
        return "_ModeKept()"


_mode_kept = _ModeKept()


class _StreamKept(Rule):
    """The function must leave PyTorch's global random stream as it found it: no reseeding, no draws.

    ``before`` only remembers the function; once its values are right, ``after`` calls it on a model of its own in
    training mode and compares the global CPU generator's state before and after the call. Any change (a
    ``torch.manual_seed``, a ``set_rng_state``, a dropout draw) would make the next training step drop other weights.
    """

    def __init__(self):
        self._function, self._judged = None, False

    def before(self, function) -> str | None:
        self._function, self._judged = function, False
        return None

    def after(self, calls: list[str]) -> str | None:
        if self._judged or self._function is None:
            return None
        self._judged = True
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(2024)
            model = CausalAttention(3, 2, context_length=4, dropout=0.5).train()
            batch = torch.randn(1, 4, 3)
            state = torch.get_rng_state()
            try:
                self._function(model, batch)
            except Exception:  # errors are the value check's business
                return None
            if not torch.equal(torch.get_rng_state(), state):
                return ("your function moves PyTorch's global random stream (it reseeds it, or draws from it), so "
                        "the next training step would drop other weights than it would have without the picture. "
                        "The task asks you neither to reseed the global random generator nor to draw from it.")
        return None

    def __repr__(self) -> str:
        return "_StreamKept()"


class _TwoLayers(torch.nn.Module):
    """Two causal attention layers, the second reading the first's context vectors; its weights are the picture.

    Input ``(B, T, d_in)``; output ``(B, T, d_out)``; weights (the second layer's) ``(B, T, T)``.
    """

    def __init__(self, d_in: int, d_out: int, num_tokens: int, p: float):
        super().__init__()
        self.layers = torch.nn.ModuleList([CausalAttention(d_in, d_out, context_length=num_tokens, dropout=p),
                                           CausalAttention(d_out, d_out, context_length=num_tokens, dropout=p)])

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        context_vecs, attn_weights = self.layers[1](self.layers[0](x), return_weights=True)
        return (context_vecs, attn_weights) if return_weights else context_vecs


def _model_cases(g: torch.Generator) -> list[Case]:
    def model(d_in, d_out, num_tokens, p, training):
        torch.manual_seed(int(torch.randint(0, 10_000, (1,), generator=g)))
        module = CausalAttention(d_in, d_out, context_length=num_tokens, dropout=p).train(training)
        _mode_kept.models.append((module, _modes(module)))
        return module

    def frozen_first_layer(d_in, d_out, num_tokens, p):
        torch.manual_seed(int(torch.randint(0, 10_000, (1,), generator=g)))
        module = _TwoLayers(d_in, d_out, num_tokens, p).train()
        module.layers[0].eval()  # frozen: it stays as it is while the layer after it trains
        _mode_kept.models.append((module, _modes(module)))
        return module

    _mode_kept.models.clear()
    with torch.random.fork_rng(devices=[]):  # building the models must not move the learner's random stream
        cases = [Case("a model in training mode (dropout 0.5), one sequence of 6 tokens",
                      (model(3, 2, 6, 0.5, True), randn(g, 1, 6, 3))),
                 Case("a model in training mode (dropout 0.1), a batch of 2 sequences of 5 tokens",
                      (model(4, 3, 5, 0.1, True), randn(g, 2, 5, 4))),
                 Case("a model already in eval mode (dropout 0.5)", (model(3, 2, 6, 0.5, False), randn(g, 1, 6, 3))),
                 Case("a model of two attention layers (dropout 0.5) in training mode, its first layer frozen in eval "
                      "mode, one sequence of 6 tokens; the picture is the second layer's weights",
                      (frozen_first_layer(3, 2, 6, 0.5), randn(g, 1, 6, 3)))]
    return cases


def _reference_attention_map(model, batch):
    frozen = copy.deepcopy(model).eval()
    with torch.no_grad():
        return frozen(batch, return_weights=True)[1]


def buggy_attention_map(model, batch):
    # model: attention layers, in the middle of training or finished; batch: (B, T, d_in)
    with torch.no_grad():                       # a picture needs no gradients
        _, attn_weights = model(batch, return_weights=True)
    return attn_weights                         # (B, T, T), to plot


def _solution_attention_map(model, batch):
    # model.train(mode) would set every part to one mode: remember each part's own (a frozen layer stays frozen).
    modes = {module: module.training for module in model.modules()}
    model.eval()                                # dropout off everywhere: the weights a finished model uses
    with torch.no_grad():
        _, attn_weights = model(batch, return_weights=True)
    for module, was_training in modes.items():  # training goes on as before
        module.training = was_training          # this module only, not the ones inside it
    return attn_weights


_STILL_DROPPING = (
    "some weights are 0 or larger than the model's own, and a second call gives another picture: dropout is still "
    "on. Gradients or not, a module in training mode drops weights. What switches it off?"
)
_SAME_DRAW = (
    "every call now gives the same picture, but some weights are still 0 and others larger than the model's own: "
    "it is one fixed dropout draw. The picture should show the weights a finished model uses, none dropped. What "
    "switches dropout off?"
)


def _map_properties(got: torch.Tensor, case: Case, function) -> str | None:
    model, batch = case.args
    expected = _reference_attention_map(model, batch)
    visible = ~causal_mask(expected.shape[-1]).expand_as(expected)
    if bool((got[visible] == 0).any()) or not torch.allclose(got, expected, atol=1e-5):
        ps = {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0}
        if any(bool(((got[visible] == 0) | torch.isclose(got[visible], expected[visible] / (1 - p), atol=1e-5)).any())
               for p in ps):
            try:
                again = function(*case.fresh_args()[0])
            except Exception:  # a second call that fails says nothing about the first
                again = None
            if isinstance(again, torch.Tensor) and again.shape == got.shape and torch.equal(again, got):
                return _SAME_DRAW
            return _STILL_DROPPING
        return "these are not the weights the model gives in eval mode (dropout off) for this batch."
    return None


attention_map = SpotTheBug(
    "Spot the bug: a picture that leaves the model as it found it",
    "attention_map(model, batch) should return, to plot, the attention weights (B, T, T) a model uses once "
    "training is over, none dropped at random, whether it is called in the middle of training or on a finished "
    "model. The version given draws another picture at every call during training. Fix it so the picture changes "
    "nothing: every part of the model ends in the mode it came in (model.modules() lists every part, each with its "
    "own training flag; a model in training may hold a frozen layer), "
    "a model in training trains on exactly as it would have without the picture, a finished model keeps giving "
    "the same weights, and PyTorch's global random generator is neither reseeded nor drawn from.",
    reference=_reference_attention_map,
    cases=_model_cases,
    hint=["Call buggy_attention_map twice on the same CausalAttention(3, 2, 6, dropout=0.5) and compare where the "
          "zeros are. What decides whether the module drops weights, and what switches that off (section 6)?",
          "A finished model comes in one mode, a model in training in another, and a frozen layer inside a model "
          "in training in a mode of its own. Switching a module's mode switches every module inside it: what must "
          "you remember before you switch, so that every part ends where it was?"],
    solution=_solution_attention_map,
    buggy=buggy_attention_map,
    bug_message=_STILL_DROPPING,
    properties=_map_properties,
    rules=[_mode_kept, _StreamKept()],
)
