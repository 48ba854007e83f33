"""Exercises for notebook 13: a real pretrained model (all-MiniLM-L6-v2) run by the course's modules.

1. a next-token score of every head over a padded batch of sentences (padding left out);
2. spot the bug: a sentence vector from its words alone, [CLS] and [SEP] left out of a padded batch.
"""

from __future__ import annotations

import torch

from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["batch_next_token_score", "word_pool"]


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


# --- 2. spot the bug: a sentence vector from its words alone --------------------------------------------------------
class _PoolCase(Case):
    """A padded batch of token vectors; the task says to leave both inputs unchanged, and the checker looks."""

    def after_call(self, args: tuple, kwargs: dict) -> str | None:
        for name, given, original in zip(("last_hidden", "padding_mask"), args, self.args):
            if isinstance(given, torch.Tensor) and not torch.equal(given, original):
                return (f"your function changed its input `{name}` in place, and the task says to leave both inputs "
                        f"unchanged: the caller still needs them (the same padding_mask goes to the model and to "
                        f"the pooling). Build a new tensor instead: `~padding_mask` is a new one, while "
                        f"`padding_mask[:, 0] = True` or `last_hidden.masked_fill_(...)` write into the caller's.")
        return None


def _pool_cases(g: torch.Generator) -> list[Case]:
    def case(description, lengths, width):
        num_tokens = max(lengths)
        last_hidden = torch.randn(len(lengths), num_tokens, width, generator=g) + 0.5   # (B, T, d_model)
        padding_mask = torch.arange(num_tokens)[None, :] >= torch.tensor(lengths)[:, None]
        return _PoolCase(description, (last_hidden, padding_mask))
    return [case("two sentences of 7 and 4 tokens ([CLS] and [SEP] included), vectors of width 6", [7, 4], 6),
            case("three sentences of 5, 9 and 3 tokens, width 8", [5, 9, 3], 8),
            case("no padding: two sentences of 6 tokens each, width 4", [6, 6], 4),
            case("a sentence without words ([CLS] [SEP] only) and one of 5 tokens, width 4", [2, 5], 4),
            case("the real model's width 384, sentences of 12, 3 and 8 tokens", [12, 3, 8], 384)]


def _word_mask(padding_mask):                            # (B, T): True at each sentence's words
    lengths = (~padding_mask).sum(dim=1, keepdim=True)   # (B, 1): real tokens, [CLS] and [SEP] included
    positions = torch.arange(padding_mask.shape[1])[None, :]
    return (positions > 0) & (positions < lengths - 1)


def _pool(last_hidden, keep, clamp=True, normalise=True):
    keep = keep.unsqueeze(-1).to(last_hidden.dtype)      # (B, T, 1)
    count = keep.sum(dim=1).clamp(min=1) if clamp else keep.sum(dim=1)
    mean = (last_hidden * keep).sum(dim=1) / count       # (B, d_model)
    return torch.nn.functional.normalize(mean, dim=-1) if normalise else mean


def _reference_pool(last_hidden, padding_mask):
    return _pool(last_hidden, _word_mask(padding_mask))


def buggy_word_pool(last_hidden, padding_mask):
    # last_hidden: (B, T, d_model) token vectors; padding_mask: (B, T), True at padding
    words = ~padding_mask                                                      # (B, T): the real tokens
    words[:, 0] = False                                                        # leave out [CLS] ...
    words[:, -1] = False                                                       # ... and [SEP]
    keep = words.unsqueeze(-1).to(last_hidden.dtype)                           # (B, T, 1)
    mean = (last_hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)      # (B, d_model)
    return torch.nn.functional.normalize(mean, dim=-1)                         # length 1 (zeros stay zeros)


def _solution_pool(last_hidden, padding_mask):
    words = ~padding_mask                                                      # (B, T): a new tensor
    words[:, 0] = False                                                        # leave out [CLS]
    lengths = (~padding_mask).sum(dim=1)                                       # (B,): real tokens per sentence
    words[torch.arange(len(lengths)), lengths - 1] = False                     # each sentence's own [SEP]
    keep = words.unsqueeze(-1).to(last_hidden.dtype)                           # (B, T, 1)
    mean = (last_hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)      # (B, d_model)
    return torch.nn.functional.normalize(mean, dim=-1)


def _kept_sep(last_hidden, padding_mask):                # only [CLS] left out
    words = ~padding_mask
    words[:, 0] = False
    return _pool(last_hidden, words)


def _model_pooling(last_hidden, padding_mask):           # every real token: the model's own sentence vector
    return _pool(last_hidden, ~padding_mask)


def _padding_in(last_hidden, padding_mask):              # [CLS] and each [SEP] out, but the padding in
    lengths = (~padding_mask).sum(dim=1)
    words = torch.ones_like(padding_mask)
    words[:, 0] = False
    words[torch.arange(len(lengths)), lengths - 1] = False
    return _pool(last_hidden, words)


def _not_normalised(last_hidden, padding_mask):
    return _pool(last_hidden, _word_mask(padding_mask), normalise=False)


def _nan_without_words(last_hidden, padding_mask):      # 0 / 0 for a sentence without words
    return _pool(last_hidden, _word_mask(padding_mask), clamp=False)


def _changes_the_mask(last_hidden, padding_mask):       # right values, but the caller's mask is overwritten
    lengths = (~padding_mask).sum(dim=1)
    padding_mask[:, 0] = True
    padding_mask[torch.arange(len(lengths)), lengths - 1] = True
    return _pool(last_hidden, ~padding_mask)


def _zeros_the_padding_in_place(last_hidden, padding_mask):   # right values, but the caller's vectors are changed
    last_hidden.masked_fill_(~_word_mask(padding_mask)[..., None], 0.0)
    return torch.nn.functional.normalize(last_hidden.sum(dim=1), dim=-1)


word_pool = SpotTheBug(
    "Spot the bug: a sentence vector from its words alone",
    "word_pool(last_hidden, padding_mask) should give each sentence of a padded batch one vector made from its words "
    "only: last_hidden (B, T, d_model) holds one layer's token vectors, padding_mask (B, T) is True at padding "
    "(padding comes after a sentence's real tokens, which start with [CLS] and end with [SEP]). Return (B, d_model): "
    "for each sentence, the mean of its real tokens' vectors other than [CLS] and [SEP], divided by its length (L2 "
    "norm) so that it has length 1; a sentence without words ([CLS] [SEP] only) gets a row of zeros. Leave both "
    "inputs unchanged. The code below runs and returns vectors of length 1, yet some sentences' vectors are wrong. "
    "Find the bug and fix it.",
    reference=_reference_pool,
    cases=_pool_cases,
    hint=["Run the code on a batch of two sentences where the second is shorter, and print `words.int()`: which "
          "tokens of the second sentence does it keep?",
          "In a sentence of n real tokens, at which position is its [SEP]? Is that the same column for every "
          "sentence of the batch?"],
    solution=_solution_pool,
    buggy=buggy_word_pool,
    bug_message="words[:, -1] = False leaves out the LAST COLUMN of the padded batch, which is [SEP] only in the "
                "longest sentence. In a shorter one that column is padding, already left out, and its own [SEP] "
                "stays in its mean. Each sentence's [SEP] sits at its own last real position: (number of real "
                "tokens) - 1.",
    mistakes=[
        Mistake(_kept_sep, "[SEP] is still in every sentence's mean: only [CLS] is left out. Leave out each "
                           "sentence's [SEP] too, at its last real position."),
        Mistake(_model_pooling, "you average every real token, [CLS] and [SEP] included: that is the model's own "
                                "sentence vector. This one leaves both out."),
        Mistake(_padding_in, "your mean takes in the padded positions: their vectors are not words of the sentence. "
                             "Leave out the positions where padding_mask is True as well."),
        Mistake(_not_normalised, "the mean is right, but it is not divided by its length: each returned vector must "
                                 "have length 1 (torch.nn.functional.normalize, or divide by its L2 norm)."),
        Mistake(_nan_without_words, "a sentence without words gives 0 / 0 = nan. The task asks for a row of zeros "
                                    "there: divide by the number of words clamped to at least 1, and normalise with "
                                    "torch.nn.functional.normalize, which leaves a zero vector at zero."),
    ],
    name="lesson13.word_pool",
)
