"""Exercises for notebook 04: causal attention.

1. ``influence``: a causality check that needs no weights: which outputs change when one token changes?
2. ``causal_on_paper`` (spot the bug): the weights of later keys are set to 0 after the softmax, without
   renormalising. No weight lies above the diagonal, yet every output depends on the later keys through the sum
   each row was divided by. A masking bug the lesson does not show, which its ``check_no_future`` misses and
   exercise 1's test catches; the obvious repair (divide each row by its new sum) is right on paper and gives nan
   on large scores, which the checker's inputs include.
"""

from __future__ import annotations

import torch

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask as _causal_mask
from ..modules import CausalAttention
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids, no_loops

__all__ = ["influence", "causal_on_paper"]


# --- 1. who influences whom: a causality check that needs only the outputs ----------------------------------
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
        ("the layer with the bug of section 5 (masked copy dropped)", _masked_attention(*weights(), hide=None),
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
    "changing token j changes output i. The layer is a black box: you can only call it. Any visible change will do "
    "(add 1 to its features); compare exactly or with torch.isclose; output i has changed if it changed in any "
    "sentence of the batch. The layers are deterministic (no dropout).",
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
        Mistake(lambda attention, inputs: _reference_influence(attention, inputs).T,
                "rows and columns are swapped: row i is output i, column j the token you changed. A causal layer "
                "has nothing ABOVE the diagonal."),
        Mistake(_changes_from_j_on,
                "column j should say whether output i depends on token j alone, but you changed token j and every "
                "token after it. Change one token at a time."),
        Mistake(lambda attention, inputs: _reference_influence(attention, inputs)
                & _causal_mask(inputs.shape[1]),
                "your matrix is False on and below the diagonal, but output i depends on token i and the tokens "
                "before it: fill in the whole matrix, not only the future."),
    ],
)


# --- not offered in notebook 04 any more (it went from three exercises to two); tests/test_exercises.py still uses it
# as its example of a wrong dtype, so it stays importable as lesson04.causal_mask, outside __all__. -------------
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


# --- 2. spot the bug: weights zeroed after the softmax ---------------------------------------------------------
def _qkv_cases(g: torch.Generator) -> list[Case]:
    def qkv(*lead, num_tokens, d_k=4, d_v=3, scale=1.0):
        return (randn(g, *lead, num_tokens, d_k, scale=scale), randn(g, *lead, num_tokens, d_k, scale=scale),
                randn(g, *lead, num_tokens, d_v))

    very_negative = qkv(2, num_tokens=4, d_k=2)
    very_negative = (very_negative[0].abs() * 40.0, -very_negative[1].abs() * 40.0, very_negative[2])  # scores << 0
    return [
        Case("one sentence of 6 tokens (num_tokens, d_k) = (6, 4), d_v = 3", qkv(num_tokens=6)),
        Case("a batch of 2 sentences of 5 tokens, d_k = 4, d_v = 3", qkv(2, num_tokens=5)),
        Case("a batch of 3 sentences, 2 heads each, (3, 2, 6, 8), d_v = 5", qkv(3, 2, num_tokens=6, d_k=8, d_v=5)),
        Case("a batch of 2 sentences of 4 tokens with large scores (some above 100)",
             qkv(2, num_tokens=4, d_k=4, scale=12.0)),
        Case("a batch of 2 sentences of 4 tokens whose scores are all very negative (below -100)", very_negative),
        Case("a batch of 4 single-token sentences", qkv(4, num_tokens=1, d_k=3, d_v=2)),
    ]


def _reference_causal_attention(queries, keys, values):
    hide = _causal_mask(queries.shape[-2], device=queries.device)
    return scaled_dot_product_attention(queries, keys, values, mask=hide)


def buggy_causal_attention(queries, keys, values):
    # queries, keys: (..., num_tokens, d_k); values: (..., num_tokens, d_v)
    num_tokens, d_k = queries.shape[-2], queries.shape[-1]
    future = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=queries.device).triu(1)
    attn_weights = torch.softmax(queries @ keys.transpose(-2, -1) / d_k**0.5, dim=-1)   # (..., T, T)
    attn_weights = attn_weights.masked_fill(future, 0.0)                                # no weight on a later key
    return attn_weights @ values, attn_weights


def _solution_causal_attention(queries, keys, values):
    # queries, keys: (..., num_tokens, d_k); values: (..., num_tokens, d_v)
    num_tokens, d_k = queries.shape[-2], queries.shape[-1]
    future = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=queries.device).triu(1)
    attn_scores = (queries @ keys.transpose(-2, -1)).masked_fill(future, float("-inf"))   # hide BEFORE the softmax
    attn_weights = torch.softmax(attn_scores / d_k**0.5, dim=-1)   # each row's sum holds only the keys it may see
    return attn_weights @ values, attn_weights


def _zeroed_then(divide_by):
    """The buggy weights, each row then divided by ``divide_by(zeroed weights)``."""
    def attention(queries, keys, values):
        _, zeroed = buggy_causal_attention(queries, keys, values)
        attn_weights = zeroed / divide_by(zeroed)
        return attn_weights @ values, attn_weights
    return attention


def _future_scores_zero(queries, keys, values):
    """Scores of later keys set to 0 (not hidden) before the softmax."""
    future = _causal_mask(queries.shape[-2], device=queries.device)
    attn_scores = (queries @ keys.transpose(-2, -1)).masked_fill(future, 0.0)
    attn_weights = torch.softmax(attn_scores / queries.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ values, attn_weights


causal_on_paper = SpotTheBug(
    "Spot the bug: causal on paper",
    "causal_attention(queries, keys, values) returns (context_vecs, attn_weights). check_no_future finds no weight "
    "above the diagonal, and yet output 0 of a sentence changes when its last token changes: find the bug and "
    "write the fixed function. The code already handles every shape: queries and keys (..., num_tokens, d_k), "
    "values (..., num_tokens, d_v), for one sentence, a batch (batch_size, ...) or a batch of heads "
    "(batch_size, num_heads, ...), and any d_v. Some inputs give scores above 100, others scores that are all "
    "below -100, where float32's exp overflows or underflows: exact on paper is not enough.",
    reference=_reference_causal_attention,
    cases=_qkv_cases,
    hint=["Run the buggy function on one sentence and add up each row of the weights it returns. What should a "
          "row of attention weights add up to?",
          "Output 0 is a_00 v_0. Write a_00 as a fraction: which scores are in its denominator here, and which "
          "should be?",
          "A later key must never enter the sum a weight is divided by. Where in the recipe does that sum form, "
          "and what has to happen to the later keys before it?"],
    solution=_solution_causal_attention,
    buggy=buggy_causal_attention,
    bug_message="each row of weights is made from the scores of every key, later ones included, and only then are "
                "the later weights set to 0. The weights left are still divided by a sum over all keys: the row no "
                "longer sums to 1, and output 0 depends on the last token's key through that sum. The later keys "
                "must be out of the sum when it is taken.",
    mistakes=[
        Mistake(_zeroed_then(lambda w: w.sum(dim=-1, keepdim=True)),
                "each row sums to 1 again, and on paper zeroing then dividing by the new sum gives the right "
                "weights. In floating point it does not: where a later key's score is far larger than the visible "
                "ones, the visible weights underflow to exactly 0 in the first softmax, and the row becomes "
                "0 / 0 = nan. Keep the later keys out of the softmax itself."),
        Mistake(_zeroed_then(lambda w: w.sum(dim=-2, keepdim=True)),
                "you divided each weight by the sum of its column (over the queries), not of its row: the rows "
                "of a weight table must each sum to 1."),
        Mistake(_future_scores_zero,
                "a score of 0 is an ordinary score (e to the 0 is 1), not a hidden one: the later keys still get "
                "weight, and output 0 still depends on them. A hidden key's score must give a weight of exactly 0."),
    ],
)

# The exercise's first name, which told the learner where its first bug was; kept so that older copies of notebook 04
# and the grade tables that recorded it still resolve.
axis_leak = causal_on_paper
