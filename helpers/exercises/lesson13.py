"""Exercises for notebook 13: a real pretrained model (all-MiniLM-L6-v2) run by the course's modules.

1. a next-token score of every head over a padded batch of sentences (padding left out);
2. spot the bug: the attention weights of a padded batch, its padding mask on the wrong axis.
"""

from __future__ import annotations

import math

import torch

from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["batch_next_token_score", "masked_weights"]


def _batch_weights(g: torch.Generator, lengths: list[int], num_heads: int, scale: float = 1.0):
    """Softmax rows over the real keys of each sentence, ``(B, H, T, T)``, and the padding mask ``(B, T)``."""
    num_tokens = max(lengths)
    padding_mask = torch.arange(num_tokens)[None, :] >= torch.tensor(lengths)[:, None]  # (B, T): True at padding
    scores = torch.randn(len(lengths), num_heads, num_tokens, num_tokens, generator=g) * scale
    scores = scores.masked_fill(padding_mask[:, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1), padding_mask


# --- 1. the next-token score over a padded batch ---------------------------------------------------------------------
def _score_cases(g: torch.Generator) -> list[Case]:
    def case(description, lengths, num_heads=2, scale=1.0):
        return Case(description, _batch_weights(g, lengths, num_heads, scale))
    return [case("two sentences of 7 and 4 tokens, 2 heads", [7, 4]),
            case("three sentences of 5, 9 and 3 tokens, 3 heads", [5, 9, 3], 3),
            case("one sentence, no padding, 1 head", [6], 1),
            case("sharply peaked weights (scores times 30), sentences of 8 and 8 tokens", [8, 8], 2, 30.0),
            case("a long and a very short sentence (12 and 2 tokens), 4 heads", [12, 2], 4)]


def _reference_score(attn_weights, padding_mask):
    real = ~padding_mask                                     # (B, T)
    counted = real[:, :-1] & real[:, 1:]                     # (B, T-1): query i and its next token i+1 are real
    on_next = attn_weights.diagonal(offset=1, dim1=-2, dim2=-1)  # (B, H, T-1): a[i, i+1]
    return (on_next * counted[:, None]).sum(dim=(0, 2)) / counted.sum()


def _solution_score(attn_weights, padding_mask):
    batch_size, num_heads, num_tokens, _ = attn_weights.shape
    total, count = torch.zeros(num_heads), 0
    for b in range(batch_size):
        length = int((~padding_mask[b]).sum())               # real tokens come first, padding after
        for i in range(length - 1):
            total += attn_weights[b, :, i, i + 1]
            count += 1
    return total / count


def _with_padding(attn_weights, padding_mask):           # padded queries counted too
    return attn_weights.diagonal(offset=1, dim1=-2, dim2=-1).mean(dim=(0, 2))


def _previous(attn_weights, padding_mask):               # a[i, i-1] instead of a[i, i+1]
    real = ~padding_mask
    counted = real[:, :-1] & real[:, 1:]
    on_previous = attn_weights.diagonal(offset=-1, dim1=-2, dim2=-1)
    return (on_previous * counted[:, None]).sum(dim=(0, 2)) / counted.sum()


def _mean_of_means(attn_weights, padding_mask):          # each sentence's mean, then the mean of those
    real = ~padding_mask
    counted = (real[:, :-1] & real[:, 1:]).float()
    on_next = attn_weights.diagonal(offset=1, dim1=-2, dim2=-1)
    return ((on_next * counted[:, None]).sum(-1) / counted.sum(-1)[:, None]).mean(0)


batch_next_token_score = FunctionExercise(
    "A next-token score over a padded batch",
    "write batch_next_token_score(attn_weights, padding_mask): attn_weights (B, H, T, T) are one layer's weights on a "
    "padded batch of B sentences (rows = queries i, columns = keys j), padding_mask (B, T) is True at padding "
    "(padding comes after a sentence's real tokens). Return, for each head, the mean of a[i, i+1] over every "
    "query i of every sentence for which both i and i + 1 are real tokens (all such queries of the batch in one "
    "mean). Shape (H,).",
    reference=_reference_score,
    cases=_score_cases,
    hint=["The weight on the next token is one diagonal of each (T, T) table: which one?",
          "Build a (B, T-1) True/False table of the queries that count (i real and i + 1 real), then take a "
          "weighted sum and divide by the number of True entries."],
    solution=_solution_score,
    mistakes=[
        Mistake(_with_padding, "you average over padded positions too: a padded query's weights are not about the "
                               "sentence. Count only queries i where i and i + 1 are both real tokens."),
        Mistake(_previous, "you score a[i, i-1], the PREVIOUS token. The next token is key i + 1."),
        Mistake(_mean_of_means, "you average each sentence first and then the sentences: a short sentence then "
                                "weighs as much as a long one. Put every counted query of the batch in one mean."),
    ],
    name="lesson13.batch_next_token_score",
)


# --- 2. spot the bug: a padded batch's attention weights -------------------------------------------------------------
def _masked_cases(g: torch.Generator) -> list[Case]:
    def case(description, lengths, heads, head_dim):
        num_tokens = max(lengths)
        queries, keys = (torch.randn(len(lengths), heads, num_tokens, head_dim, generator=g) for _ in range(2))
        padding_mask = torch.arange(num_tokens)[None, :] >= torch.tensor(lengths)[:, None]
        return Case(description, (queries, keys, padding_mask))
    return [case("two sentences of 5 and 3 tokens, 2 heads of width 4", [5, 3], 2, 4),
            case("three sentences of 6, 2 and 4 tokens, 1 head of width 8", [6, 2, 4], 1, 8),
            case("one sentence of 7 real tokens and 3 of padding, 3 heads of width 2", [7, 4], 3, 2),
            case("the real model's heads: 12 of width 32, sentences of 9 and 5 tokens", [9, 5], 12, 32)]


def _reference_masked(queries, keys, padding_mask):
    hidden = padding_mask[:, None, None, :]                  # (B, 1, 1, T): one column per key
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    return torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)


def buggy_masked_weights(queries, keys, padding_mask):
    # queries, keys: (B, H, T, head_dim); padding_mask: (B, T), True at padding
    head_dim = queries.shape[-1]
    attn_scores = queries @ keys.transpose(-2, -1) / head_dim ** 0.5           # (B, H, T, T)
    hidden = padding_mask[:, None, :, None]                                    # (B, 1, T, 1)
    attn_scores = attn_scores.masked_fill(hidden, torch.finfo(attn_scores.dtype).min)
    return torch.softmax(attn_scores, dim=-1)


def _solution_masked(queries, keys, padding_mask):
    head_dim = queries.shape[-1]
    attn_scores = queries @ keys.transpose(-2, -1) / head_dim ** 0.5
    hidden = padding_mask[:, None, None, :]                  # (B, 1, 1, T): the mask hides columns (keys)
    attn_scores = attn_scores.masked_fill(hidden, torch.finfo(attn_scores.dtype).min)
    return torch.softmax(attn_scores, dim=-1)


def _filled_with_zero(queries, keys, padding_mask):
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    return torch.softmax(scores.masked_fill(padding_mask[:, None, None, :], 0.0), dim=-1)


masked_weights = SpotTheBug(
    "Spot the bug: attention weights of a padded batch",
    "masked_weights(queries, keys, padding_mask) should return every head's attention weights (B, H, T, T) for a "
    "padded batch: queries and keys are (B, H, T, head_dim), padding_mask (B, T) is True at padding; rows are "
    "queries i, columns keys j, scores scaled by 1/sqrt(head_dim). Every query, padded or not, must spread its "
    "weight over the real tokens of its sentence only: a padded key gets weight 0. The code below runs and its "
    "rows sum to 1, yet the weights are not what a padding mask should give. Find the bug and fix it.",
    reference=_reference_masked,
    cases=_masked_cases,
    hint=["Run the code on a batch of two sentences where the second is padded, and print one real query's row "
          "of the second sentence: how much weight lands on the padded columns?",
          "In a (B, H, T, T) table, which of the two T dimensions belongs to the keys? Check where the mask's T "
          "ends up after its indexing."],
    solution=_solution_masked,
    buggy=buggy_masked_weights,
    bug_message="padding_mask[:, None, :, None] hides ROWS, the padded queries, not COLUMNS, the padded keys: the "
                "real queries still put weight on [PAD], and each padded query spreads its weight evenly over "
                "every position. The mask belongs on the key axis: padding_mask[:, None, None, :].",
    mistakes=[Mistake(_filled_with_zero, "the padded keys' scores are set to 0, which still leaves them weight "
                                         "exp(0) in the softmax. Fill them with -inf (or a very large negative "
                                         "number) so that they get weight 0.")],
    name="lesson13.masked_weights",
)
