"""Exercises for notebook 09: positions.

1. the dot product of two sinusoidal position vectors, from their distance alone (without building ``P``); a known
   mistake is the classic one of frequencies off by a factor, ``10000 ** (-r / d)`` for ``10000 ** (-2r / d)``;
2. spot the bug: attention whose outputs drift when the whole sentence shifts (RoPE applied to the values as
   well as to the queries and keys).
"""

from __future__ import annotations

import torch

from ..attention import scaled_dot_product_attention
from ..positions import apply_rope, sinusoidal_positions
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids, no_loops

__all__ = ["position_similarity", "drifting_attention"]


# --- 1. P_i . P_j from i - j ------------------------------------------------------------------------------------
def _similarity_cases(g: torch.Generator) -> list[Case]:
    return [Case("num_tokens=6, d_in=4", (6, 4)), Case("the lesson's sizes, num_tokens=64, d_in=32", (64, 32)),
            Case("num_tokens=10, d_in=2 (one pair)", (10, 2))]


def _reference_similarity(num_tokens, d_in):
    encoding = sinusoidal_positions(num_tokens, d_in)             # (T, d_in)
    return encoding @ encoding.T                                   # (T, d_in) @ (d_in, T) -> (T, T)


def _solution_similarity(num_tokens, d_in):
    r = torch.arange(d_in // 2)
    omega = 10000.0 ** (-2 * r / d_in)                             # (d_in / 2,): one frequency per pair
    positions = torch.arange(num_tokens)
    distance = positions[:, None] - positions[None, :]             # (T, T): i - j
    # sin(a) sin(b) + cos(a) cos(b) = cos(a - b), once per pair
    return torch.cos(distance[..., None] * omega).sum(dim=-1)      # (T, T, d_in / 2) -> (T, T)


def _similarity_of_sum(num_tokens, d_in):
    r = torch.arange(d_in // 2)
    omega = 10000.0 ** (-2 * r / d_in)
    positions = torch.arange(num_tokens)
    return torch.cos((positions[:, None] + positions[None, :])[..., None] * omega).sum(dim=-1)


def _similarity_slow_exponent(num_tokens, d_in):
    r = torch.arange(d_in // 2)
    omega = 10000.0 ** (-r / d_in)
    positions = torch.arange(num_tokens)
    return torch.cos((positions[:, None] - positions[None, :])[..., None] * omega).sum(dim=-1)


def _similarity_per_dimension(num_tokens, d_in):
    r = torch.arange(d_in)
    omega = 10000.0 ** (-2 * (r // 2) / d_in)
    positions = torch.arange(num_tokens)
    return torch.cos((positions[:, None] - positions[None, :])[..., None] * omega).sum(dim=-1)


position_similarity = FunctionExercise(
    "The dot product of two position vectors",
    "write position_similarity(num_tokens, d_in): the (num_tokens, num_tokens) matrix of dot products P_i . P_j "
    "of the sinusoidal position vectors, without building P (no torch.sin, no sinusoidal_positions) and without a "
    "Python loop. You may use angular_frequencies(d_in) for the omega_r.",
    reference=_reference_similarity,
    cases=_similarity_cases,
    hint=["Write out one pair r of P_i . P_j: sin(i w) sin(j w) + cos(i w) cos(j w). Which trigonometric identity "
          "turns that into a function of one angle?",
          "Build the (T, T) distances i - j with broadcasting, then add a last dimension for the d_in / 2 "
          "frequencies before you sum."],
    solution=_solution_similarity,
    mistakes=[
        Mistake(_similarity_of_sum, "you used i + j. sin(a) sin(b) + cos(a) cos(b) is cos(a - b): the dot product "
                                    "depends on the distance i - j."),
        Mistake(_similarity_slow_exponent, "your frequencies are 10000^(-r / d_in): they fall off too slowly, only "
                                           "to about 1/100, so the slow pairs turn far too fast. The exponent counts "
                                           "dimensions, two per pair: omega_r = 10000^(-2r / d_in)."),
        Mistake(_similarity_per_dimension, "you summed over all d_in dimensions, each with a cosine. Each PAIR "
                                           "(a sine and a cosine column) gives one cosine: sum over the d_in / 2 "
                                           "pairs."),
    ],
    atol=1e-3,
    rules=[no_loops(), forbids("torch.sin", "torch.Tensor.sin", "helpers.positions.sinusoidal_positions",
                               "helpers.sinusoidal_positions",
                               why="Use the identity: one cosine of the distance per pair.")],
)


# --- 2. spot the bug: outputs that drift when the sentence shifts (RoPE on the values) ---------------------------------------------------------------------------
def _qkv_cases(g: torch.Generator) -> list[Case]:
    def case(description, *shape):
        return Case(description, (randn(g, *shape), randn(g, *shape), randn(g, *shape)))
    return [case("one head, 6 tokens, head_dim 4", 1, 6, 4), case("2 sequences, 2 heads, 8 tokens, head_dim 8",
                                                                   2, 2, 8, 8),
            case("3 tokens, head_dim 2", 3, 2)]


def _reference_rope_attention(queries, keys, values):
    return scaled_dot_product_attention(apply_rope(queries), apply_rope(keys), values)[0]


def buggy_rope_attention(queries, keys, values):
    # queries, keys, values (..., T, head_dim) -> context vectors (..., T, head_dim), no mask
    queries, keys, values = apply_rope(queries), apply_rope(keys), apply_rope(values)   # R_i to every vector
    attn_scores = queries @ keys.transpose(-2, -1)                  # (..., T, D) @ (..., D, T) -> (..., T, T)
    attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ values                                    # (..., T, T) @ (..., T, D) -> (..., T, D)


def _solution_rope_attention(queries, keys, values):
    queries, keys = apply_rope(queries), apply_rope(keys)           # positions belong in the scores only
    attn_scores = queries @ keys.transpose(-2, -1)                  # (..., T, D) @ (..., D, T) -> (..., T, T)
    attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ values                                    # (..., T, T) @ (..., T, D) -> (..., T, D)


def _rope_on_queries_only(queries, keys, values):
    attn_scores = apply_rope(queries) @ keys.transpose(-2, -1)
    return torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1) @ values


def _rope_after_scaling(queries, keys, values):
    attn_weights = torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ values


drifting_attention = SpotTheBug(
    "Spot the bug: attention whose outputs drift when the sentence shifts",
    "rope_attention(queries, keys, values) should compute attention without a mask, with RoPE (apply_rope) "
    "making the scores depend on the offset j - i only: inputs (..., T, head_dim), output the context vectors "
    "z_i = sum_j a_ij v_j (..., T, head_dim), with the values as given. The code below runs and its weights are "
    "right, yet its context vectors are wrong. Check: shift every position by the same constant (apply_rope(x, "
    "positions + 10)); right attention gives the same outputs. Find the bug and fix it.",
    reference=_reference_rope_attention,
    cases=_qkv_cases,
    hint=["Run the code with positions 0..T-1 and again with positions 10..T+9 (the positions argument of "
          "apply_rope): which outputs change, and which vectors did the shift reach?",
          "Which of the three kinds of vector takes part in a score s_ij, and which is only mixed by the weights?",
          "A value v_j carries WHAT token j says. Rotating it by R_j changes what the context vector z_i reads, "
          "by an amount that depends on j's absolute position."],
    solution=_solution_rope_attention,
    buggy=buggy_rope_attention,
    bug_message="the values are rotated too. RoPE belongs in the scores: R_i q_i . R_j k_j depends on j - i. A "
                "rotated value R_j v_j mixes each token's content with its absolute position, so z_i = sum_j a_ij "
                "R_j v_j is no longer the weighted sum of the values. Rotate the queries and keys only.",
    mistakes=[
        Mistake(_rope_on_queries_only, "you rotated the queries only. Then the score R_i q_i . k_j depends on "
                                       "where the query is, not on the offset j - i: rotate the keys as well."),
        Mistake(_rope_after_scaling, "your attention uses no positions at all: rotate the queries and keys with "
                                     "apply_rope before the scores."),
    ],
    rules=[forbids("helpers.position_model.PositionModel.forward", why="Write the attention yourself.")],
)
