"""Exercises for notebook 09: positions.

1. the dot product of two sinusoidal position vectors, from their distance alone (without building ``P``); a known
   mistake is the classic one of frequencies off by a factor, ``10000 ** (-r / d)`` for ``10000 ** (-2r / d)``;
2. spot the bug: RoPE attention whose queries are turned with adjacent pairs and whose keys with the rotate-half
   layout, a real mistake when code from two sources meets; RoPE on the values is a named wrong answer.
"""

from __future__ import annotations

import torch

from ..attention import scaled_dot_product_attention
from ..positions import apply_rope, sinusoidal_positions
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids, no_loops

__all__ = ["position_similarity", "rope_attention"]


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
    "Python loop. torch.cos is allowed, and you may use angular_frequencies(d_in) for the omega_r.",
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


# --- 2. spot the bug: queries and keys turned with two different pair layouts -------------------------------------
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
    queries = apply_rope(queries)                                   # R_i q_i
    keys = apply_rope(keys, pairs="halves")                         # R_j k_j
    attn_scores = queries @ keys.transpose(-2, -1)                  # (..., T, D) @ (..., D, T) -> (..., T, T)
    attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ values                                    # (..., T, T) @ (..., T, D) -> (..., T, D)


def _solution_rope_attention(queries, keys, values):
    queries, keys = apply_rope(queries), apply_rope(keys)           # the same pairs for both
    attn_scores = queries @ keys.transpose(-2, -1)                  # (..., T, D) @ (..., D, T) -> (..., T, T)
    attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ values                                    # (..., T, T) @ (..., T, D) -> (..., T, D)


def _rope_on_queries_only(queries, keys, values):
    attn_scores = apply_rope(queries) @ keys.transpose(-2, -1)
    return torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1) @ values


def _rope_on_the_values_too(queries, keys, values):
    queries, keys, values = apply_rope(queries), apply_rope(keys), apply_rope(values)
    return torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1) @ values


def _rope_halves_for_both(queries, keys, values):
    queries, keys = apply_rope(queries, pairs="halves"), apply_rope(keys, pairs="halves")
    return torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1) @ values


def _rope_layouts_swapped(queries, keys, values):
    queries, keys = apply_rope(queries, pairs="halves"), apply_rope(keys)
    return torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1) @ values


_MIXED_LAYOUTS = ("the {first} are turned with adjacent pairs (2r, 2r + 1) and the {second} with rotate-half pairs "
                  "(r, r + head_dim / 2). Each is a rotation, but pair r of the query and pair r of the key are "
                  "different dimensions, so the two turns no longer combine into one turn by j - i, and the scores "
                  "depend on where the tokens stand. Turn both with the same layout: apply_rope's default.")


def _rope_after_scaling(queries, keys, values):
    attn_weights = torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ values


rope_attention = SpotTheBug(
    "Spot the bug: attention with RoPE",
    "rope_attention(queries, keys, values) should compute attention without a mask, with RoPE (apply_rope with "
    "its default adjacent pairs) making the scores depend on the offset j - i only: inputs (..., T, head_dim), "
    "output the context vectors z_i = sum_j a_ij v_j (..., T, head_dim), with the values as given. The code "
    "below runs, yet its answer is wrong. A check: shift every position by the same constant (the positions "
    "argument of apply_rope, positions + 10); right attention gives the same outputs. Find the bug and fix it.",
    reference=_reference_rope_attention,
    cases=_qkv_cases,
    hint=["Run the code with positions 0..T-1 and again with positions 10..T+9 (the positions argument of "
          "apply_rope): the outputs change, so the scores depend on more than j - i. Which step broke the proof "
          "s_ij = q^T R_{j-i} k?",
          "The proof needs R_i and R_j to be rotations of the same kind: pair r of the query and pair r of the "
          "key made of the same two dimensions. Are they here?",
          "Compare the calls that turn the queries and the keys, argument by argument."],
    solution=_solution_rope_attention,
    buggy=buggy_rope_attention,
    bug_message=_MIXED_LAYOUTS.format(first="queries", second="keys"),
    mistakes=[
        Mistake(_rope_layouts_swapped, _MIXED_LAYOUTS.format(first="keys", second="queries")),
        Mistake(_rope_on_the_values_too, "the values are rotated too. RoPE belongs in the scores: R_i q_i . R_j k_j "
                                         "depends on j - i. A rotated value R_j v_j mixes each token's content "
                                         "with its absolute position: rotate the queries and keys only."),
        Mistake(_rope_halves_for_both, "you turned both with the rotate-half layout: that is RoPE too, and its "
                                       "scores depend on j - i only, but the task asks for apply_rope's default "
                                       "adjacent pairs, as this lesson writes RoPE."),
        Mistake(_rope_on_queries_only, "you rotated the queries only. Then the score R_i q_i . k_j depends on "
                                       "where the query is, not on the offset j - i: rotate the keys as well."),
        Mistake(_rope_after_scaling, "your attention uses no positions at all: rotate the queries and keys with "
                                     "apply_rope before the scores."),
    ],
    rules=[forbids("helpers.position_model.PositionModel.forward", why="Write the attention yourself.")],
)
