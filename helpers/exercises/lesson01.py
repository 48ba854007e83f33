"""Exercises for notebook 01: dot-product scores."""

from __future__ import annotations

import torch

from ..attention import dot_product_scores
from ._inputs import journey_inputs, randn
from .core import Case, Mistake, SpotTheBug, FunctionExercise

__all__ = ["scores_for_query", "score_matrix", "mixed_scores"]


# --- 1. the scores of one query ----------------------------------------------------------------
def _query_cases(g: torch.Generator) -> list[Case]:
    inputs = journey_inputs()
    return [
        Case("the journey sentence with query 'journey'", (inputs, inputs[1])),
        Case("5 random tokens of dimension 4 and a query that is not one of them", (randn(g, 5, 4), randn(g, 4))),
        Case("a single token", (randn(g, 1, 3), randn(g, 3))),
    ]


def _solution_scores_for_query(inputs, query):
    # inputs: (num_tokens, d_in), query: (d_in,) -> (num_tokens,)
    return inputs @ query


scores_for_query = FunctionExercise(
    "Scores of one query",
    "write scores_for_query(inputs, query) returning the dot product of `query` (d_in,) with every row of "
    "`inputs` (num_tokens, d_in): a tensor of shape (num_tokens,).",
    reference=lambda inputs, query: dot_product_scores(query, inputs),
    cases=_query_cases,
    hint="one score per token: multiply the (num_tokens, d_in) matrix by the (d_in,) vector with @.",
    solution=_solution_scores_for_query,
    mistakes=[
        Mistake(lambda inputs, query: torch.softmax(inputs @ query, dim=-1),
                "you turned the scores into weights with softmax. This exercise asks for the raw dot products; "
                "normalising comes in notebook 02."),
        Mistake(lambda inputs, query: (inputs @ query) / (inputs.norm(dim=-1) * query.norm()),
                "you divided by the vectors' lengths: that is cosine similarity. Attention scores are plain "
                "dot products, so longer vectors get larger scores."),
        Mistake(lambda inputs, query: inputs * query,
                "you multiplied element by element (inputs * query) and kept every feature. A dot product also "
                "sums over the features: one number per token."),
    ],
)


# --- 2. every query at once -------------------------------------------------------------------
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
    hint="row i of the answer holds token i's dot products with every token: X times X transposed.",
    solution=_solution_score_matrix,
    mistakes=[
        Mistake(lambda inputs: inputs.T @ inputs,
                "you computed Xᵀ X, which compares features with features (d_in x d_in). Scores compare tokens "
                "with tokens: X Xᵀ."),
        Mistake(lambda inputs: inputs * inputs,
                "you squared the inputs element by element. The score of tokens i and j needs a dot product of "
                "two different rows: a matrix product."),
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
    "mixed_scores(inputs, mixing) should blend the tokens with `mixing` (Z = W X, as in this notebook) and "
    "return the scores between the blended tokens, Z Zᵀ. The code below multiplies by the wrong matrix.",
    reference=lambda inputs, mixing: dot_product_scores(mixing @ inputs, mixing @ inputs),
    cases=_mixed_cases,
    hint="both sides of a score must be the same kind of vector. Which matrix holds the blended tokens?",
    solution=_solution_mixed_scores,
    buggy=buggy_mixed_scores,
    bug_message="your function still compares blended tokens with the original ones (mixed @ inputs.T): one "
                "side of the product is the wrong matrix. Both queries and keys are the mixed tokens here.",
)
