"""Exercises for notebook 05: dropout on attention weights.

1. How far a context vector strays: the chance that a draw wipes out z_i, and the variance of each entry of z_i
   (exact values, no simulation). The lesson shows the average and the spread of a row *sum*; this asks for the
   context vector, where the values come in.
2. Causal attention with dropout, written yourself for a batch: mask, softmax, dropout, then the values, with a
   ``training`` switch. Dropout's answers are random, so the check judges an answer by what every draw must show:
   zeros where a weight was dropped, survivors at exactly ``a / (1 - p)``, about a fraction ``p`` dropped, one coin
   flip per weight, a new mask on every call, and context vectors made from the weights after dropout.
3. Spot the bug: an attention map, drawn in the middle of training, that changes from call to call.
"""

from __future__ import annotations

import copy

import torch

from ..attention import scaled_dot_product_attention, softmax_stable
from ..masks import causal_mask
from ..modules import CausalAttention
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, Rule, SpotTheBug, forbids

__all__ = ["dropout_spread", "dropout_attention", "attention_map"]


def _causal_weights(attn_scores: torch.Tensor) -> torch.Tensor:
    """Causal softmax weights of ``(..., T, T)`` scores: zeros above the diagonal, rows summing to 1."""
    return softmax_stable(attn_scores.masked_fill(causal_mask(attn_scores.shape[-1]), float("-inf")))


# --- 1. how far a context vector strays ----------------------------------------------------------------------
def _spread_cases(g: torch.Generator) -> list[Case]:
    causal = _causal_weights(randn(g, 6, 6, scale=2.0))
    values = randn(g, 6, 4)  # negative entries too: a value enters the variance squared
    return [Case("6x6 causal weights, values (6, 4), p=0.5", (causal, values, 0.5)),
            Case("the same weights and values, p=0.1", (causal.clone(), values.clone(), 0.1)),
            Case("a batch of 2 x 5x5 causal weights, values (2, 5, 3), p=0.3",
                 (_causal_weights(randn(g, 2, 5, 5)), randn(g, 2, 5, 3), 0.3)),
            Case("4x4 weights with no zeros, values (4, 2), p=0.0",
                 (torch.softmax(randn(g, 4, 4), dim=-1), randn(g, 4, 2), 0.0))]


def _prob_all_dropped(attn_weights, p, count=None):
    usable = (attn_weights != 0).sum(dim=-1) if count is None else count  # weights dropout can remove
    return torch.full_like(attn_weights[..., 0], p) ** usable


def _reference_dropout_spread(attn_weights, values, p):
    return _prob_all_dropped(attn_weights, p), p / (1 - p) * attn_weights.pow(2) @ values.pow(2)


def _solution_dropout_spread(attn_weights, values, p):
    # z_i is all zeros when every non-zero weight of row i is dropped: independent coin flips, p each.
    num_nonzero = (attn_weights != 0).sum(dim=-1)                    # (..., T)
    prob_all_dropped = p ** num_nonzero.double()
    # One weight: it is a / (1 - p) with probability 1 - p, else 0. Mean a; mean of its square a**2 / (1 - p);
    # variance a**2 / (1 - p) - a**2 = a**2 * p / (1 - p).
    # z_id = sum_j weight_ij * v_jd: independent terms, so their variances add; the constant v_jd enters squared.
    variance = p / (1 - p) * attn_weights**2 @ values**2            # (..., T, T) @ (..., T, d_v) -> (..., T, d_v)
    return prob_all_dropped, variance


def _with_prob(variance):
    """A known mistake in the variance, with the right probability next to it."""
    return lambda w, v, p: (_prob_all_dropped(w, p), variance(w, v, p))


def _with_variance(prob):
    """A known mistake in the probability, with the right variance next to it."""
    return lambda w, v, p: (prob(w, p), p / (1 - p) * w.pow(2) @ v.pow(2))


dropout_spread = FunctionExercise(
    "How far a context vector strays",
    "write dropout_spread(attn_weights, values, p) that returns, exactly (no simulation), for every query i: the "
    "probability that one dropout draw drops every non-zero weight of row i (so z_i is all zeros), shape (..., T); "
    "and the variance over many draws of each entry of z_i = sum_j a_ij v_j after dropout, shape (..., T, d_v).",
    reference=_reference_dropout_spread,
    cases=_spread_cases,
    hint=["Start with one weight. With probability 1 - p it is scaled up by section 4's factor, otherwise it is 0. "
          "Its variance is the mean of its square minus the square of its mean (section 5 gives the mean).",
          "The terms of z_i are independent. What happens to variances when you add independent numbers, and when "
          "you multiply a random number by a constant c?",
          "For the probability: which weights of a causal row are 0 whatever happens, and how do independent coin "
          "flips combine?"],
    solution=_solution_dropout_spread,
    mistakes=[
        Mistake(_with_prob(lambda w, v, p: p * (1 - p) * w.pow(2) @ v.pow(2)),
                "output 2: that is the variance of the coin flip alone. A survivor is also scaled up by 1/(1 - p): "
                "how does multiplying a random number by a constant change its variance?"),
        Mistake(_with_prob(lambda w, v, p: w.pow(2) @ v.pow(2) / (1 - p)),
                "output 2: that is the mean of the squares. The variance subtracts the square of the mean."),
        Mistake(_with_prob(lambda w, v, p: p / (1 - p) * (w @ v).pow(2)),
                "output 2: you squared the whole sum. The terms a_ij v_j are independent: their variances add, "
                "term by term."),
        Mistake(_with_prob(lambda w, v, p: p / (1 - p) * w.pow(2) @ v),
                "output 2: the value v_jd multiplies a random weight, so it enters the variance squared."),
        Mistake(_with_prob(lambda w, v, p: p / (1 - p) * w @ v.pow(2)),
                "output 2: the weight a_ij is the size of the random term, so it enters the variance squared."),
        Mistake(_with_prob(lambda w, v, p: (p / (1 - p) * w.pow(2) @ v.pow(2)).sqrt()),
                "output 2: that is the standard deviation; the task asks for the variance (its square)."),
        Mistake(_with_variance(lambda w, p: torch.full_like(w[..., 0], p)),
                "output 1: z_i is all zeros only if ALL of the row's non-zero weights are dropped, not just one."),
        Mistake(_with_variance(lambda w, p: _prob_all_dropped(w, p, w.shape[-1])),
                "output 1: you counted every column. The weights above the diagonal are already 0: dropped or "
                "not, they add nothing. Count only the non-zero weights."),
        Mistake(_with_variance(lambda w, p: _prob_all_dropped(w, 1 - p)),
                "output 1: that is the probability that every weight SURVIVES. p is the probability of being "
                "dropped."),
        Mistake(_with_variance(lambda w, p: 1 - _prob_all_dropped(w, 1 - p)),
                "output 1: that is the probability that at least one weight is dropped; z_i is all zeros only when "
                "all of them are."),
    ],
)


# --- 2. causal attention with dropout, written yourself -------------------------------------------------------
def _attention_cases(g: torch.Generator) -> list[Case]:
    def qkv(batch_size, num_tokens, d_k, d_v):
        return (randn(g, batch_size, num_tokens, d_k), randn(g, batch_size, num_tokens, d_k),
                randn(g, batch_size, num_tokens, d_v))

    # The deterministic cases come first, so a slip in the attention itself is named before any statistics.
    return [Case("one sequence of 6 tokens, d_k=4, d_v=3, p=0.0", (*qkv(1, 6, 4, 3), 0.0)),
            Case("a batch of 2 sequences of 6 tokens, p=0.5, training=False", (*qkv(2, 6, 4, 3), 0.5),
                 {"training": False}),
            Case("a batch of 4 sequences of 50 tokens, d_k=8, d_v=4, p=0.5", (*qkv(4, 50, 8, 4), 0.5)),
            Case("one sequence of 100 tokens, d_k=8, d_v=4, p=0.1", (*qkv(1, 100, 8, 4), 0.1))]


def _reference_dropout_attention(queries, keys, values, p, training=True):
    mask = causal_mask(queries.shape[-2])
    return scaled_dot_product_attention(queries, keys, values, mask=mask, dropout_p=p, training=training)


def _solution_dropout_attention(queries, keys, values, p, training=True):
    # queries, keys: (B, T, d_k); values: (B, T, d_v)
    num_tokens, d_k = queries.shape[-2], keys.shape[-1]
    attn_scores = queries @ keys.transpose(-2, -1)                 # (B, T, d_k) @ (B, d_k, T) -> (B, T, T)
    future = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    attn_scores = attn_scores.masked_fill(future, float("-inf"))   # hide the future before the softmax
    attn_weights = torch.softmax(attn_scores / d_k**0.5, dim=-1)   # (B, T, T), rows sum to 1
    if training:                                                   # dropout only while training
        keep = torch.rand_like(attn_weights) >= p                  # one fresh coin flip per weight
        attn_weights = attn_weights * keep / (1 - p)
    context_vecs = attn_weights @ values                           # (B, T, T) @ (B, T, d_v) -> (B, T, d_v)
    return context_vecs, attn_weights


def _attention_mistake(weights_of):
    """A known mistake in the weights (no dropout: it is recognised on the deterministic cases)."""
    def wrong(queries, keys, values, p, training=True):
        attn_weights = weights_of(queries, keys)
        return attn_weights @ values, attn_weights
    return wrong


def _scores(queries, keys):
    return queries @ keys.transpose(-2, -1)


def _masked(attn_scores):
    return attn_scores.masked_fill(causal_mask(attn_scores.shape[-1]), float("-inf"))


def _one_flip_per(dropped: torch.Tensor, usable: torch.Tensor) -> str | None:
    """A mask drawn once per key, per query or per batch, instead of once per weight."""
    free = dropped | ~usable  # where a shared flip would also be "dropped"
    if bool((dropped.any(dim=-2) == free.all(dim=-2)).all()):
        return ("every query dropped the same keys: your mask has one coin flip per key, shared by all queries. "
                "Draw one for every weight (the shape of the weights).")
    if bool((dropped.any(dim=-1) == free.all(dim=-1)).all()):
        return ("each row is either kept whole or dropped whole: your mask has one coin flip per query. Draw one "
                "for every weight (the shape of the weights).")
    if dropped.shape[0] > 1 and bool((dropped == dropped[:1]).all()):
        return ("every sequence of the batch got the same mask: draw one coin flip for every weight of every "
                "sequence (the shape of the weights).")
    return None


def _dropout_attention_properties(got, case: Case, function) -> str | None:
    context_vecs, weights = got
    queries, keys, values, p = case.args
    if not case.kwargs.get("training", True):
        return ("with training=False dropout is switched off (what eval() does): return the weights and context "
                "vectors with nothing dropped or rescaled.")
    clean = _reference_dropout_attention(queries, keys, values, p, training=False)[1]  # A without dropout
    usable = clean != 0
    if bool((weights[~usable] != 0).any()):
        return "a weight above the diagonal is not 0: the future must stay hidden, dropout or not."
    kept = weights != 0
    unscaled = softmax_stable(_masked(_scores(queries, keys)))
    survivors = weights[kept].double()
    if not torch.allclose(survivors, clean[kept].double() / (1 - p), rtol=1e-4, atol=1e-6):
        if torch.allclose(survivors, unscaled[kept].double() / (1 - p), rtol=1e-4, atol=1e-6):
            return "the weights that survive are softmax(S) without the division by sqrt(d_k), scaled up."
        if torch.allclose(survivors, clean[kept].double(), rtol=1e-4, atol=1e-6):
            return "the surviving weights are unchanged. Rescale them so that each weight keeps its average."
        if torch.allclose(weights.sum(dim=-1), torch.ones_like(weights[..., 0]), atol=1e-4):
            return ("every row of your weights still sums to 1, and the survivors are not A's weights scaled up: "
                    "was the dropout applied before the softmax? Dropout acts on the weights after it.")
        ratio = (survivors / clean[kept].double()).median().item()
        return (f"a weight that survives must be exactly a / (1 - p) = a x {1 / (1 - p):.3f}, with a the causal "
                f"softmax weight; yours are about a x {ratio:.3f}.")
    if not torch.allclose(context_vecs, weights @ values, rtol=1e-4, atol=1e-5):
        if torch.allclose(context_vecs, clean @ values, rtol=1e-4, atol=1e-5):
            return ("your context vectors come from the weights before dropout. The dropped-out weights are the "
                    "ones that multiply the values.")
        return "the context vectors are not the weights you return times the values."
    dropped = ~kept & usable
    problem = _one_flip_per(dropped, usable)  # before the fraction: a shared flip also makes the fraction wobble
    if problem:
        return problem
    fraction = dropped.double().sum().item() / int(usable.sum())
    if abs(fraction - p) > 0.03:
        if abs(fraction - (1 - p)) <= 0.03:
            return f"you dropped {fraction:.0%} of the weights: p is the probability of being DROPPED, not kept."
        return f"you dropped {fraction:.1%} of the weights; with p={p} it should be close to {p:.0%}."
    args, kwargs = case.fresh_args()
    again = function(*args, **kwargs)
    if isinstance(again, tuple) and len(again) == 2 and torch.equal(again[1] == 0, weights == 0):
        return ("two calls dropped exactly the same weights. Dropout draws a new mask on every call; does your "
                "function seed a generator of its own?")
    return None


dropout_attention = FunctionExercise(
    "Causal attention with dropout",
    "write dropout_attention(queries, keys, values, p, training=True) for a batch (B, T, d_k), (B, T, d_k), "
    "(B, T, d_v): causal scaled dot-product attention with dropout on its weights, returning (context_vecs, "
    "attn_weights), the weights after dropout. In training, drop each weight with probability p (a new draw on every "
    "call) and rescale the survivors; with training=False, no dropout. Do not call PyTorch's dropout.",
    reference=_reference_dropout_attention,
    cases=_attention_cases,
    hint=["Notebook 04's causal attention and section 4's two lines, put together: in which order do the scores, "
          "the mask, the softmax, the dropout and the values come?",
          "You need one random number per weight, new on every call. Which torch function gives uniform numbers "
          "in [0, 1) shaped like a tensor you already have? How likely is such a number to be below p?",
          "What did eval() do to CausalAttention's weights in section 6? training=False asks for the same."],
    solution=_solution_dropout_attention,
    mistakes=[
        Mistake(_attention_mistake(lambda q, k: softmax_stable(_masked(_scores(q, k)))),
                "the weights skip the division of the scores by sqrt(d_k)."),
        Mistake(_attention_mistake(lambda q, k: softmax_stable(_scores(q, k) / k.shape[-1] ** 0.5)),
                "no weight is hidden: every query sees the keys after it. Mask the future before the softmax."),
        Mistake(_attention_mistake(lambda q, k: softmax_stable(_scores(q, k) / k.shape[-1] ** 0.5)
                                   * ~causal_mask(q.shape[-2])),
                "you zeroed the future after the softmax, so the rows no longer sum to 1. Hide the scores with -inf "
                "before the softmax (notebook 04)."),
        Mistake(_attention_mistake(lambda q, k: torch.softmax(_masked(_scores(q, k)) / k.shape[-1] ** 0.5, dim=-2)),
                "the softmax runs down the columns (over queries). Each query's row of weights must sum to 1."),
    ],
    properties=_dropout_attention_properties,
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
    "attention_map(model, batch) draws a model's attention weights (B, T, T) now and then during training, and is "
    "also used on finished models. Two calls in a row, with no training step between them, give different "
    "pictures. Fix it; training must carry on after a picture exactly as it would have without it.",
    reference=_reference_attention_map,
    cases=_model_cases,
    hint=["Call buggy_attention_map twice on the same CausalAttention(3, 2, 6, dropout=0.5) and compare where the "
          "zeros are. Which part of the module makes them, and what switches it off (section 6)?",
          "A finished model comes in one mode, a model in training in another. Which attribute tells you the mode "
          "a model came in?"],
    solution=_solution_attention_map,
    buggy=buggy_attention_map,
    bug_message=_STILL_DROPPING,
    properties=_map_properties,
    rules=[_mode_kept],
)
