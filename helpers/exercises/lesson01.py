"""Exercises for notebook 01: dot-product scores."""

from __future__ import annotations

import torch

from ..attention import dot_product_scores
from ._inputs import journey_inputs, randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, no_loops

__all__ = ["cosine_scores", "mixed_scores"]


# --- the score matrix: the exercise core's worked example ---------------------------------------
# Notebook 01 computes X Xᵀ in front of the learner, so it does not offer this one (it is not in __all__); the
# tests of the exercise core (tests/test_exercises.py) use it as their example of a FunctionExercise.
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


# --- 1. cosine scores: direction without length ------------------------------------------------------
def _cosine_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("the journey sentence (6 tokens, d_in=3)", (journey_inputs(),)),
        Case("5 random tokens of dimension 4, of very different lengths",
             (randn(g, 5, 4) * torch.tensor([[0.1], [1.0], [5.0], [0.5], [20.0]]),)),
        Case("3 random tokens of dimension 2", (randn(g, 3, 2),)),
    ]


def _reference_cosine(inputs):
    lengths = torch.linalg.vector_norm(inputs, dim=1)              # (T,)
    return (inputs @ inputs.T) / (lengths[:, None] * lengths[None, :])


def _solution_cosine_scores(inputs):
    unit = inputs / inputs.norm(dim=1, keepdim=True)   # (T, d_in): every row now has length 1
    return unit @ unit.T                                # (T, d_in) @ (d_in, T) -> (T, T)


def _lengths_over_the_wrong_axis(inputs):
    unit = inputs / inputs.norm(dim=0, keepdim=True)
    return unit @ unit.T


def _one_side_only(inputs):
    unit = inputs / inputs.norm(dim=1, keepdim=True)
    return unit @ inputs.T


def _squared_lengths(inputs):
    squared = (inputs * inputs).sum(dim=1, keepdim=True)
    unit = inputs / squared
    return unit @ unit.T


cosine_scores = FunctionExercise(
    "Cosine scores: direction without length",
    "write cosine_scores(inputs) for inputs of shape (num_tokens, d_in): the matrix of "
    "x_i · x_j / (‖x_i‖ ‖x_j‖), shape (num_tokens, num_tokens), without a Python loop.",
    reference=_reference_cosine,
    cases=_cosine_cases,
    hint=["What is the dot product of two vectors of length 1? Can you make every token's vector have length 1 "
          "first, without changing its direction?",
          "`.norm(dim=...)` gives lengths. Along which dimension do a token's own components run? To divide each "
          "row by its own length, the lengths must stand in a column, shape (T, 1): `keepdim=True` keeps the "
          "reduced dimension with size 1, and the division then broadcasts row by row."],
    solution=_solution_cosine_scores,
    rules=[no_loops()],
    mistakes=[
        Mistake(_lengths_over_the_wrong_axis,
                "you divided by lengths taken down the columns (over the tokens). A token's length runs over its "
                "own components: one length per row."),
        Mistake(_one_side_only,
                "only one side of each product is divided by its length. A cosine divides by both lengths, the "
                "query's and the key's."),
        Mistake(_squared_lengths,
                "you divided by squared lengths. The length of a vector is the square root of its dot product "
                "with itself."),
        Mistake(lambda inputs: inputs @ inputs.T,
                "these are the raw scores of the lesson. Divide each score by the lengths of both vectors."),
    ],
)


# --- 2. spot the bug: scores of mixed tokens from the scores alone ------------------------------------
def _mixed_cases(g: torch.Generator) -> list[Case]:
    journey = journey_inputs()
    other = randn(g, 4, 3)
    return [
        Case("the journey scores with a random 6x6 weight matrix", (journey @ journey.T, randn(g, 6, 6))),
        Case("the scores of 4 random tokens with a random 4x4 weight matrix", (other @ other.T, randn(g, 4, 4))),
    ]


def _reference_mixed(attn_scores, attn_weights):
    return attn_weights @ attn_scores @ attn_weights.T


def buggy_mixed_scores(attn_scores, attn_weights):
    # Z = A X blends the tokens; we want every score z_i · z_j, from S = X Xᵀ without X.
    return attn_weights @ attn_scores        # (T, T) @ (T, T) -> (T, T)


def _solution_mixed_scores(attn_scores, attn_weights):
    # z_i · z_j = (A X)(A X)ᵀ = A X Xᵀ Aᵀ = A S Aᵀ: the blend acts on the queries AND on the keys.
    # The buggy A S agrees with it in column 0 only: row 0 of A keeps Hello alone, so z_0 = x_0 and Aᵀ changes
    # nothing there.
    return attn_weights @ attn_scores @ attn_weights.T   # (T, T) @ (T, T) @ (T, T) -> (T, T)


mixed_scores = SpotTheBug(
    "Spot the bug: scores of blended tokens",
    "you know only the scores S = X Xᵀ and hand-picked weights A; the blended tokens are Z = A X (section 2). "
    "mixed_scores(attn_scores, attn_weights) should return every score between blended tokens, z_i · z_j, "
    "shape (num_tokens, num_tokens), without X. The code below runs, but its answer is wrong: find out why.",
    reference=_reference_mixed,
    cases=_mixed_cases,
    hint=["Try it on a case you can do in your head: let A swap two tokens. Which entries of the buggy answer "
          "are right, and which are not?",
          "Write z_i · z_j as a matrix product of Z with itself, put Z = A X into both places, and see where "
          "X Xᵀ appears."],
    solution=_solution_mixed_scores,
    buggy=buggy_mixed_scores,
    bug_message="your answer blends the queries (the rows) but not the keys (the columns): each score is z_i "
                "against an original token x_j. Both vectors of a score are blended tokens.",
    mistakes=[
        Mistake(lambda s, a: s @ a.T,
                "your answer blends the keys (the columns) but not the queries (the rows): both vectors of a "
                "score are blended tokens."),
        Mistake(lambda s, a: a @ s @ a,
                "close: the keys are blended by A as well, but a matrix on the right of S acts on its columns "
                "through its transpose. Check the shape rule (A X)ᵀ = ?"),
        Mistake(lambda s, a: a.T @ s @ a,
                "the transposes are on the wrong side: Z = A X puts A on the left of X, so the left factor is A "
                "itself."),
        Mistake(lambda s, a: (a @ s + s @ a.T) / 2,
                "you averaged the buggy answer with its transpose. That makes it symmetric, but each half still "
                "blends one side only, the queries or the keys; a score of two blended tokens blends both."),
    ],
)
