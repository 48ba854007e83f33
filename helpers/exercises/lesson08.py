"""Exercises for notebook 08: watching attention learn."""

from __future__ import annotations

import math

import torch

from ..toy_model import FetchTask
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["reversal_pattern", "position_accuracy", "weight_on_source", "head_weights"]


# --- 1. the pattern a perfect model would learn -----------------------------------------------------------
def _solution_reversal_pattern(num_tokens):
    pattern = torch.zeros(num_tokens, num_tokens)
    for i in range(num_tokens):
        pattern[i, num_tokens - 1 - i] = 1.0   # output i reads input T-1-i
    return pattern


reversal_pattern = FunctionExercise(
    "The ideal pattern of reversal",
    "write reversal_pattern(num_tokens) returning the (num_tokens, num_tokens) float attention weights of a "
    "model that reverses its input perfectly: row i (output position i) puts all its weight on the input "
    "position it must copy.",
    reference=lambda n: FetchTask.reversal(n).ideal_pattern() if n > 1 else torch.ones(1, 1),
    cases=lambda g: [Case(f"num_tokens={n}", (n,)) for n in (8, 5, 2)],
    hint="output 0 writes the last input token, output 1 the one before it, ...: one 1 per row, on the "
         "anti-diagonal. torch.eye(n).flip(...) does it in one line.",
    solution=_solution_reversal_pattern,
    mistakes=[
        Mistake(lambda n: torch.eye(n),
                "that is the identity: every output copies the input at its own position. Reversal reads "
                "the mirrored position, T - 1 - i."),
        Mistake(lambda n: torch.ones(n, n) / n,
                "uniform weights spread attention evenly: that is the pattern BEFORE training. A perfect "
                "model puts all of a row's weight on one key."),
    ],
)


# --- 2. accuracy per output position -----------------------------------------------------------------------
def _accuracy_cases(g: torch.Generator) -> list[Case]:
    def case(description, batch, tokens, vocab):
        logits = randn(g, batch, tokens, vocab)
        targets = torch.randint(0, vocab, (batch, tokens), generator=g)
        targets[: batch // 2] = logits[: batch // 2].argmax(dim=-1)   # half the rows right, for a mix
        return Case(description, (logits, targets))
    return [case("a batch of 6 sequences of 6 tokens, 6 token types", 6, 6, 6),
            case("a batch of 16 sequences of 8 tokens, 10 token types", 16, 8, 10),
            case("a batch of 4 sequences of 5 tokens, 3 token types", 4, 5, 3)]


def _solution_position_accuracy(logits, targets):
    predictions = logits.argmax(dim=-1)               # (B, T, V) -> (B, T)
    return (predictions == targets).float().mean(dim=0)  # average over the batch -> (T,)


position_accuracy = FunctionExercise(
    "Accuracy per position",
    "write position_accuracy(logits, targets) for logits (batch, num_tokens, vocab_size) and target ids "
    "(batch, num_tokens): the fraction of sequences whose prediction is right at each position, shape "
    "(num_tokens,).",
    reference=lambda logits, targets: (logits.argmax(-1) == targets).double().mean(0).float(),
    cases=_accuracy_cases,
    hint="the prediction is the argmax over the vocabulary (the last dimension); then average over the batch "
         "(dimension 0), not over positions.",
    solution=_solution_position_accuracy,
    mistakes=[
        Mistake(lambda logits, targets: (logits.argmax(-1) == targets).float().mean(dim=1),
                "you averaged over the positions (dim=1), which gives one number per sequence. Average over the "
                "batch (dim=0) to get one number per position."),
        Mistake(lambda logits, targets: (logits.argmax(1) == targets).float().mean(0),
                "your argmax runs over the positions (dim=1). A prediction is the most likely token: argmax over "
                "the vocabulary, dim=-1."),
    ],
)


# --- 3. how much attention lands on the right input --------------------------------------------------------
def _weights_cases(g: torch.Generator) -> list[Case]:
    def weights(*shape):
        return torch.softmax(randn(g, *shape, scale=2.0), dim=-1)
    return [Case("batch 3, 2 heads, reversal of 6 tokens", (weights(3, 2, 6, 6), torch.arange(5, -1, -1))),
            Case("batch 2, 4 heads, rotation by 1 of 5 tokens", (weights(2, 4, 5, 5), torch.tensor([4, 0, 1, 2, 3])))]


def _solution_weight_on_source(attn_weights, source_positions):
    num_tokens = attn_weights.shape[-1]
    rows = torch.arange(num_tokens)
    on_source = attn_weights[..., rows, source_positions]   # (B, H, T): weight of output i on its source key
    return on_source.mean(dim=(0, 2))                         # average over batch and positions -> (H,)


weight_on_source = FunctionExercise(
    "Weight on the right input",
    "write weight_on_source(attn_weights, source_positions): for weights (batch, num_heads, T, T) and the (T,) "
    "input position each output must copy, return each head's average weight on that position, shape "
    "(num_heads,). 1.0 means the head learned the ideal pattern.",
    reference=lambda w, src: torch.stack([w[:, h, torch.arange(w.shape[-1]), src].mean() for h in range(w.shape[1])]),
    cases=_weights_cases,
    hint="index rows and columns together: attn_weights[..., torch.arange(T), source_positions] picks weight "
         "(i, source[i]) for every i.",
    solution=_solution_weight_on_source,
    mistakes=[
        Mistake(lambda w, src: w[..., src, torch.arange(w.shape[-1])].mean(dim=(0, 2)),
                "you swapped rows and columns: rows are output positions (queries), columns input positions "
                "(keys). Pick weight (i, source[i])."),
        Mistake(lambda w, src: w[..., torch.arange(w.shape[-1]), src].mean(dim=(0, 1)),
                "you averaged over the heads, so the result has one number per position. Average over the batch "
                "and the positions: dim=(0, 2)."),
    ],
)


# --- 4. spot the bug: a softmax over the wrong dimension of a (B, H, T, T) tensor ---------------------------
def _head_cases(g: torch.Generator) -> list[Case]:
    return [Case("batch 2, 2 heads, 6 tokens, head_dim 4", (randn(g, 2, 2, 6, 4), randn(g, 2, 2, 6, 4))),
            Case("batch 1, 3 heads, 4 tokens, head_dim 8", (randn(g, 1, 3, 4, 8), randn(g, 1, 3, 4, 8)))]


def buggy_head_weights(queries, keys):
    head_dim = queries.shape[-1]
    attn_scores = queries @ keys.transpose(2, 3)          # (B, H, T, D) @ (B, H, D, T) -> (B, H, T, T)
    return torch.softmax(attn_scores / math.sqrt(head_dim), dim=2)


def _solution_head_weights(queries, keys):
    head_dim = queries.shape[-1]
    attn_scores = queries @ keys.transpose(2, 3)
    return torch.softmax(attn_scores / math.sqrt(head_dim), dim=-1)   # over the keys


head_weights = SpotTheBug(
    "Spot the bug: heatmaps of every head",
    "head_weights(queries, keys) computes the (bidirectional) attention weights of every head for the heatmaps, "
    "from (batch, num_heads, num_tokens, head_dim) tensors. Its heatmaps look plausible, but the rows do not sum "
    "to 1. Fix it.",
    reference=lambda q, k: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1),
    cases=_head_cases,
    hint="in (batch, heads, queries, keys), which dimension is the keys?",
    solution=_solution_head_weights,
    buggy=buggy_head_weights,
    bug_message="softmax(dim=2) normalises over the queries of (batch, heads, queries, keys): each column sums to "
                "1, not each row. Use dim=-1.",
)
