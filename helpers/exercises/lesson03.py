"""Exercises for notebook 03: trainable queries, keys and values.

1. ``shapes``: predict the shape of every tensor of cross-attention over a batch (the lesson prints only
   self-attention on one sequence).
2. ``self_attention``: the whole layer, for one sequence or a batch of sequences, without a loop and without a
   ready-made attention function.
3. ``cross_attention``: spot the bug in a cross-attention function (queries from one sequence, keys and values
   from another), a case the lesson names but does not code.
"""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ._inputs import journey_inputs, randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids, no_loops

__all__ = ["shapes", "self_attention", "cross_attention"]


# --- 1. choose the shapes: cross-attention over a batch ---------------------------------------------
_NAMES = ("queries", "keys", "values", "attn_scores", "attn_weights", "context_vecs")


def _reference_shapes(batch_size, num_queries, num_kv, d_in, d_k, d_v):
    x_q, x_kv = torch.zeros(batch_size, num_queries, d_in), torch.zeros(batch_size, num_kv, d_in)
    queries, keys = x_q @ torch.zeros(d_in, d_k), x_kv @ torch.zeros(d_in, d_k)
    values = x_kv @ torch.zeros(d_in, d_v)
    context_vecs, attn_weights = scaled_dot_product_attention(queries, keys, values)
    attn_scores = queries @ keys.transpose(-2, -1)
    return tuple(tuple(t.shape) for t in (queries, keys, values, attn_scores, attn_weights, context_vecs))


def _shape_cases(g: torch.Generator) -> list[Case]:
    del g  # the sizes are chosen, not drawn: all six differ within a case, so no swap goes unnoticed
    sizes = [(2, 4, 7, 3, 5, 6), (3, 6, 2, 8, 4, 9), (5, 1, 3, 2, 7, 4)]
    return [Case(f"batch_size={b}, num_queries={tq}, num_kv={tkv}, d_in={d_in}, d_k={d_k}, d_v={d_v}",
                 (b, tq, tkv, d_in, d_k, d_v)) for b, tq, tkv, d_in, d_k, d_v in sizes]


def _solution_shapes(batch_size, num_queries, num_kv, d_in, d_k, d_v):
    queries = (batch_size, num_queries, d_k)           # one query per token of x_q
    keys = (batch_size, num_kv, d_k)                   # one key per token of x_kv, as wide as a query
    values = (batch_size, num_kv, d_v)                 # one value per token of x_kv, a width of its own
    attn_scores = (batch_size, num_queries, num_kv)    # one score per (query token, key token) pair
    attn_weights = (batch_size, num_queries, num_kv)   # softmax keeps the shape
    context_vecs = (batch_size, num_queries, d_v)      # one mix of values per query token
    return queries, keys, values, attn_scores, attn_weights, context_vecs


def _shapes_with(**changed):
    def wrong(batch_size, num_queries, num_kv, d_in, d_k, d_v):
        right = dict(zip("QKVSAZ", _solution_shapes(batch_size, num_queries, num_kv, d_in, d_k, d_v)))
        sizes = {"B": batch_size, "Tq": num_queries, "Tkv": num_kv, "d_in": d_in, "d_k": d_k, "d_v": d_v}
        right.update({name: tuple(sizes[s] for s in dims) for name, dims in changed.items()})
        return tuple(right.values())
    return wrong


shapes = FunctionExercise(
    "Choose the shapes",
    "write shapes(batch_size, num_queries, num_kv, d_in, d_k, d_v) returning the shapes of (queries, keys, values, "
    "attn_scores, attn_weights, context_vecs) of cross-attention over a batch: x_q (batch_size, num_queries, d_in) "
    "asks, x_kv (batch_size, num_kv, d_in) is looked up. Each shape is a tuple such as (2, 4, 5).",
    reference=_reference_shapes,
    cases=_shape_cases,
    hint=["Start from the one-sequence self-attention shapes of the lesson. Which of them count the tokens that "
          "ask, and which count the tokens that are looked up?",
          "A batch puts one more dimension in front of every tensor. A score compares one token that asks with "
          "one token that is looked up."],
    solution=_solution_shapes,
    mistakes=[
        Mistake(_shapes_with(S=("B", "Tq", "Tq"), A=("B", "Tq", "Tq")),
                "your scores compare the queries with each other. Each score pairs a token that asks (x_q) with a "
                "token that is looked up (x_kv)."),
        Mistake(_shapes_with(S=("B", "Tkv", "Tkv"), A=("B", "Tkv", "Tkv")),
                "your scores pair the tokens of x_kv with each other. Each row belongs to a token that asks."),
        Mistake(_shapes_with(S=("B", "Tkv", "Tq"), A=("B", "Tkv", "Tq")),
                "your scores are transposed: rows are the tokens that ask (queries), columns the tokens looked up."),
        Mistake(_shapes_with(K=("B", "Tq", "d_k"), V=("B", "Tq", "d_v"), S=("B", "Tq", "Tq"), A=("B", "Tq", "Tq")),
                "your keys and values have one row per token of x_q. They describe the tokens that are looked up."),
        Mistake(_shapes_with(Z=("B", "Tkv", "d_v")),
                "you have one context vector per token of x_kv. Who receives a context vector: the tokens that "
                "ask or the tokens that are looked up?"),
        Mistake(_shapes_with(S=("B", "d_k", "d_k"), A=("B", "d_k", "d_k")),
                "your scores are (d_k, d_k) per sequence. There is one score per pair of tokens, whatever the width "
                "of the vectors compared."),
        Mistake(_shapes_with(Z=("B", "Tq", "d_k")),
                "your context vectors have the width of the keys. A context vector is a weighted sum of value "
                "vectors: which width do they have?"),
        Mistake(_shapes_with(Z=("B", "Tq", "d_in")),
                "your context vectors have the width of the inputs. They are mixtures of the values, not of the "
                "inputs."),
        Mistake(_shapes_with(V=("B", "Tkv", "d_k"), Z=("B", "Tq", "d_k")),
                "your values have the width of the keys. Values are never compared with anything, so W_value "
                "may give them their own width, d_v."),
        Mistake(_shapes_with(Q=("Tq", "d_k"), K=("Tkv", "d_k"), V=("Tkv", "d_v"), S=("Tq", "Tkv"),
                             A=("Tq", "Tkv"), Z=("Tq", "d_v")),
                "your shapes are those of one pair of sequences. With a batch, every tensor keeps the batch "
                "dimension in front."),
        Mistake(_shapes_with(Q=("d_in", "d_k"), K=("d_in", "d_k"), V=("d_in", "d_v")),
                "(d_in, d_k) is the shape of a weight matrix. Q, K and V hold one row per token, per sequence."),
    ],
)


# --- inputs shared by exercises 2 -------------------------------------------------------------------
def _weights_cases(g: torch.Generator) -> list[Case]:
    def case(description, num_tokens, d_in, d_kq, d_v, inputs=None):
        inputs = randn(g, num_tokens, d_in) if inputs is None else inputs
        return Case(description, (inputs, randn(g, d_in, d_kq), randn(g, d_in, d_kq), randn(g, d_in, d_v)))
    return [
        case("the journey sentence, d_k=2, d_v=4", 6, 3, 2, 4, journey_inputs()),
        case("5 random tokens, d_in=4, d_k=3, d_v=3", 5, 4, 3, 3),
        case("7 random tokens, d_in=8, d_k=16, d_v=2", 7, 8, 16, 2),
    ]


def _reference_project(inputs, W_query, W_key, W_value):
    return inputs @ W_query, inputs @ W_key, inputs @ W_value


# --- 2. self-attention, for one sequence or a batch --------------------------------------------------
def _attention_cases(g: torch.Generator) -> list[Case]:
    cases = _weights_cases(g)
    for batch_size, num_tokens, d_in, d_k, d_v in [(2, 5, 4, 3, 3), (3, 4, 6, 2, 5)]:
        cases.append(Case(f"a batch of {batch_size} sequences of {num_tokens} tokens, d_in={d_in}, d_k={d_k}, "
                          f"d_v={d_v}",
                          (randn(g, batch_size, num_tokens, d_in), randn(g, d_in, d_k), randn(g, d_in, d_k),
                           randn(g, d_in, d_v))))
    return cases


def _reference_attention(inputs, W_query, W_key, W_value):
    queries, keys, values = _reference_project(inputs, W_query, W_key, W_value)
    return scaled_dot_product_attention(queries, keys, values)[0]


def _solution_self_attention(inputs, W_query, W_key, W_value):
    queries, keys, values = inputs @ W_query, inputs @ W_key, inputs @ W_value  # (..., T, d_k), (..., T, d_v)
    attn_scores = queries @ keys.transpose(-2, -1)      # (..., T, d_k) @ (..., d_k, T) -> (..., T, T)
    attn_weights = torch.softmax(attn_scores / math.sqrt(keys.shape[-1]), dim=-1)
    return attn_weights @ values                        # (..., T, T) @ (..., T, d_v) -> (..., T, d_v)


self_attention = FunctionExercise(
    "Self-attention for one sequence or a batch",
    "write self_attention(inputs, W_query, W_key, W_value) returning the context vectors "
    "softmax(Q Kᵀ / sqrt(d_k)) V. `inputs` is either one sequence (num_tokens, d_in) or a batch "
    "(batch_size, num_tokens, d_in), like the batches the lesson trains on. No Python loop, and no ready-made "
    "attention function (torch's or the course's).",
    reference=_reference_attention,
    cases=_attention_cases,
    hint=["Try your function on one sequence first, then on torch.rand(2, 6, 3): which line stops working, "
          "and what shape does it produce?",
          "A batch adds a dimension in front. What does `.T` do to a tensor with three dimensions? Section 3 "
          "of the lesson names the tool that swaps only the two dimensions of one sequence."],
    solution=_solution_self_attention,
    mistakes=[
        Mistake(lambda x, wq, wk, wv: torch.softmax((x @ wq) @ (x @ wk).transpose(-2, -1) / math.sqrt(wk.shape[1]),
                                                    dim=-1) @ x,
                "you summed the inputs instead of the values: the last product must use the values."),
        Mistake(lambda x, wq, wk, wv: torch.softmax((x @ wq) @ (x @ wk).transpose(-2, -1) / math.sqrt(x.shape[-1]),
                                                    dim=-1) @ (x @ wv),
                "you scaled by sqrt(d_in), the width of the inputs. Scale by the width of the keys."),
        Mistake(lambda x, wq, wk, wv: torch.softmax((x @ wq) @ (x @ wk).transpose(-2, -1), dim=-1) @ (x @ wv),
                "you did not scale the scores by 1/sqrt(d_k) before the softmax."),
        Mistake(lambda x, wq, wk, wv: torch.softmax((x @ wq) @ (x @ wk).transpose(-2, -1)
                                                    / math.sqrt(wk.shape[1]), dim=1) @ (x @ wv),
                "with a batch in front, softmax over dim=1 normalises over the queries, not over the keys: "
                "each row of weights must sum to 1 over the last dimension."),
    ],
    rules=[no_loops(),
           forbids("torch.nn.functional.scaled_dot_product_attention", "helpers.scaled_dot_product_attention",
                   "helpers.attention.scaled_dot_product_attention",
                   why="Write the three steps (scores, weights, mix) yourself.")],
)


# --- 3. spot the bug: cross-attention -----------------------------------------------------------------
def _cross_cases(g: torch.Generator) -> list[Case]:
    def case(num_queries, num_kv, d_in, d_k, d_v):
        return Case(f"{num_queries} query tokens and {num_kv} key/value tokens, d_in={d_in}, d_k={d_k}, d_v={d_v}",
                    (randn(g, num_queries, d_in), randn(g, num_kv, d_in), randn(g, d_in, d_k), randn(g, d_in, d_k),
                     randn(g, d_in, d_v)))
    return [case(6, 6, 3, 2, 4), case(4, 7, 5, 3, 3), case(1, 5, 4, 4, 2)]


def _reference_cross(x_q, x_kv, W_query, W_key, W_value):
    return scaled_dot_product_attention(x_q @ W_query, x_kv @ W_key, x_kv @ W_value)[0]


def buggy_cross_attention(x_q, x_kv, W_query, W_key, W_value):
    queries = x_q @ W_query
    keys = x_kv @ W_key
    values = x_q @ W_value
    attn_scores = queries @ keys.T
    attn_weights = torch.softmax(attn_scores / math.sqrt(keys.shape[-1]), dim=-1)
    return attn_weights @ values


def _solution_cross_attention(x_q, x_kv, W_query, W_key, W_value):
    queries = x_q @ W_query                 # (T_q, d_k): the sequence that asks
    keys = x_kv @ W_key                     # (T_kv, d_k): the sequence that is searched ...
    values = x_kv @ W_value                 # (T_kv, d_v): ... and what it hands back
    attn_scores = queries @ keys.T          # (T_q, T_kv)
    attn_weights = torch.softmax(attn_scores / math.sqrt(keys.shape[-1]), dim=-1)
    return attn_weights @ values            # (T_q, T_kv) @ (T_kv, d_v) -> (T_q, d_v)


cross_attention = SpotTheBug(
    "Spot the bug: cross-attention",
    "in cross-attention the queries come from one sequence, x_q (num_queries, d_in), and the keys and values "
    "from another, x_kv (num_kv, d_in). This function runs when both sequences have the same length, yet its "
    "answer is wrong. Find the bug and fix it; the fixed function must also work when the lengths differ.",
    reference=_reference_cross,
    cases=_cross_cases,
    hint=["Write the shape next to every line, with T_q and T_kv for the two lengths. Which product would fail "
          "if the lengths differed?",
          "Weight a_ij says how much query i takes from token j of which sequence?"],
    solution=_solution_cross_attention,
    buggy=buggy_cross_attention,
    bug_message="your function still has the bug: with two sequences of the same length it runs, but its answer "
                "is wrong. Call it with x_q and x_kv of different lengths and see which line fails.",
    mistakes=[
        Mistake(lambda xq, xkv, wq, wk, wv: scaled_dot_product_attention(xq @ wq, xq @ wk, xkv @ wv)[0],
                "your keys come from x_q. The keys describe the tokens that can be attended to: the tokens of "
                "x_kv."),
        Mistake(lambda xq, xkv, wq, wk, wv: scaled_dot_product_attention(xkv @ wq, xkv @ wk, xkv @ wv)[0],
                "you computed self-attention over x_kv: the queries must come from x_q, one per token that asks."),
    ],
)
