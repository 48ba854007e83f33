"""Exercises for notebook 08: watching attention learn.

1. read the training record: the step at which each output position locks onto its source;
2. predict a ceiling: the best accuracy any model without positions can reach on reversal;
3. spot the bug: a position embedding looked up by the wrong index.
"""

from __future__ import annotations

import torch

from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, no_loops

__all__ = ["lock_steps", "blind_ceiling", "position_lookup"]


# --- 1. the step at which each row locks ------------------------------------------------------------------------
def _curves_cases(g: torch.Generator) -> list[Case]:
    def curves(num_checkpoints, num_tokens, every):
        # Rising curves from about 1/T towards 1, each with its own start, plus some noise.
        steps = torch.arange(num_checkpoints) * every
        starts = torch.randint(1, num_checkpoints - 2, (num_tokens,), generator=g)
        rise = torch.sigmoid((torch.arange(num_checkpoints).unsqueeze(1) - starts) * 1.5)   # (S, T)
        on_source = (0.12 + 0.86 * rise + 0.03 * randn(g, num_checkpoints, num_tokens)).clamp(0.0, 1.0)
        on_source[on_source.sub(0.5).abs() < 1e-3] = 0.52   # no value sits exactly on the threshold
        return on_source, steps
    on_source, steps = curves(12, 6, 4)
    on_source[:, 0] = torch.tensor([0.12, 0.2, 0.55, 0.62, 0.45, 0.4, 0.58, 0.7, 0.8, 0.9, 0.95, 0.97])  # dips
    on_source[:, 1] = torch.linspace(0.1, 0.4, 12)   # never gets there
    dips = Case("12 checkpoints every 4 steps, 6 rows, one row that dips below 0.5 again, one that never locks",
                (on_source, steps))
    on_source, steps = curves(26, 8, 4)
    smooth = Case("26 checkpoints every 4 steps, 8 rows", (on_source, steps))
    on_source, steps = curves(9, 5, 10)
    on_source[:, 2] = 0.9    # locked from the start
    on_source[:, 4] = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.45, 0.48, 0.49, 0.6, 0.3])   # lost at the end
    early = Case("9 checkpoints every 10 steps, 5 rows, one locked from step 0, one that falls at the end",
                 (on_source, steps))
    return [dips, smooth, early]


def _reference_lock_steps(on_source, steps):
    result = []
    for row in range(on_source.shape[1]):
        above = (on_source[:, row] > 0.5).tolist()
        lock = -1
        for index in range(len(above) - 1, -1, -1):   # walk back from the end while the row stays above
            if not above[index]:
                break
            lock = int(steps[index])
        result.append(lock)
    return torch.tensor(result)


def _solution_lock_steps(on_source, steps):
    above = on_source > 0.5                                  # (S, T): above the threshold at each checkpoint?
    stays = above.flip(0).cumprod(dim=0).flip(0).bool()     # (S, T): above here AND at every later checkpoint
    first = stays.int().argmax(dim=0)                        # (T,): the first checkpoint from which it stays
    return torch.where(stays[-1], steps[first], -1)          # rows not above at the end never locked


def _first_crossing(on_source, steps):
    above = on_source > 0.5
    return torch.where(above.any(dim=0), steps[above.int().argmax(dim=0)], -1)


def _indices_not_steps(on_source, steps):
    stays = (on_source > 0.5).flip(0).cumprod(dim=0).flip(0).bool()
    return torch.where(stays[-1], stays.int().argmax(dim=0), -1)


def _no_minus_one(on_source, steps):
    stays = (on_source > 0.5).flip(0).cumprod(dim=0).flip(0).bool()
    return steps[stays.int().argmax(dim=0)]


lock_steps = FunctionExercise(
    "The step at which each row locks",
    "write lock_steps(on_source, steps): on_source (num_checkpoints, num_tokens) holds one head's weight on the "
    "source of each output position at each checkpoint, steps (num_checkpoints,) the training step of each "
    "checkpoint. Return, for every output position, the training step from which its weight stays above 0.5 at "
    "every later checkpoint, or -1 if it is not above 0.5 at the last checkpoint. Shape (num_tokens,), no Python "
    "loop.",
    reference=_reference_lock_steps,
    cases=_curves_cases,
    hint=["Sketch a row whose weight goes 0.2, 0.6, 0.4, 0.7, 0.9. At which checkpoint does it lock, and what do "
          "you need to know about the checkpoints AFTER it to say so?",
          "'Above here and at every later checkpoint' is a question you can answer for all checkpoints at once if "
          "you run through them from the end backwards. Which cumulative operation stays True only as long as "
          "every value so far was True?"],
    solution=_solution_lock_steps,
    mistakes=[
        Mistake(_first_crossing,
                "you found the first checkpoint above 0.5. A row can cross 0.5 and fall back below it: it locks at "
                "the first checkpoint from which it STAYS above."),
        Mistake(_indices_not_steps,
                "your numbers are checkpoint indices (0, 1, 2, ...), not training steps. Look the step up in "
                "`steps`."),
        Mistake(_no_minus_one,
                "a row that is not above 0.5 at the last checkpoint never locked: give it -1, not a step."),
    ],
    rules=[no_loops()],
)


# --- 2. the best accuracy possible without positions ---------------------------------------------------------
def _blind_cases(g: torch.Generator) -> list[Case]:
    def case(description, batch, tokens, vocab):
        return Case(description, (torch.randint(0, vocab, (batch, tokens), generator=g), vocab))
    few = torch.tensor([[0, 0, 1, 2], [1, 1, 1, 1], [0, 1, 2, 3]])
    return [Case("3 sequences of 4 tokens, 4 letters: [[A A B C], [B B B B], [A B C D]]", (few, 4)),
            case("200 sequences of 8 tokens, 10 letters", 200, 8, 10),
            case("50 sequences of 6 tokens, 3 letters", 50, 6, 3)]


def _reference_blind_ceiling(token_ids, vocab_size):
    num_tokens = token_ids.shape[1]
    total = 0.0
    for sequence in token_ids.tolist():
        for own in sequence:
            others = list(sequence)
            others.remove(own)   # the source is one of the other T - 1 tokens, each equally likely
            total += max(others.count(letter) for letter in range(vocab_size)) / (num_tokens - 1)
    return torch.tensor(total / token_ids.numel())


def _solution_blind_ceiling(token_ids, vocab_size):
    num_tokens = token_ids.shape[1]
    own = torch.nn.functional.one_hot(token_ids, vocab_size)       # (B, T, vocab_size): each position's letter
    counts = own.sum(dim=1, keepdim=True)                          # (B, 1, vocab_size): letters in the sequence
    others = counts - own                                          # (B, T, vocab_size): letters at other positions
    best = others.max(dim=-1).values / (num_tokens - 1)            # (B, T): chance that the best guess is right
    return best.mean()


def _counts(token_ids, vocab_size):
    own = torch.nn.functional.one_hot(token_ids, vocab_size)
    return own, own.sum(dim=1, keepdim=True)


blind_ceiling = FunctionExercise(
    "The best accuracy possible without positions",
    "write blind_ceiling(token_ids, vocab_size): token_ids (batch, num_tokens) are random reversal inputs, "
    "num_tokens even. Return, as a 0-dim tensor, the expected accuracy on them of the best possible model that "
    "cannot see positions (its answer at a position may depend only on that position's letter and on which "
    "letters the sequence holds). No Python loop.",
    reference=_reference_blind_ceiling,
    cases=_blind_cases,
    hint=["Put yourself in the model's place at one output position: you see your own letter and the bag of "
          "letters of the sequence, not where they stand. Where can your source be, and how likely is each "
          "letter to be there?",
          "With an even number of tokens, no output position is its own source. So which tokens are candidates "
          "for the source, and how many of them are there?"],
    solution=_solution_blind_ceiling,
    mistakes=[
        Mistake(lambda ids, v: (_counts(ids, v)[1].max(dim=-1).values / ids.shape[1]).float().mean(),
                "you let the source be any of the T tokens, the output's own included. With T even, no output "
                "position is its own source: it is one of the OTHER T - 1 tokens."),
        Mistake(lambda ids, v: (_counts(ids, v)[1].max(dim=-1).values / (ids.shape[1] - 1)).float().mean(),
                "you counted the output's own letter among the candidates for its source. The source is another "
                "position: take the output's own token out of the count."),
        Mistake(lambda ids, v: ((_counts(ids, v)[1] - _counts(ids, v)[0]).max(dim=-1).values
                                / ids.shape[1]).float().mean(),
                "the source is one of the other T - 1 tokens, each equally likely: divide by T - 1."),
        Mistake(lambda ids, v: torch.tensor(1.0 / v),
                "that is chance, a blind guess among all letters. The model sees which letters the sequence holds: "
                "it can do better."),
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
