"""Exercises for notebook 03: trainable queries, keys and values."""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ._inputs import journey_inputs, randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["project", "self_attention", "scale_by_global", "global_weights"]

# The notebook's walk-through uses d_out_kq = 2; the first bug below reads a global of that name.
d_out_kq = 2


def _weights_cases(g: torch.Generator) -> list[Case]:
    def case(description, num_tokens, d_in, d_kq, d_v, inputs=None):
        inputs = randn(g, num_tokens, d_in) if inputs is None else inputs
        return Case(description, (inputs, randn(g, d_in, d_kq), randn(g, d_in, d_kq), randn(g, d_in, d_v)))
    return [
        case("the journey sentence, d_out_kq=2, d_out_v=4", 6, 3, 2, 4, journey_inputs()),
        case("5 random tokens, d_in=4, d_out_kq=3, d_out_v=3", 5, 4, 3, 3),
        case("7 random tokens, d_in=8, d_out_kq=16, d_out_v=2", 7, 8, 16, 2),
    ]


def _reference_project(inputs, W_query, W_key, W_value):
    return inputs @ W_query, inputs @ W_key, inputs @ W_value


def _reference_attention(inputs, W_query, W_key, W_value):
    queries, keys, values = _reference_project(inputs, W_query, W_key, W_value)
    return scaled_dot_product_attention(queries, keys, values)[0]


# --- 1. projections ---------------------------------------------------------------------------------
def _solution_project(inputs, W_query, W_key, W_value):
    queries = inputs @ W_query   # (T, d_in) @ (d_in, d_out_kq) -> (T, d_out_kq)
    keys = inputs @ W_key        # (T, d_in) @ (d_in, d_out_kq) -> (T, d_out_kq)
    values = inputs @ W_value    # (T, d_in) @ (d_in, d_out_v)  -> (T, d_out_v)
    return queries, keys, values


project = FunctionExercise(
    "Queries, keys and values",
    "write project(inputs, W_query, W_key, W_value) returning (queries, keys, values): every token of `inputs` "
    "(num_tokens, d_in) projected by each (d_in, d_out) weight matrix.",
    reference=_reference_project,
    cases=_weights_cases,
    hint="each projection is one matrix product with the tokens as rows: inputs @ W.",
    solution=_solution_project,
    mistakes=[
        Mistake(lambda x, wq, wk, wv: (x @ wk, x @ wq, x @ wv),
                "your queries and keys are swapped. Return them in the order (queries, keys, values)."),
        Mistake(lambda x, wq, wk, wv: (x @ wq, x @ wq, x @ wv),
                "your keys were computed with W_query. Keys have their own matrix, W_key: that is what makes "
                "the scores asymmetric."),
    ],
)


# --- 2. self-attention with trainable weights --------------------------------------------------------
def _solution_self_attention(inputs, W_query, W_key, W_value):
    queries, keys, values = inputs @ W_query, inputs @ W_key, inputs @ W_value
    attn_scores = queries @ keys.T                                        # (T, T)
    attn_weights = torch.softmax(attn_scores / math.sqrt(keys.shape[-1]), dim=-1)
    return attn_weights @ values                                          # (T, d_out_v)


self_attention = FunctionExercise(
    "Self-attention with trainable weights",
    "write self_attention(inputs, W_query, W_key, W_value) returning the context vectors "
    "softmax(Q Kᵀ / sqrt(d_k)) V, shape (num_tokens, d_out_v).",
    reference=_reference_attention,
    cases=_weights_cases,
    hint="project first; the scale uses the keys' width, keys.shape[-1]; the weighted sum uses the values.",
    solution=_solution_self_attention,
    mistakes=[
        Mistake(lambda x, wq, wk, wv: torch.softmax((x @ wq) @ (x @ wk).T / math.sqrt(wk.shape[1]), dim=-1) @ x,
                "you summed the inputs instead of the values: the last product must use inputs @ W_value."),
        Mistake(lambda x, wq, wk, wv: torch.softmax((x @ wq) @ (x @ wk).T / math.sqrt(x.shape[1]), dim=-1)
                @ (x @ wv),
                "you scaled by sqrt(d_in), the width of the inputs. Scale by the width of the keys, d_out_kq."),
        Mistake(lambda x, wq, wk, wv: torch.softmax((x @ wq) @ (x @ wk).T, dim=-1) @ (x @ wv),
                "you did not scale the scores by 1/sqrt(d_k) before the softmax."),
    ],
)


# --- 3. spot the bug: a scale read from a global ---------------------------------------------------
def buggy_self_attention(inputs, W_query, W_key, W_value):
    queries, keys, values = inputs @ W_query, inputs @ W_key, inputs @ W_value
    attn_scores = queries @ keys.T
    attn_weights = torch.softmax(attn_scores / d_out_kq**0.5, dim=-1)
    return attn_weights @ values


scale_by_global = SpotTheBug(
    "Spot the bug: the scale",
    "this self-attention function gives the right answer for the notebook's example, yet is wrong for other "
    "sizes. Find out why and fix it.",
    reference=_reference_attention,
    cases=_weights_cases,
    hint="try it with W_key of width 3: which number in the function does not follow the inputs?",
    solution=_solution_self_attention,
    buggy=buggy_self_attention,
    bug_message="the scale still comes from the global d_out_kq = 2, not from the keys this call computed. "
                "It is only right when the keys happen to be 2 wide: use keys.shape[-1].",
)


# --- 4. spot the bug: the weights of another call -----------------------------------------------------
attn_weights = torch.softmax(journey_inputs() @ journey_inputs().T, dim=-1)  # a global left over from earlier cells


def _same_size_cases(g: torch.Generator) -> list[Case]:
    # Six tokens, like the global, so the bug runs without an error and must be caught by its values.
    return [Case(f"6 random tokens, d_in=3, d_out={d}", (randn(g, 6, 3), randn(g, 3, d), randn(g, 3, d),
                                                         randn(g, 3, d))) for d in (2, 4)]


def buggy_context(inputs, W_query, W_key, W_value):
    queries, keys, values = inputs @ W_query, inputs @ W_key, inputs @ W_value
    weights = torch.softmax(queries @ keys.T / keys.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ values


global_weights = SpotTheBug(
    "Spot the bug: whose weights?",
    "this function computes attention weights and then does not use them. It runs, because the notebook "
    "has a variable of the same shape lying around. Fix it.",
    reference=_reference_attention,
    cases=_same_size_cases,
    hint="read the last line: where does the tensor it multiplies come from?",
    solution=_solution_self_attention,
    buggy=buggy_context,
    bug_message="the last line uses attn_weights, a global from earlier cells, instead of the `weights` this "
                "call computed. Every input then gets the same mixing pattern.",
)
