"""Exercises for notebook 08: watching attention learn.

1. read the training record: the step at which each output position locks onto its source;
2. predict a ceiling: the best accuracy any model without positions can reach on reversal;
3. spot the bug: a forward pass that trains no better than a model without positions.
"""

from __future__ import annotations

import torch

from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids, no_loops

__all__ = ["lock_steps", "blind_ceiling", "positions_forward"]


# --- 1. the step at which each row locks ------------------------------------------------------------------------
def _curves_cases(g: torch.Generator) -> list[Case]:
    def curves(num_checkpoints, num_tokens, every):
        # Rising curves from about 1/T towards 1, each with its own start, plus some noise.
        steps = torch.arange(num_checkpoints) * every
        starts = torch.randint(1, num_checkpoints - 2, (num_tokens,), generator=g)
        rise = torch.sigmoid((torch.arange(num_checkpoints).unsqueeze(1) - starts) * 1.5)   # (S, T)
        row_weights = (0.12 + 0.86 * rise + 0.03 * randn(g, num_checkpoints, num_tokens)).clamp(0.0, 1.0)
        row_weights[row_weights.sub(0.5).abs() < 1e-3] = 0.52   # no value sits exactly on the threshold
        return row_weights, steps
    row_weights, steps = curves(12, 6, 4)
    row_weights[:, 0] = torch.tensor([0.12, 0.2, 0.55, 0.62, 0.45, 0.4, 0.58, 0.7, 0.8, 0.9, 0.95, 0.97])  # dips
    row_weights[:, 1] = torch.linspace(0.1, 0.4, 12)   # never gets there
    dips = Case("12 checkpoints every 4 steps, 6 rows, one row that dips below 0.5 again, one that never locks",
                (row_weights, steps))
    row_weights, steps = curves(26, 8, 4)
    smooth = Case("26 checkpoints every 4 steps, 8 rows", (row_weights, steps))
    row_weights, steps = curves(9, 5, 10)
    row_weights[:, 2] = 0.9    # locked from the start
    row_weights[:, 4] = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.45, 0.48, 0.49, 0.6, 0.3])   # lost at the end
    early = Case("9 checkpoints every 10 steps, 5 rows, one locked from step 0, one that falls at the end",
                 (row_weights, steps))
    row_weights, _ = curves(7, 4, 1)
    row_weights[:, 3] = torch.tensor([0.7, 0.8, 0.9, 0.4, 0.6, 0.7, 0.9])   # locked early, dips, locks again
    irregular = Case("7 checkpoints at the irregular steps 5, 6, 9, 20, 21, 50, 64 (none at 0), 4 rows",
                     (row_weights, torch.tensor([5, 6, 9, 20, 21, 50, 64])))
    return [dips, smooth, early, irregular]


def _reference_lock_steps(row_weights, steps):
    result = []
    for row in range(row_weights.shape[1]):
        above = (row_weights[:, row] > 0.5).tolist()
        lock = -1
        for index in range(len(above) - 1, -1, -1):   # walk back from the end while the row stays above
            if not above[index]:
                break
            lock = int(steps[index])
        result.append(lock)
    return torch.tensor(result)


def _solution_lock_steps(row_weights, steps):
    above = row_weights > 0.5                                # (S, T): above the threshold at each checkpoint?
    stays = above.flip(0).cumprod(dim=0).flip(0).bool()     # (S, T): above here AND at every later checkpoint
    first = stays.int().argmax(dim=0)                        # (T,): the first checkpoint from which it stays
    return torch.where(stays[-1], steps[first], -1)          # rows not above at the end never locked


def _first_crossing(row_weights, steps):
    above = row_weights > 0.5
    return torch.where(above.any(dim=0), steps[above.int().argmax(dim=0)], -1)


def _indices_not_steps(row_weights, steps):
    stays = (row_weights > 0.5).flip(0).cumprod(dim=0).flip(0).bool()
    return torch.where(stays[-1], stays.int().argmax(dim=0), -1)


def _no_minus_one(row_weights, steps):
    stays = (row_weights > 0.5).flip(0).cumprod(dim=0).flip(0).bool()
    return steps[stays.int().argmax(dim=0)]


lock_steps = FunctionExercise(
    "The step at which each row locks",
    "write lock_steps(row_weights, steps): row_weights (num_checkpoints, num_tokens) holds one head's weight on the "
    "source of each output position at each checkpoint, steps (num_checkpoints,) the training step of each "
    "checkpoint. Return a tensor of shape (num_tokens,) (any integer or float dtype): for every output position, "
    "the training step from which its weight stays above 0.5 at every later checkpoint, or -1 if it is not above "
    "0.5 at the last checkpoint. No Python loop.",
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
    "write blind_ceiling(token_ids, vocab_size): token_ids (batch, num_tokens) are reversal inputs, num_tokens "
    "even. A model that cannot see positions answers at each position from that position's letter and the "
    "letter counts of its sequence (how many times each letter occurs, not where). For every sequence and output "
    "position, take the probability that the best such answer is right when the letters of that sequence stand in "
    "a random order (every order equally likely); return the mean over all positions of all sequences, as a "
    "0-dim tensor. No Python loop.",
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


# --- 3. spot the bug: positions added after the attention --------------------------------------------------------
def _model(seed: int, num_tokens: int, vocab_size: int, d_model: int, num_heads: int):
    from ..toy_model import AttentionOnlyModel
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AttentionOnlyModel(vocab_size, num_tokens, d_model, num_heads).eval()
        with torch.no_grad():   # position vectors as large as a trained model's, so every mistake shows
            model.position_embedding.weight.normal_(0.0, 1.0)
    return model


def _model_cases(g: torch.Generator) -> list[Case]:
    def case(description, batch, num_tokens, vocab_size, d_model, num_heads):
        model = _model(int(torch.randint(0, 2**31 - 1, (1,), generator=g)), num_tokens, vocab_size, d_model,
                       num_heads)
        return Case(description, (model, torch.randint(0, vocab_size, (batch, num_tokens), generator=g)))
    return [case("the lesson's sizes: 4 sequences of 8 tokens, 10 letters, d_model 32, 2 heads", 4, 8, 10, 32, 2),
            case("3 sequences of 5 tokens, 6 letters, d_model 12, 3 heads", 3, 5, 6, 12, 3),
            case("1 sequence of 8 tokens, 10 letters, d_model 16, 1 head", 1, 8, 10, 16, 1)]


def _reference_forward(model, token_ids):
    with torch.no_grad():
        return model(token_ids)


def buggy_forward(model, token_ids):
    # token_ids (B, T) long -> logits (B, T, vocab_size), from the parts of an AttentionOnlyModel
    x = model.token_embedding(token_ids)                            # (B, T) -> (B, T, d_model)
    context_vecs = model.attention(x)                               # (B, T, d_model)
    context_vecs = context_vecs + model.position_embedding.weight   # (B, T, d_model) + (T, d_model)
    return model.unembed(context_vecs)                              # (B, T, d_model) -> (B, T, vocab_size)


def _solution_forward(model, token_ids):
    x = model.token_embedding(token_ids)                            # (B, T) -> (B, T, d_model)
    x = x + model.position_embedding.weight                         # positions BEFORE the scores s_ij
    context_vecs = model.attention(x)                               # (B, T, d_model)
    return model.unembed(context_vecs)                              # (B, T, d_model) -> (B, T, vocab_size)


def _no_positions(model, token_ids):
    return model.unembed(model.attention(model.token_embedding(token_ids)))


def _positions_twice(model, token_ids):
    x = model.token_embedding(token_ids) + model.position_embedding.weight
    return model.unembed(model.attention(x) + model.position_embedding.weight)


positions_forward = SpotTheBug(
    "Spot the bug: a model that stalls at a third",
    "forward(model, token_ids) should compute the logits (B, T, vocab_size) of an AttentionOnlyModel from its "
    "parts, model.token_embedding, model.position_embedding, model.attention and model.unembed, without calling "
    "model(...) itself. This version uses every part and returns logits of the right shape, yet a model trained "
    "through it stalls at about a third on reversal, like section 6's model. Find the bug and fix it.",
    reference=_reference_forward,
    cases=_model_cases,
    hint=["Pick two positions that hold the same letter, say C at positions 2 and 6. In this code, do their "
          "queries differ? Do their attention weights?",
          "An output is right only if its attention picked the right key. Which of the parts can tell the scores "
          "s_ij where token i and token j stand?"],
    solution=_solution_forward,
    buggy=buggy_forward,
    bug_message="the position vectors are added to the context vectors, AFTER the attention. The queries and keys "
                "are then made from the letters alone, so the weights cannot depend on where a token stands: the "
                "attention sees a bag of tokens, as in section 6, and the late position vector only shifts each "
                "output's logits by the same amount whatever the input.",
    mistakes=[
        Mistake(_no_positions, "your logits use no position vectors at all: that is section 6's model, which "
                               "cannot reverse. The positions belong in the model, at the right place."),
        Mistake(_positions_twice, "you add the position vectors twice, before and after the attention. The model "
                                  "adds them once."),
    ],
    rules=[forbids("helpers.toy_model.AttentionOnlyModel.forward",
                   why="Build the logits from the model's parts, as the model's own forward does.")],
)
