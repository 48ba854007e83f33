"""Exercises for notebook 04: causal attention.

1. ``causal_mask``: build the mask from token positions (no ``triu``/``tril``, no loop): think in indices.
2. ``influence``: a causality check that needs no weights: which outputs change when one token changes?
3. ``hidden_yet_weighted`` (spot the bug): masked causal weights that still put weight on the future.
"""

from __future__ import annotations

import torch

from ..masks import causal_mask as _causal_mask
from ..modules import CausalAttention
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids, no_loops

__all__ = ["causal_mask", "influence", "hidden_yet_weighted"]


# --- 1. the mask from positions ------------------------------------------------------------------------
def _size_cases(g: torch.Generator) -> list[Case]:
    return [Case(f"num_tokens={n}", (n,)) for n in (4, 1, 6)]


def _solution_causal_mask(num_tokens):
    positions = torch.arange(num_tokens)              # (T,): 0, 1, ..., T-1
    return positions[None, :] > positions[:, None]    # (1, T) > (T, 1) -> (T, T): key j comes after query i


def _hides_the_past(num_tokens):
    positions = torch.arange(num_tokens)
    return positions[:, None] > positions[None, :]


def _hides_itself_too(num_tokens):
    positions = torch.arange(num_tokens)
    return positions[None, :] >= positions[:, None]


def _marks_what_is_seen(num_tokens):
    positions = torch.arange(num_tokens)
    return positions[None, :] <= positions[:, None]


causal_mask = FunctionExercise(
    "Causal mask from positions",
    "write causal_mask(num_tokens) returning a bool tensor (num_tokens, num_tokens) that is True where query i "
    "must not see key j, built from the token positions: without torch.triu or torch.tril and without a "
    "Python loop.",
    reference=_causal_mask,
    cases=_size_cases,
    hint=["Row i is a query, column j a key, both numbered from 0. Say in words when key j is in the future of "
          "query i, then write that as a comparison of two numbers.",
          "torch.arange numbers the positions. A column of positions compared with a row of positions "
          "broadcasts to one answer per (query, key) pair: which one is the row, which one the column?"],
    solution=_solution_causal_mask,
    mistakes=[
        Mistake(_hides_the_past,
                "your mask hides the keys BEFORE each query (the past) and shows the future: the comparison "
                "is the right one, but rows and columns are swapped. Rows are queries, columns are keys."),
        Mistake(_hides_itself_too,
                "your mask also hides the diagonal, so a token cannot attend to itself, and query 0 sees "
                "nothing at all (a row of -inf becomes nan after the softmax). Hide only the keys strictly "
                "after the query."),
        Mistake(_marks_what_is_seen,
                "your mask is True for the keys a query may SEE. In this course True means hide: you need the "
                "opposite."),
    ],
    rules=[no_loops(),
           forbids("torch.triu", "torch.tril", "torch.Tensor.triu", "torch.Tensor.tril", "helpers.causal_mask",
                   "helpers.masks.causal_mask",
                   why="This exercise is about building it from the positions."),
           ],
)


# --- 2. who influences whom: a causality check that needs only the outputs ----------------------------------
class _Attention:
    """A layer to examine: ``attention(inputs)`` maps ``(B, T, d_in)`` to ``(B, T, d_out)``.

    ``_pattern(T)`` is the true ``(T, T)`` influence matrix (True where output i depends on token j), known from
    how the layer masks; the checker's reference reads it, the learner has to find it by experiment.
    """

    def __init__(self, name: str, function, pattern):
        self.name, self._function, self._pattern = name, function, pattern

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        return self._function(inputs)

    def __repr__(self) -> str:
        return f"<attention layer: {self.name}>"


def _masked_attention(W_query, W_key, W_value, hide):
    """Attention whose mask is ``hide(num_tokens)`` (True = hide); ``hide=None`` leaves every key visible."""
    def attention(inputs):
        queries, keys, values = inputs @ W_query, inputs @ W_key, inputs @ W_value   # (B, T, d) each
        attn_scores = queries @ keys.transpose(1, 2)                                 # (B, T, T)
        if hide is not None:
            attn_scores = attn_scores.masked_fill(hide(inputs.shape[1]), float("-inf"))
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        return attn_weights @ values                                                 # (B, T, d_out)
    return attention


def _sees(num_tokens, ahead=0, last_key_open=False):
    """The true influence matrix: output i depends on tokens 0..i+ahead (and on the last one if it is open)."""
    positions = torch.arange(num_tokens)
    seen = positions[None, :] <= positions[:, None] + ahead
    if last_key_open:
        seen[:, -1] = True
    return seen


def _influence_cases(g: torch.Generator) -> list[Case]:
    def weights(d_in=4, d_out=3):
        return randn(g, d_in, d_out), randn(g, d_in, d_out), randn(g, d_in, d_out)

    with torch.random.fork_rng(devices=[]):   # the module's own seed; the learner's random stream stays as it was
        torch.manual_seed(int(torch.randint(0, 2 ** 31 - 1, (1,), generator=g)))
        module = CausalAttention(d_in=4, d_out=3, context_length=8, dropout=0.0).eval()
    with_last_key_open = _masked_attention(
        *weights(), hide=lambda n: _causal_mask(n) & ~torch.eye(n, dtype=torch.bool)[-1])  # the last column open
    cases = [
        ("helpers.CausalAttention", module, lambda n: _sees(n), randn(g, 2, 5, 4)),
        ("the layer with the bug of section 4 (masked copy dropped)", _masked_attention(*weights(), hide=None),
         lambda n: torch.ones(n, n, dtype=torch.bool), randn(g, 2, 4, 4)),
        ("a layer whose mask is one token off (each query sees one key ahead)",
         _masked_attention(*weights(), hide=lambda n: torch.ones(n, n, dtype=torch.bool).triu(2)),
         lambda n: _sees(n, ahead=1), randn(g, 3, 6, 4)),
        ("a layer whose mask leaves the last key visible to every query", with_last_key_open,
         lambda n: _sees(n, last_key_open=True), randn(g, 2, 5, 4)),
        ("helpers.CausalAttention", module, lambda n: _sees(n), randn(g, 1, 1, 4)),
    ]
    return [Case(f"{name} on {inputs.shape[0]} sequence(s) of {inputs.shape[1]} token(s)",
                 (_Attention(name, function, pattern), inputs)) for name, function, pattern, inputs in cases]


def _reference_influence(attention, inputs):
    return attention._pattern(inputs.shape[1])


def _solution_influence(attention, inputs):
    num_tokens = inputs.shape[1]
    with torch.no_grad():
        before = attention(inputs)                                    # (B, T, d_out)
        influence = torch.zeros(num_tokens, num_tokens, dtype=torch.bool)
        for j in range(num_tokens):                                   # change token j, and only token j
            changed = inputs.clone()
            changed[:, j] += 1.0
            after = attention(changed)                                # (B, T, d_out)
            moved = ~torch.isclose(after, before)                     # (B, T, d_out)
            influence[:, j] = moved.any(dim=-1).any(dim=0)            # (T,): the outputs that changed
    return influence


def _changes_from_j_on(attention, inputs):
    """A known mistake: change token j AND every token after it, so column j answers a different question."""
    num_tokens = inputs.shape[1]
    with torch.no_grad():
        before = attention(inputs)
        influence = torch.zeros(num_tokens, num_tokens, dtype=torch.bool)
        for j in range(num_tokens):
            changed = inputs.clone()
            changed[:, j:] += 1.0
            influence[:, j] = (~torch.isclose(attention(changed), before)).any(dim=-1).any(dim=0)
    return influence


influence = FunctionExercise(
    "Who influences whom",
    "write influence(attention, inputs) for a layer attention(inputs) -> (batch_size, num_tokens, d_out) and inputs "
    "(batch_size, num_tokens, d_in): return a bool tensor (num_tokens, num_tokens) that is True at [i, j] when "
    "changing token j changes output i. The layer is a black box: you can only call it.",
    reference=_reference_influence,
    cases=_influence_cases,
    hint=["Causality is a promise about behaviour: output i must not move, whatever happens to the tokens after "
          "i. With nothing but the function in hand, how could you find out whether output i depends on token j?",
          "Run the layer once as it is. Then disturb one token at a time, by an amount you would notice, run it "
          "again and see which output rows moved: each token you disturb fills one column.",
          "Compare with a tolerance (torch.isclose) or exactly; either works here. Reduce over the batch and over "
          "the features so that one True/False is left per output row."],
    solution=_solution_influence,
    mistakes=[
        Mistake(lambda attention, inputs: _solution_influence(attention, inputs).T,
                "rows and columns are swapped: row i is output i, column j the token you changed. A causal layer "
                "has nothing ABOVE the diagonal."),
        Mistake(_changes_from_j_on,
                "column j should say whether output i depends on token j alone, but you changed token j and every "
                "token after it. Change one token at a time."),
        Mistake(lambda attention, inputs: _solution_influence(attention, inputs)
                & _causal_mask(inputs.shape[1]),
                "your matrix is False on and below the diagonal, but output i depends on token i and the tokens "
                "before it: fill in the whole matrix, not only the future."),
    ],
)


# --- 3. spot the bug: hiding with a zero -------------------------------------------------------------------
def _score_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("scaled scores of 6 tokens", (randn(g, 6, 6),)),
        Case("a batch of 2 sequences of 4 tokens", (randn(g, 2, 4, 4, scale=2.0),)),
        Case("a single token", (randn(g, 1, 1),)),
    ]


def _reference_causal_weights(scaled_scores):
    hidden = _causal_mask(scaled_scores.shape[-1], device=scaled_scores.device)
    return torch.softmax(scaled_scores.masked_fill(hidden, float("-inf")), dim=-1)


def buggy_causal_weights(scaled_scores):
    # scaled_scores: S / sqrt(d_k), already scaled; shape (..., num_tokens, num_tokens)
    num_tokens = scaled_scores.shape[-1]
    ones = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=scaled_scores.device)
    future = torch.triu(ones, diagonal=1)
    scaled_scores = scaled_scores.masked_fill(future, 0.0)   # hide the future
    return torch.softmax(scaled_scores, dim=-1)


def _solution_causal_weights(scaled_scores):
    num_tokens = scaled_scores.shape[-1]
    ones = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=scaled_scores.device)
    future = torch.triu(ones, diagonal=1)
    scaled_scores = scaled_scores.masked_fill(future, float("-inf"))   # exp(-inf) = 0: no weight on the future
    return torch.softmax(scaled_scores, dim=-1)


def _scaled_twice(scaled_scores):
    """A plausible over-fix: mask right, then divide by a square root once more."""
    hidden = _causal_mask(scaled_scores.shape[-1], device=scaled_scores.device)
    masked = scaled_scores.masked_fill(hidden, float("-inf"))
    return torch.softmax(masked / scaled_scores.shape[-1] ** 0.5, dim=-1)


hidden_yet_weighted = SpotTheBug(
    "Spot the bug: hidden, yet weighted",
    "causal_weights(scaled_scores) should return causal attention weights for scores that are already divided "
    "by sqrt(d_k), shape (..., num_tokens, num_tokens). It runs, every row sums to 1, and yet the keys in each "
    "query's future still get weight. Find the bug and write the fixed function.",
    reference=_reference_causal_weights,
    cases=_score_cases,
    hint=["Take query 0 of a 3-token sentence with scores [1, 2, 3]. Work out its weights by hand, as this "
          "code computes them.",
          "What does the softmax turn the value written into the hidden cells into, and what should a hidden "
          "key receive?"],
    solution=_solution_causal_weights,
    buggy=buggy_causal_weights,
    bug_message="the hidden scores are set to 0, and the softmax turns a score of 0 into exp(0) = 1 before "
                "normalising: the future keys still get weight. A hidden score must give exactly 0 after the "
                "softmax.",
    mistakes=[
        Mistake(lambda s: torch.softmax(s, dim=-1).masked_fill(_causal_mask(s.shape[-1]), 0.0),
                "now the future weights are 0, but the rows no longer sum to 1: zeroing after the softmax "
                "needs a renormalisation. Mask the scores before the softmax instead."),
        Mistake(lambda s: torch.softmax(s, dim=-1),
                "nothing is masked any more: every query sees the future."),
        Mistake(_scaled_twice,
                "the future is hidden now, but the scores arrive already divided by sqrt(d_k): dividing them "
                "again changes every weight. Fix only the masking."),
    ],
)
