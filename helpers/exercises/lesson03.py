"""Exercises for notebook 03: trainable queries, keys and values.

1. ``shapes``: predict the shape of every tensor of cross-attention over a batch (the lesson prints only
   self-attention on one sequence).
2. ``query_key_matrix``: derive the one ``(d_in, d_in)`` matrix ``W_qk`` behind the scaled scores,
   ``S / sqrt(d_k) = X W_qk X^T`` (the lesson never forms ``W_q W_k^T``).
3. ``cross_attention``: spot the bug in a cross-attention function (queries from one sequence, keys and values
   from another), a case the lesson names but does not code.
"""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["shapes", "query_key_matrix", "cross_attention"]


# --- 1. choose the shapes: cross-attention over a batch ---------------------------------------------
_NAMES = ("queries", "keys", "values", "attn_scores", "attn_weights", "context_vecs")


def _reference_shapes(batch_size, num_tokens_q, num_tokens_kv, d_in, d_k, d_v):
    x_q, x_kv = torch.zeros(batch_size, num_tokens_q, d_in), torch.zeros(batch_size, num_tokens_kv, d_in)
    queries, keys = x_q @ torch.zeros(d_in, d_k), x_kv @ torch.zeros(d_in, d_k)
    values = x_kv @ torch.zeros(d_in, d_v)
    context_vecs, attn_weights = scaled_dot_product_attention(queries, keys, values)
    attn_scores = queries @ keys.transpose(-2, -1)
    return tuple(tuple(t.shape) for t in (queries, keys, values, attn_scores, attn_weights, context_vecs))


def _shape_cases(g: torch.Generator) -> list[Case]:
    del g  # the sizes are chosen, not drawn: all six differ within a case, so no swap goes unnoticed
    sizes = [(2, 4, 7, 3, 5, 6), (3, 6, 2, 8, 4, 9), (5, 1, 3, 2, 7, 4)]
    return [Case(f"batch_size={b}, num_tokens_q={tq}, num_tokens_kv={tkv}, d_in={d_in}, d_k={d_k}, d_v={d_v}",
                 (b, tq, tkv, d_in, d_k, d_v)) for b, tq, tkv, d_in, d_k, d_v in sizes]


def _solution_shapes(batch_size, num_tokens_q, num_tokens_kv, d_in, d_k, d_v):
    # d_in is not in any answer: the projections turn every width d_in into d_k or d_v
    queries = (batch_size, num_tokens_q, d_k)                 # one query per token of x_q
    keys = (batch_size, num_tokens_kv, d_k)                   # one key per token of x_kv, as wide as a query
    values = (batch_size, num_tokens_kv, d_v)                 # one value per token of x_kv, a width of its own
    attn_scores = (batch_size, num_tokens_q, num_tokens_kv)   # one score per (query token, key token) pair
    attn_weights = (batch_size, num_tokens_q, num_tokens_kv)  # softmax keeps the shape
    context_vecs = (batch_size, num_tokens_q, d_v)            # one mix of values per query token
    return queries, keys, values, attn_scores, attn_weights, context_vecs


def _shapes_with(**changed):
    def wrong(batch_size, num_tokens_q, num_tokens_kv, d_in, d_k, d_v):
        right = dict(zip("QKVSAZ", _solution_shapes(batch_size, num_tokens_q, num_tokens_kv, d_in, d_k, d_v)))
        sizes = {"B": batch_size, "Tq": num_tokens_q, "Tkv": num_tokens_kv, "d_in": d_in, "d_k": d_k, "d_v": d_v}
        right.update({name: tuple(sizes[s] for s in dims) for name, dims in changed.items()})
        return tuple(right.values())
    return wrong


shapes = FunctionExercise(
    "Choose the shapes",
    "write shapes(batch_size, num_tokens_q, num_tokens_kv, d_in, d_k, d_v) returning the shapes of (queries, keys, "
    "values, attn_scores, attn_weights, context_vecs) of cross-attention over a batch: x_q "
    "(batch_size, num_tokens_q, d_in) asks, x_kv (batch_size, num_tokens_kv, d_in) is looked up (batch_size is B; "
    "each sequence has its own T). Each shape is a tuple such as (2, 4, 5). Not every argument appears in an answer.",
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


# --- 2. one matrix behind the scores: S / sqrt(d_k) = X W_qk X^T --------------------------------------------------
def _qk_cases(g: torch.Generator) -> list[Case]:
    # d_in and d_k differ in the first case, so a (d_k, d_k) answer or a scale by sqrt(d_in) shows at once
    return [Case(f"W_query and W_key of shape ({d_in}, {d_k})", (randn(g, d_in, d_k), randn(g, d_in, d_k)))
            for d_in, d_k in [(3, 2), (5, 5), (4, 9)]]


def _reference_qk(W_query, W_key):
    # the matrix W_qk for which X W_qk X^T gives the scaled scores of any X
    return W_query @ W_key.transpose(0, 1) / math.sqrt(W_key.shape[1])


def _solution_query_key_matrix(W_query, W_key):
    # S = Q K^T = (X W_q)(X W_k)^T = X (W_q W_k^T) X^T: the two X's stay outside, W_qk sits between them
    d_k = W_key.shape[1]
    return W_query @ W_key.T / math.sqrt(d_k)           # (d_in, d_k) @ (d_k, d_in) -> (d_in, d_in)


query_key_matrix = FunctionExercise(
    "One matrix behind the scores",
    "write query_key_matrix(W_query, W_key) returning the (d_in, d_in) matrix W_qk for which the scaled scores "
    "are S / sqrt(d_k) = X W_qk Xᵀ, for every X of shape (num_tokens, d_in). W_query and W_key are (d_in, d_k), as "
    "in SelfAttention_v1, so d_k is W_key.shape[1].",
    reference=_reference_qk,
    cases=_qk_cases,
    hint=["Put Q = X W_q and K = X W_k into S = Q Kᵀ and use the rule for the transpose of a product of two "
          "matrices.",
          "Both X's end up on the outside of the product. What is left between them, and where does the "
          "1/sqrt(d_k) go?"],
    solution=_solution_query_key_matrix,
    mistakes=[
        Mistake(lambda wq, wk: wq @ wk.T,
                "your matrix gives the scores S themselves. The task asks for the scaled scores, S / sqrt(d_k)."),
        Mistake(lambda wq, wk: wk @ wq.T / math.sqrt(wk.shape[1]),
                "your matrix is the transpose of the right one: X W_qk Xᵀ then gives Sᵀ, whose row i holds the "
                "scores of key i. Row i of S belongs to query i."),
        Mistake(lambda wq, wk: wq.T @ wk / math.sqrt(wk.shape[1]),
                "your matrix is (d_k, d_k). It must sit between X (num_tokens, d_in) and Xᵀ (d_in, num_tokens), so "
                "it is (d_in, d_in)."),
        Mistake(lambda wq, wk: wq @ wk.T / math.sqrt(wq.shape[0]),
                "you divided by sqrt(d_in), the width of the inputs. The scale belongs to the width of the keys."),
        Mistake(lambda wq, wk: wq @ wk.T / wk.shape[1],
                "you divided by d_k. The scores are divided by its square root."),
    ],
)


# --- 3. spot the bug: cross-attention -----------------------------------------------------------------
def _cross_cases(g: torch.Generator) -> list[Case]:
    def case(num_tokens_q, num_tokens_kv, d_in, d_k, d_v):
        return Case(f"{num_tokens_q} query tokens and {num_tokens_kv} key/value tokens, d_in={d_in}, d_k={d_k}, "
                    f"d_v={d_v}",
                    (randn(g, num_tokens_q, d_in), randn(g, num_tokens_kv, d_in), randn(g, d_in, d_k),
                     randn(g, d_in, d_k), randn(g, d_in, d_v)))
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
    keys = x_kv @ W_key                     # (T_kv, d_k): the sequence that is looked up ...
    values = x_kv @ W_value                 # (T_kv, d_v): ... and what it hands over
    attn_scores = queries @ keys.T          # (T_q, T_kv)
    attn_weights = torch.softmax(attn_scores / math.sqrt(keys.shape[-1]), dim=-1)
    return attn_weights @ values            # (T_q, T_kv) @ (T_kv, d_v) -> (T_q, d_v)


cross_attention = SpotTheBug(
    "Spot the bug: cross-attention",
    "fixed_cross_attention(x_q, x_kv, W_query, W_key, W_value) should compute cross-attention: queries from "
    "x_q (num_tokens_q, d_in), keys and values from x_kv (num_tokens_kv, d_in). The code given has one bug: "
    "find it and fix it.",
    reference=_reference_cross,
    cases=_cross_cases,
    hint=["Write the shape next to every line, with T_q and T_kv for the two lengths. Which product would fail "
          "if the lengths differed?",
          "Weight a_ij says how much query i takes from token j of which sequence?"],
    solution=_solution_cross_attention,
    buggy=buggy_cross_attention,
    bug_message="your function still has the bug: with two sequences of the same length it runs, yet its context "
                "vectors are wrong. Try it on sequences of different lengths.",
    mistakes=[
        Mistake(lambda xq, xkv, wq, wk, wv: scaled_dot_product_attention(xq @ wq, xq @ wk, xkv @ wv)[0],
                "your keys come from x_q. The keys describe the tokens that can be attended to: the tokens of "
                "x_kv."),
        Mistake(lambda xq, xkv, wq, wk, wv: scaled_dot_product_attention(xkv @ wq, xkv @ wk, xkv @ wv)[0],
                "you computed self-attention over x_kv: the queries must come from x_q, one per token that asks."),
    ],
)
