"""Exercises for notebook 08: watching attention learn.

1. predict the pattern: the ideal attention of rotation, built without a loop;
2. compute an accuracy per output position;
3. measure how much of each head's weight lands on the right input;
4. spot the bug: a position embedding looked up by the wrong index.
"""

from __future__ import annotations

import torch

from ..toy_model import FetchTask
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids, no_loops

__all__ = ["rotation_pattern", "position_accuracy", "weight_on_source", "position_lookup"]


# --- 1. predict the pattern: rotation, without a loop ---------------------------------------------------------
def _solution_rotation_pattern(num_tokens, offset):
    rows = torch.arange(num_tokens)                 # output positions i
    sources = (rows - offset) % num_tokens          # the input position each output copies
    pattern = torch.zeros(num_tokens, num_tokens)
    pattern[rows, sources] = 1.0                    # one 1 per row, at (i, source(i))
    return pattern


rotation_pattern = FunctionExercise(
    "The ideal pattern of rotation",
    "write rotation_pattern(num_tokens, offset) returning the (num_tokens, num_tokens) float attention weights of "
    "a model that rotates its input perfectly by `offset` (output i writes input (i - offset) mod num_tokens), "
    "without a Python loop and without the course's FetchTask.ideal_pattern.",
    reference=lambda n, offset: FetchTask.rotation(n, offset).ideal_pattern(),
    cases=lambda g: [Case("num_tokens=8, offset=3", (8, 3)), Case("num_tokens=5, offset=1", (5, 1)),
                     Case("num_tokens=6, offset=0", (6, 0)), Case("num_tokens=4, offset=6", (4, 6))],
    hint=["Draw it first: for num_tokens=5 and offset=2, in which column is the 1 of row 0? Of row 2? What happens "
          "to row 0's source when i - offset is negative?",
          "Start from a matrix whose 1s you know (the identity) and ask how far, and in which direction, each "
          "row's 1 must move. torch has a function that moves entries along a dimension and wraps them round."],
    solution=_solution_rotation_pattern,
    mistakes=[
        Mistake(lambda n, offset: FetchTask.rotation(n, -offset).ideal_pattern(),
                "your pattern rotates the other way: row i has its 1 in column (i + offset) mod T. Output i must "
                "read input (i - offset) mod T (for offset 3, output 3 reads input 0)."),
        Mistake(lambda n, offset: torch.diag(torch.ones(n - offset % n), -(offset % n)),
                "some rows have no 1 at all: their source, i - offset, is negative. A rotation wraps round: "
                "take it modulo T."),
        Mistake(lambda n, offset: torch.eye(n),
                "that is the identity: every output copies its own position. That is rotation by 0 only."),
    ],
    rules=[no_loops(), forbids("helpers.toy_model.FetchTask.ideal_pattern",
                               why="Build the pattern yourself from the rule of the task.")],
)


# --- 2. accuracy per output position -------------------------------------------------------------------------
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
    predictions = logits.argmax(dim=-1)                   # (B, T, V) -> (B, T): the letter each position writes
    return (predictions == targets).float().mean(dim=0)   # fraction right over the batch -> (T,)


position_accuracy = FunctionExercise(
    "Accuracy per position",
    "write position_accuracy(logits, targets) for logits (batch, num_tokens, vocab_size) and target ids "
    "(batch, num_tokens), without a Python loop: the fraction of sequences whose prediction is right at each "
    "position, shape (num_tokens,).",
    reference=lambda logits, targets: (logits.argmax(-1) == targets).double().mean(0).float(),
    cases=_accuracy_cases,
    hint=["Two steps: first one predicted letter per (sequence, position), then a fraction per position. Which "
          "dimension of the logits holds the letters, and which dimension do the sequences run along?",
          "A comparison gives True/False; the mean of a boolean tensor needs a float tensor first."],
    solution=_solution_position_accuracy,
    mistakes=[
        Mistake(lambda logits, targets: (logits.argmax(-1) == targets).float().mean(dim=1),
                "you averaged over the positions (dim=1), which gives one number per sequence. Average over the "
                "batch to get one number per position."),
        Mistake(lambda logits, targets: (logits.argmax(1) == targets).float().mean(0),
                "your argmax runs over the positions (dim=1). A prediction is the most likely letter: the argmax "
                "over the vocabulary, the last dimension."),
        Mistake(lambda logits, targets: (logits.argmax(-1) == targets).float().sum(0),
                "you counted the right answers at each position; an accuracy is a fraction of the batch."),
    ],
    rules=[no_loops()],
)


# --- 3. how much attention lands on the right input ----------------------------------------------------------
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
    "write weight_on_source(attn_weights, source_positions) without a Python loop: for weights "
    "(batch, num_heads, T, T) and the (T,) input position each output must copy, return each head's average "
    "weight on that position, shape (num_heads,). 1.0 means the head learned the ideal pattern.",
    reference=lambda w, src: torch.stack([w[:, h, torch.arange(w.shape[-1]), src].mean() for h in range(w.shape[1])]),
    cases=_weights_cases,
    hint=["For one head and one sequence you need T numbers, one per row: the weight of row i in column "
          "source_positions[i]. Section 4 of the lesson picked the same numbers for reversal in another way.",
          "Indexing with two index tensors of equal length, one for the rows and one for the columns, picks one "
          "element per (row, column) pair."],
    solution=_solution_weight_on_source,
    mistakes=[
        Mistake(lambda w, src: w[..., src, torch.arange(w.shape[-1])].mean(dim=(0, 2)),
                "you swapped rows and columns: rows are output positions (queries), columns input positions "
                "(keys). Pick the weight in row i, column source[i]."),
        Mistake(lambda w, src: w[..., torch.arange(w.shape[-1]), src].mean(dim=(0, 1)),
                "you averaged over the heads, so the result has one number per position. Keep the heads; average "
                "over the batch and the positions."),
        Mistake(lambda w, src: w[..., src].mean(dim=(0, 2, 3)),
                "you averaged whole columns: every output's weight on every source key. Each output position "
                "counts only its own source, one weight per row."),
    ],
    rules=[no_loops()],
)


# --- 4. spot the bug: the position table looked up by the letter ------------------------------------------------
def _embed_cases(g: torch.Generator) -> list[Case]:
    def case(description, batch, tokens, vocab, context_length, width):
        token_ids = torch.randint(0, vocab, (batch, tokens), generator=g)
        token_ids[:, 1] = token_ids[:, 0]   # a repeated letter in every sequence
        return Case(description, (token_ids, randn(g, vocab, width), randn(g, context_length, width)))
    return [case("3 sequences of 8 tokens, 10 letters, a table of 12 positions", 3, 8, 10, 12, 4),
            case("2 sequences of 5 tokens, 6 letters, a table of 8 positions", 2, 5, 6, 8, 3)]


def buggy_embed(token_ids, token_table, position_table):
    # token_ids (B, T); token_table (vocab_size, d); position_table (context_length, d), context_length >= T
    token_vecs = token_table[token_ids]        # (B, T) -> (B, T, d): the vector of each letter
    position_vecs = position_table[token_ids]  # (B, T) -> (B, T, d): the vector of each position
    return token_vecs + position_vecs


def _solution_embed(token_ids, token_table, position_table):
    num_tokens = token_ids.shape[1]
    token_vecs = token_table[token_ids]                          # (B, T, d)
    position_vecs = position_table[torch.arange(num_tokens)]     # (T, d): row t belongs to position t
    return token_vecs + position_vecs                            # (B, T, d) + (T, d) -> (B, T, d)


position_lookup = SpotTheBug(
    "Spot the bug: position embeddings",
    "embed(token_ids, token_table, position_table) should give every token its letter's vector plus the vector of "
    "the position it stands at, like the model of this notebook. A model built on this version trains without an "
    "error, yet it cannot learn to reverse. Find the bug and fix it.",
    reference=lambda ids, tokens, positions: tokens[ids] + positions[: ids.shape[1]],
    cases=_embed_cases,
    hint=["Take a sequence with the same letter at positions 0 and 1. Which two position vectors do they get?",
          "Section 6 of the lesson showed what a model without positions cannot do. What makes this version "
          "equivalent to it?"],
    solution=_solution_embed,
    buggy=buggy_embed,
    bug_message="position_table[token_ids] looks the position table up by the letter, not by where it stands: equal "
                "letters get the same 'position' and a letter gets the same one wherever it is, so the model is "
                "as blind to order as the model without positions. Row t of the table belongs to position t.",
    mistakes=[
        Mistake(lambda ids, tokens, positions: tokens[ids],
                "your vectors carry no position at all: add each position's row of the position table."),
        Mistake(lambda ids, tokens, positions: tokens[ids] + positions[: ids.shape[1]].flip(0),
                "you gave position t the row of position T - 1 - t. Row t of the table belongs to position t."),
    ],
)
