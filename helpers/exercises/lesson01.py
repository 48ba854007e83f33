"""Exercises for notebook 01: dot-product scores."""

from __future__ import annotations

import torch

from ..attention import dot_product_scores
from ._inputs import journey_inputs, randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, no_loops

__all__ = ["score_matrix", "stretched_scores", "mixed_scores"]


# --- 1. every query at once -------------------------------------------------------------------
def _matrix_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("the journey sentence (6 tokens, d_in=3)", (journey_inputs(),)),
        Case("4 random tokens of dimension 4", (randn(g, 4, 4),)),
        Case("7 random tokens of dimension 2", (randn(g, 7, 2),)),
    ]


def _solution_score_matrix(inputs):
    # (num_tokens, d_in) @ (d_in, num_tokens) -> (num_tokens, num_tokens)
    return inputs @ inputs.T


score_matrix = FunctionExercise(
    "Score matrix without loops",
    "write score_matrix(inputs) returning every token's score with every token, shape (num_tokens, num_tokens), "
    "with one matrix product and no Python loop.",
    reference=lambda inputs: dot_product_scores(inputs, inputs),
    cases=_matrix_cases,
    hint=["Write down the shapes: the answer is (T, T) and `inputs` is (T, d_in). Which (d_in, T) matrix do you "
          "have at hand?",
          "A matrix product (T, d_in) @ (d_in, T) sums over d_in: exactly the sum of a dot product."],
    solution=_solution_score_matrix,
    rules=[no_loops()],
    mistakes=[
        Mistake(lambda inputs: inputs.T @ inputs,
                "you computed Xᵀ X, which compares features with features (d_in x d_in). Scores compare tokens "
                "with tokens: one row and one column per token."),
        Mistake(lambda inputs: inputs * inputs,
                "you squared the inputs element by element. The score of tokens i and j needs a dot product of "
                "two different rows: a matrix product."),
    ],
)


# --- 2. predict the scores after stretching a token -----------------------------------------------
def _stretch_cases(g: torch.Generator) -> list[Case]:
    journey = journey_inputs()
    return [
        Case("the journey scores, 'step' (token 5) stretched by 3", (journey @ journey.T, 5, 3.0)),
        Case("the journey scores, 'journey' (token 1) flipped (factor -1)", (journey @ journey.T, 1, -1.0)),
        Case("random scores of 4 tokens, token 0 halved", ((lambda x: x @ x.T)(randn(g, 4, 5)), 0, 0.5)),
    ]


def _reference_stretched(attn_scores, token_index, factor):
    factors = torch.ones(attn_scores.shape[0], dtype=attn_scores.dtype)
    factors[token_index] = factor
    return factors[:, None] * attn_scores * factors[None, :]  # row and column scaled: the diagonal twice


def _solution_stretched_scores(attn_scores, token_index, factor):
    new_scores = attn_scores.clone()
    new_scores[token_index, :] *= factor   # token_index as the query: every score scales by factor
    new_scores[:, token_index] *= factor   # token_index as the key: scales again (its self-score twice)
    return new_scores


def _only_row(s, i, c):
    out = s.clone()
    out[i, :] *= c
    return out


def _row_and_column_once(s, i, c):
    out = s.clone()
    out[i, :] *= c
    out[:, i] *= c
    out[i, i] = s[i, i] * c
    return out


stretched_scores = FunctionExercise(
    "Predict the scores of a stretched token",
    "you know only the score matrix S = X Xᵀ, not X. Write stretched_scores(attn_scores, token_index, factor) "
    "that returns the score matrix after the vector of token `token_index` is multiplied by `factor`, "
    "computed from `attn_scores` alone. Predict first which entries change, and by how much.",
    reference=_reference_stretched,
    cases=_stretch_cases,
    hint=["In which scores does the stretched token take part? Look at the score explorer: as a query, and as "
          "a key.",
          "A dot product is linear in each of its two vectors. How many of them were stretched for the score of "
          "the token with itself?"],
    solution=_solution_stretched_scores,
    mistakes=[
        Mistake(_only_row,
                "you scaled only the token's row (its scores as a query). S is symmetric: the token is also a "
                "key in every other row, so its column changes too."),
        Mistake(_row_and_column_once,
                "the row and the column are right, but the self-score x_i · x_i contains the stretched vector "
                "twice, so it changes by the factor squared."),
        Mistake(lambda s, i, c: s * c,
                "you scaled every score. Only the scores in which the stretched token takes part change."),
        Mistake(lambda s, i, c: s * c * c,
                "you scaled every score by the factor squared. Only the scores in which the stretched token takes "
                "part change, and only its self-score by the square."),
    ],
)


# --- 3. spot the bug: the wrong matrix in a product -----------------------------------------------
def _mixed_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("the journey sentence with a random 6x6 mixing matrix", (journey_inputs(), randn(g, 6, 6))),
        Case("4 random tokens of dimension 3 with a random 4x4 mixing matrix", (randn(g, 4, 3), randn(g, 4, 4))),
    ]


def buggy_mixed_scores(inputs, mixing):
    mixed = mixing @ inputs        # (T, T) @ (T, d_in) -> (T, d_in): each token is a blend of all tokens
    return mixed @ inputs.T        # scores between the mixed tokens


def _solution_mixed_scores(inputs, mixing):
    mixed = mixing @ inputs        # (T, T) @ (T, d_in) -> (T, d_in)
    return mixed @ mixed.T         # (T, d_in) @ (d_in, T) -> (T, T): both sides are mixed tokens


mixed_scores = SpotTheBug(
    "Spot the bug: scores of mixed tokens",
    "mixed_scores(inputs, mixing) should blend the tokens with `mixing` (Z = A X, as in this notebook) and "
    "return the scores between the blended tokens, Z Zᵀ. The code below multiplies by the wrong matrix.",
    reference=lambda inputs, mixing: dot_product_scores(mixing @ inputs, mixing @ inputs),
    cases=_mixed_cases,
    hint="Both sides of a score must be the same kind of vector. Which matrix holds the blended tokens?",
    solution=_solution_mixed_scores,
    buggy=buggy_mixed_scores,
    bug_message="your function still compares blended tokens with the original ones (mixed @ inputs.T): one "
                "side of the product is the wrong matrix. Both queries and keys are the mixed tokens here.",
)
