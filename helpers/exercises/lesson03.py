"""Exercises for notebook 03: trainable queries, keys and values.

1. ``query_key_matrix``: derive the one ``(d_in, d_in)`` matrix ``W_QK`` behind the scaled scores,
   ``S / sqrt(d_k) = X W_QK X^T`` (the lesson never forms ``W_q W_k^T``; notebook 12 reads heads through it).
2. ``gpt2_weights``: spot the bug in code that loads a fused weight laid out as GPT-2's checkpoint keeps each layer's
   ``attn.c_attn.weight``, ``(d_in, 3 d_out)`` with the query, key and value blocks side by side, into a
   ``SelfAttention_v2`` (the cases are small random tensors in that layout; no bias, one head, no mask). The blocks are ``(d_in, d_out)``,
   ``nn.Linear`` keeps ``(d_out, d_in)``: without the transpose the code still runs on GPT-2's square layers. A real
   mistake: nanoGPT's ``GPT.from_pretrained`` transposes exactly these weights when it imports them.
"""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ..modules import SelfAttention_v2
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["query_key_matrix", "gpt2_weights"]


# --- 1. one matrix behind the scores: S / sqrt(d_k) = X W_QK X^T --------------------------------------------------
def _qk_cases(g: torch.Generator) -> list[Case]:
    # d_in and d_k differ in the first case, so a (d_k, d_k) answer or a scale by sqrt(d_in) shows at once
    return [Case(f"W_query and W_key of shape ({d_in}, {d_k})", (randn(g, d_in, d_k), randn(g, d_in, d_k)))
            for d_in, d_k in [(3, 2), (5, 5), (4, 9)]]


def _reference_qk(W_query, W_key):
    # the matrix W_QK for which X W_QK X^T gives the scaled scores of any X
    return W_query @ W_key.transpose(0, 1) / math.sqrt(W_key.shape[1])


def _solution_query_key_matrix(W_query, W_key):
    # S = Q K^T = (X W_q)(X W_k)^T = X (W_q W_k^T) X^T: the two X's stay outside, W_QK sits between them
    d_k = W_key.shape[1]
    return W_query @ W_key.T / math.sqrt(d_k)           # (d_in, d_k) @ (d_k, d_in) -> (d_in, d_in)


query_key_matrix = FunctionExercise(
    "One matrix behind the scores",
    "write query_key_matrix(W_query, W_key) returning the (d_in, d_in) matrix W_QK for which the scaled scores "
    "are S / sqrt(d_k) = X W_QK Xᵀ, for every X of shape (num_tokens, d_in). W_query and W_key are (d_in, d_k), as "
    "in SelfAttention_v1.",
    reference=_reference_qk,
    cases=_qk_cases,
    hint=["Put Q = X W_q and K = X W_k into S = Q Kᵀ and use the rule for the transpose of a product of two "
          "matrices.",
          "Both X's end up on the outside of the product. What is left between them, and where does the "
          "1/sqrt(d_k) go?",
          "d_k is the width of the keys, the second dimension of W_key."],
    solution=_solution_query_key_matrix,
    mistakes=[
        Mistake(lambda wq, wk: wq @ wk.T,
                "your matrix gives the scores S themselves. The task asks for the scaled scores, S / sqrt(d_k)."),
        Mistake(lambda wq, wk: wk @ wq.T / math.sqrt(wk.shape[1]),
                "your matrix is the transpose of the right one: X W_QK Xᵀ then gives Sᵀ, whose row i holds the "
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


# --- 2. spot the bug: loading GPT-2's fused query/key/value weight ----------------------------------------------
def _gpt2_cases(g: torch.Generator) -> list[Case]:
    def case(text, num_tokens, d_in, d_out, scale=1.0):
        return Case(f"{text}: x ({num_tokens}, {d_in}), c_attn_weight ({d_in}, {3 * d_out})",
                    (randn(g, num_tokens, d_in, scale=scale), randn(g, d_in, 3 * d_out, scale=scale)))
    # a square layer first, as GPT-2's (768 = 768): there the buggy code runs and only its values are wrong
    return [case("a square layer, as in GPT-2 (d_in = d_out = 8)", 5, 8, 8),
            case("d_in = 6, d_out = 4", 3, 6, 4),
            case("d_in = 3, d_out = 5, a single token", 1, 3, 5),
            case("large inputs and weights, so every row of A is sharply peaked", 7, 5, 5, scale=4.0)]


def _blocks(c_attn_weight):
    d_out = c_attn_weight.shape[1] // 3
    return c_attn_weight.split(d_out, dim=1)  # W_q, W_k, W_v: each (d_in, d_out)


def _reference_gpt2(x, c_attn_weight):
    W_query, W_key, W_value = _blocks(c_attn_weight)
    return scaled_dot_product_attention(x @ W_query, x @ W_key, x @ W_value)[0]


def buggy_gpt2_self_attention(x, c_attn_weight):
    d_in, d_out = c_attn_weight.shape[0], c_attn_weight.shape[1] // 3
    attention = SelfAttention_v2(d_in, d_out)
    W_query, W_key, W_value = c_attn_weight.split(d_out, dim=1)  # side by side in c_attn_weight
    with torch.no_grad():
        attention.W_query.weight.copy_(W_query)
        attention.W_key.weight.copy_(W_key)
        attention.W_value.weight.copy_(W_value)
        return attention(x)


def _solution_gpt2_self_attention(x, c_attn_weight):
    d_in, d_out = c_attn_weight.shape[0], c_attn_weight.shape[1] // 3
    attention = SelfAttention_v2(d_in, d_out)
    W_query, W_key, W_value = c_attn_weight.split(d_out, dim=1)  # each (d_in, d_out), as in SelfAttention_v1
    with torch.no_grad():
        attention.W_query.weight.copy_(W_query.T)                # nn.Linear keeps its weight as (d_out, d_in)
        attention.W_key.weight.copy_(W_key.T)
        attention.W_value.weight.copy_(W_value.T)
        return attention(x)


def _causal(x, c_attn_weight):
    """The right answer with GPT-2's causal mask added: each token sees only itself and the tokens before it."""
    W_query, W_key, W_value = _blocks(c_attn_weight)
    queries, keys = x @ W_query, x @ W_key
    scores = queries @ keys.transpose(0, 1) / math.sqrt(keys.shape[-1])                # (T, T)
    future = torch.ones_like(scores, dtype=torch.bool).triu(diagonal=1)                # True above the diagonal
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ (x @ W_value)


def _with_blocks(order=(0, 1, 2), rows=False):
    """The right answer, except that the blocks are taken in another ``order`` or cut as consecutive rows."""
    def wrong(x, c_attn_weight):
        d_in, d_out = c_attn_weight.shape[0], c_attn_weight.shape[1] // 3
        blocks = c_attn_weight.reshape(3, d_in, d_out) if rows else _blocks(c_attn_weight)
        W_query, W_key, W_value = (blocks[i] for i in order)
        return scaled_dot_product_attention(x @ W_query, x @ W_key, x @ W_value)[0]
    return wrong


gpt2_weights = SpotTheBug(
    "Spot the bug: loading GPT-2's weights",
    "gpt2_self_attention(x, c_attn_weight) should return the context vectors (num_tokens, d_out) of "
    "self-attention for x (num_tokens, d_in), as one SelfAttention_v2 computes them, with the query, key and value "
    "matrices side by side in c_attn_weight (d_in, 3 * d_out), the layout of GPT-2's attn.c_attn.weight: columns "
    "[W_q | W_k | W_v], each (d_in, d_out) as in SelfAttention_v1. The code given loads them into a "
    "SelfAttention_v2 and has one bug: find it and fix it. It is checked on small random weights in this layout; "
    "any fix that returns the right context vectors passes.",
    reference=_reference_gpt2,
    cases=_gpt2_cases,
    hint=["Write the shape next to every line. Which shape does each block of c_attn_weight have, and which "
          "shape does the weight inside nn.Linear(d_in, d_out) have (section 4)?",
          "GPT-2's layers are square (d_in = d_out = 768), so every block fits into every weight whichever way "
          "round it is, and nothing complains. Does the number in row i, column j of a block mean the same as the "
          "number in row i, column j of nn.Linear's weight?"],
    solution=_solution_gpt2_self_attention,
    buggy=buggy_gpt2_self_attention,
    bug_message="your function still has the bug: on a square layer, as in GPT-2, it runs, yet its context vectors "
                "are wrong. Try a layer with d_in ≠ d_out, and compare the shape of each block with the shape of "
                "the weight it goes into. (A reshape or view of a square block changes nothing.)",
    mistakes=[
        Mistake(_with_blocks(order=(1, 0, 2)),
                "your queries and keys are swapped: the first block of c_attn_weight is W_q, the second W_k. "
                "Swapping them gives the scores Sᵀ, whose row i belongs to key i."),
        Mistake(_with_blocks(order=(0, 1, 2), rows=True),
                "your three matrices are not the column blocks [W_q | W_k | W_v]. Reshaping (d_in, 3 * d_out) into "
                "(3, d_in, d_out) cuts the numbers in reading order, row by row; the blocks sit side by side, "
                "each d_out columns wide."),
        Mistake(_with_blocks(order=(0, 0, 2)),
                "your keys are made with W_q: the second block of c_attn_weight is W_k."),
        Mistake(_causal,
                "your context vectors are those of causal attention: each token sees only itself and the tokens "
                "before it. GPT-2 masks the future (notebook 04), but the task asks for what one SelfAttention_v2 "
                "computes, with no mask."),
    ],
)
