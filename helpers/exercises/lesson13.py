"""Exercises for notebook 13: a real pretrained model (all-MiniLM-L6-v2) run by the course's modules.

1. a next-token score of every head over a padded batch of sentences (padding left out);
2. spot the bug: a head's weights computed from a checkpoint's projection weights without the transpose.
"""

from __future__ import annotations

import math

import torch

from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["batch_next_token_score", "head_weights"]


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


# --- 2. spot the bug: a checkpoint's weight without the transpose -----------------------------------------------------
def _weights_cases(g: torch.Generator) -> list[Case]:
    def case(description, batch, tokens, d_model, heads):
        x = torch.randn(batch, tokens, d_model, generator=g)
        q_w, k_w = (torch.randn(d_model, d_model, generator=g) / math.sqrt(d_model) for _ in range(2))
        q_b, k_b = (torch.randn(d_model, generator=g) * 0.1 for _ in range(2))
        return Case(description, (x, q_w, q_b, k_w, k_b, heads))
    return [case("d_model 8, 2 heads, 5 tokens", 1, 5, 8, 2),
            case("d_model 12, 3 heads, a batch of 2, 4 tokens", 2, 4, 12, 3),
            case("d_model 6, 1 head, 6 tokens", 1, 6, 6, 1),
            case("d_model 384, 12 heads of width 32 (the real model's shapes), 7 tokens", 1, 7, 384, 12)]


def _reference_head_weights(x, query_weight, query_bias, key_weight, key_bias, num_heads):
    linear = torch.nn.functional.linear  # x @ weight.T + bias, as nn.Linear computes
    batch_size, num_tokens, d_model = x.shape
    head_dim = d_model // num_heads
    queries = linear(x, query_weight, query_bias).view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    keys = linear(x, key_weight, key_bias).view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    return torch.softmax(queries @ keys.transpose(-2, -1) / math.sqrt(head_dim), dim=-1)


def buggy_head_weights(x, query_weight, query_bias, key_weight, key_bias, num_heads):
    # query_weight, key_weight: (d_model, d_model); biases: (d_model,), read from the checkpoint
    batch_size, num_tokens, d_model = x.shape
    head_dim = d_model // num_heads
    queries = x @ query_weight + query_bias                                 # (B, T, d_model)
    keys = x @ key_weight + key_bias
    queries = queries.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)   # (B, H, T, D)
    keys = keys.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    attn_scores = queries @ keys.transpose(-2, -1) / head_dim ** 0.5       # (B, H, T, T)
    return torch.softmax(attn_scores, dim=-1)


def _solution_head_weights(x, query_weight, query_bias, key_weight, key_bias, num_heads):
    batch_size, num_tokens, d_model = x.shape
    head_dim = d_model // num_heads
    queries = x @ query_weight.T + query_bias           # nn.Linear stores (out_features, in_features)
    keys = x @ key_weight.T + key_bias
    queries = queries.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    keys = keys.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    return torch.softmax(queries @ keys.transpose(-2, -1) / head_dim ** 0.5, dim=-1)


def _one_transposed(x, query_weight, query_bias, key_weight, key_bias, num_heads):
    return _reference_head_weights(x, query_weight, query_bias, key_weight.T, key_bias, num_heads)


head_weights = SpotTheBug(
    "Spot the bug: loading a checkpoint's projection weights",
    "head_weights(x, query_weight, query_bias, key_weight, key_bias, num_heads) should return the attention "
    "weights (B, H, T, T) of every head (no mask) for x (B, T, d_model), where query_weight and key_weight "
    "(d_model, d_model) and the biases (d_model,) were read from a checkpoint that stores nn.Linear layers "
    "(weight shape (out_features, in_features)). The code below runs and returns weights whose rows sum to 1, "
    "yet they are not the model's. Find the bug and fix it.",
    reference=_reference_head_weights,
    cases=_weights_cases,
    hint=["Both weights are square, so a shape check cannot catch this. Load layer 0's tensors from the real "
          "model (encoder.blocks[0].attention.W_query.weight, .bias, and W_key's) and compare your queries with "
          "encoder.blocks[0].attention.W_query(x) on a small x.",
          "Where the two differ, ask how an nn.Linear layer turns its stored weight into an output."],
    solution=_solution_head_weights,
    buggy=buggy_head_weights,
    bug_message="x @ query_weight multiplies by the weight as stored, but nn.Linear stores (out_features, "
                "in_features) and computes x @ weight.T + bias. A square matrix hides the mistake: the shapes fit, "
                "the rows still sum to 1, and every head looks at the wrong tokens. Use query_weight.T and "
                "key_weight.T (or torch.nn.functional.linear).",
    mistakes=[Mistake(_one_transposed, "only one of the two weights is transposed: both query_weight and "
                                       "key_weight need .T.")],
    name="lesson13.head_weights",
)
