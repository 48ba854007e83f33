"""A toy sequence-to-sequence task for cross-attention: read two-digit numbers aloud.

The source is a row of digits, two per number, e.g. ``3 1 4 7`` (the numbers 31 and 47); the target is one
word per number, ``thirty-one forty-seven``. Output word ``i`` needs exactly two source tokens, the tens digit
at position ``2 i`` and the units digit at ``2 i + 1``: the alignment is known in advance, and the weights are
not square (``T_q = max_numbers`` words against ``T_k = 2 * max_numbers`` digits). Sources hold 1 to
``max_numbers`` numbers and are padded on the right with a padding token, so the source padding mask matters.

:class:`NumberWordsModel` is one :class:`~helpers.cross_attention.CrossAttention` layer between embeddings and
a linear read-out, and nothing else (no self-attention, no residual path): whatever an output word is, it came
through the cross-attention weights.

Shapes use ``B`` (batch), ``T_q`` (output words), ``T_k`` (source digits), ``H`` (heads).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch
from torch import nn

from ._checks import check_positive_int
from .cross_attention import CrossAttention
from .training import remembered, seeded, train_loop

__all__ = ["number_to_words", "NumberWordsTask", "NumberWordsModel", "NumberWordsRun", "train_number_words"]

_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_TEENS = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
          "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_to_words(number: int) -> str:
    """The English words of a number from 10 to 99: ``31 -> "thirty-one"``, ``12 -> "twelve"``."""
    if isinstance(number, bool) or not isinstance(number, numbers.Integral) or not 10 <= number <= 99:
        raise ValueError(f"number must be an int from 10 to 99, got {number!r}")
    tens, units = divmod(int(number), 10)
    if tens == 1:
        return _TEENS[units]
    return _TENS[tens] + ("" if units == 0 else "-" + _UNITS[units])


class NumberWordsTask:
    """Digits in, number words out: ``3 1 4 7 <pad> <pad>`` -> ``thirty-one forty-seven <pad>``.

    Source ids: digits 0-9 and ``pad_id = 10``, shape ``(B, 2 * max_numbers)``, padded on the right.
    Target ids: ``number - 10`` (0 to 89, one per number from 10 to 99) and ``ignore_id = -100`` at the
    target's padding, shape ``(B, max_numbers)``; ``-100`` is what ``F.cross_entropy`` skips by default.
    """

    pad_id = 10
    ignore_id = -100
    source_vocab_size = 11   # ten digits and the padding token
    target_vocab_size = 90   # the numbers 10 to 99

    def __init__(self, max_numbers: int = 4):
        check_positive_int("max_numbers", max_numbers)
        self.max_numbers = max_numbers
        self.num_keys = 2 * max_numbers    # T_k: source tokens
        self.num_queries = max_numbers     # T_q: output words

    def __repr__(self) -> str:
        return f"NumberWordsTask(max_numbers={self.max_numbers})"

    def sample(self, batch_size: int, generator: torch.Generator | None = None,
               held_out: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(source_ids (B, T_k), target_ids (B, T_q))``: 1 to ``max_numbers`` random numbers per example.

        ``held_out=None`` draws from every source; ``True`` only from the held-out part of the source space
        (:meth:`is_held_out`), ``False`` only from the rest: training draws with ``False``, test examples with
        ``True``, so no test source is ever trained on.
        """
        check_positive_int("batch_size", batch_size)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if held_out is not None and not isinstance(held_out, bool):
            raise TypeError(f"held_out must be None, True or False, got {held_out!r}")
        if held_out is None:
            return self._draw(batch_size, generator)
        sources, targets, count = [], [], 0
        while count < batch_size:   # keep the examples of the wanted part; draw again until there are enough
            source_ids, target_ids = self._draw(batch_size, generator)
            keep = self.is_held_out(source_ids) == held_out
            sources.append(source_ids[keep])
            targets.append(target_ids[keep])
            count += int(keep.sum())
        return torch.cat(sources)[:batch_size], torch.cat(targets)[:batch_size]

    def is_held_out(self, source_ids: torch.Tensor) -> torch.Tensor:
        """``(B, T_k)`` -> ``(B,)`` bool: True where the digits add up to a multiple of 7 (about 1 source in 7).

        The held-out part of the source space: training never draws these sources, test examples come from them.
        """
        self._check_source(source_ids)
        digits = source_ids.masked_fill(source_ids == self.pad_id, 0)
        return digits.sum(dim=-1) % 7 == 0

    def _draw(self, batch_size: int, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        counts = torch.randint(1, self.max_numbers + 1, (batch_size,), generator=generator)       # (B,)
        numbers_ = torch.randint(10, 100, (batch_size, self.max_numbers), generator=generator)    # (B, T_q)
        digits = torch.stack([numbers_ // 10, numbers_ % 10], dim=-1).view(batch_size, self.num_keys)  # (B, T_k)
        source_pad = torch.arange(self.num_keys) >= 2 * counts[:, None]       # (B, T_k): True at padding
        target_pad = torch.arange(self.max_numbers) >= counts[:, None]        # (B, T_q)
        return digits.masked_fill(source_pad, self.pad_id), (numbers_ - 10).masked_fill(target_pad, self.ignore_id)

    def source_padding_mask(self, source_ids: torch.Tensor) -> torch.Tensor:
        """``(B, T_k)`` bool, True at the source's padding tokens."""
        self._check_source(source_ids)
        return source_ids == self.pad_id

    def targets(self, source_ids: torch.Tensor) -> torch.Tensor:
        """``(B, T_k)`` source ids -> ``(B, T_q)`` target ids (the right answer; ``ignore_id`` at padding)."""
        self._check_source(source_ids)
        pairs = source_ids.view(*source_ids.shape[:-1], self.max_numbers, 2)   # (B, T_q, 2): tens, units
        padded = pairs[..., 0] == self.pad_id
        return (pairs[..., 0] * 10 + pairs[..., 1] - 10).masked_fill(padded, self.ignore_id)

    def ideal_pattern(self) -> torch.Tensor:
        """``(2, T_q, T_k)``: a 1 on the tens digit ``2 i`` (first matrix) and the units digit ``2 i + 1`` (second)."""
        rows = torch.arange(self.max_numbers)
        pattern = torch.zeros(2, self.max_numbers, self.num_keys)
        pattern[0, rows, 2 * rows] = 1.0
        pattern[1, rows, 2 * rows + 1] = 1.0
        return pattern

    def source_tokens(self, source_ids: torch.Tensor) -> list[str]:
        """The tokens of one source ``(T_k,)``: ``["3", "1", "pad", ...]``."""
        self._check_source(source_ids, one=True)
        return ["pad" if d == self.pad_id else str(d) for d in source_ids.tolist()]

    def source_labels(self, source_ids: torch.Tensor) -> list[str]:
        """Heatmap labels of one source ``(T_k,)``, token over position: ``"3\\npos 0"``, ``"pad\\npos 6"``."""
        return [f"{token}\npos {j}" for j, token in enumerate(self.source_tokens(source_ids))]

    def target_words(self, target_ids: torch.Tensor) -> list[str]:
        """Words of one target ``(T_q,)``: ``["thirty-one", "forty-seven", "pad", "pad"]``."""
        if not isinstance(target_ids, torch.Tensor) or target_ids.shape != (self.max_numbers,):
            raise ValueError(f"target_ids must be one target of shape ({self.max_numbers},)")
        return ["pad" if t == self.ignore_id else number_to_words(t + 10) for t in target_ids.tolist()]

    def _check_source(self, source_ids, one: bool = False) -> None:
        if not isinstance(source_ids, torch.Tensor) or source_ids.dtype != torch.long:
            raise TypeError("source_ids must be a torch.long tensor of digit ids, e.g. from task.sample()")
        shape = f"({self.num_keys},)" if one else f"(..., {self.num_keys})"
        if (one and source_ids.dim() != 1) or source_ids.dim() < 1 or source_ids.shape[-1] != self.num_keys:
            raise ValueError(f"source_ids must have shape {shape}, got {tuple(source_ids.shape)}")
        if source_ids.numel() and (source_ids.min() < 0 or source_ids.max() > self.pad_id):
            raise ValueError(f"source_ids must lie in [0, {self.pad_id}] (digits and pad_id)")


class NumberWordsModel(nn.Module):
    """Embeddings, one cross-attention layer, a read-out: ``logits = unembed(CrossAttention(X, Y, M_pad))``.

    * ``Y = digit_embedding[source_ids] + source_position``: the source, ``(B, T_k, d_model)``;
    * ``X = output_position``: one learned vector per output word, ``(B, T_q, d_model)``: all a query knows is
      which word it must write;
    * ``M_pad``: the source padding mask ``(B, T_k)``.

    ``forward(source_ids, return_weights=False, use_mask=True)``: ``(B, T_k)`` long (``T_k`` at most ``2 * max_numbers``) ->
    logits ``(B, T_q, 90)``; with ``return_weights=True`` also the weights ``(B, H, T_q, T_k)``. Embeddings start
    small (std 0.1), so the untrained weights are close to uniform over the real source tokens. ``use_mask=False``
    leaves out the source padding mask, to show what it prevents.
    """

    def __init__(self, max_numbers: int = 4, d_model: int = 32, num_heads: int = 2):
        super().__init__()
        for name, value in (("max_numbers", max_numbers), ("d_model", d_model), ("num_heads", num_heads)):
            check_positive_int(name, value)
        self.max_numbers = max_numbers
        self.digit_embedding = nn.Embedding(NumberWordsTask.source_vocab_size, d_model)
        self.source_position = nn.Embedding(2 * max_numbers, d_model)
        self.output_position = nn.Embedding(max_numbers, d_model)
        self.cross_attention = CrossAttention(d_model, d_model, 0.0, num_heads)
        self.unembed = nn.Linear(d_model, NumberWordsTask.target_vocab_size)
        for embedding in (self.digit_embedding, self.source_position, self.output_position):
            nn.init.normal_(embedding.weight, std=0.1)

    def forward(self, source_ids: torch.Tensor, return_weights: bool = False, use_mask: bool = True):
        if not isinstance(source_ids, torch.Tensor) or source_ids.dtype != torch.long or source_ids.dim() != 2:
            raise TypeError("source_ids must be a 2-d torch.long tensor (batch_size, num_keys) of digit ids")
        num_keys = source_ids.shape[1]
        if not 1 <= num_keys <= 2 * self.max_numbers:
            raise ValueError(f"source_ids may hold at most {2 * self.max_numbers} tokens, got {num_keys}")
        if source_ids.min() < 0 or source_ids.max() > NumberWordsTask.pad_id:
            raise ValueError(f"source_ids must lie in [0, {NumberWordsTask.pad_id}] (digits and the pad id)")
        if not isinstance(use_mask, bool):
            raise TypeError(f"use_mask must be True or False, got {use_mask!r}")
        source = self.digit_embedding(source_ids) + self.source_position.weight[:num_keys]  # Y: (B, T_k, d_model)
        x = self.output_position.weight.expand(source_ids.shape[0], -1, -1)  # X: (B, T_q, d_model)
        source_padding_mask = source_ids == NumberWordsTask.pad_id           # (B, T_k)
        if not use_mask:                                                     # only to show what the mask does
            source_padding_mask = None
        outputs, attn_weights = self.cross_attention(x, source, source_padding_mask, return_weights=True)
        logits = self.unembed(outputs)                                       # (B, T_q, d_model) -> (B, T_q, 90)
        return (logits, attn_weights) if return_weights else logits


@dataclass
class NumberWordsRun:
    """What :func:`train_number_words` returns: the trained model (``eval()`` mode), the loss of every step,
    and the accuracy per real (unpadded) word on ``test_ids`` at steps ``steps``."""

    model: NumberWordsModel
    losses: list[float]
    steps: list[int]
    accuracies: list[float]


def _accuracy(model: NumberWordsModel, source_ids: torch.Tensor, targets: torch.Tensor) -> float:
    with torch.no_grad():
        answers = model(source_ids).argmax(dim=-1)       # (B, T_q)
    real = targets != NumberWordsTask.ignore_id
    return float((answers == targets)[real].float().mean())


@remembered
def train_number_words(task: NumberWordsTask, *, test_ids: torch.Tensor, num_steps: int = 150,
                       batch_size: int = 64, lr: float = 0.01, d_model: int = 32, num_heads: int = 2,
                       seed: int = 0, eval_every: int = 25,
                       device: torch.device | str | None = None) -> NumberWordsRun:
    """Train a :class:`NumberWordsModel` with Adam and cross-entropy over the real target words.

    Reproducible: the model is initialised under ``torch.manual_seed(seed)`` in a forked random state, batches
    come from a ``torch.Generator`` seeded with ``seed``, both on the CPU, then moved to ``device``.
    Training batches hold only sources outside the held-out part (``task.sample(..., held_out=False)``);
    ``test_ids`` ``(N, T_k)``, best drawn with ``held_out=True``, are scored (accuracy per real word) every
    ``eval_every`` steps and at the end.

    The same call made again returns a copy of the first run instead of training again
    (:func:`helpers.training.remembered`).
    """
    if not isinstance(task, NumberWordsTask):
        raise TypeError(f"task must be a NumberWordsTask, got {type(task).__name__}")
    task.targets(test_ids)  # checks test_ids
    for name, value in (("num_steps", num_steps), ("batch_size", batch_size), ("eval_every", eval_every)):
        check_positive_int(name, value)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    device = torch.device("cpu") if device is None else torch.device(device)
    model = seeded(lambda: NumberWordsModel(task.max_numbers, d_model, num_heads), seed).to(device)
    test_ids = test_ids.to(device)
    test_targets = task.targets(test_ids)
    steps, accuracies = [], []

    def record(step: int) -> None:  # every eval_every steps and at the end, in eval() mode
        steps.append(step)
        accuracies.append(_accuracy(model, test_ids, test_targets))

    def step_loss(model: NumberWordsModel, generator: torch.Generator) -> torch.Tensor:
        source_ids, target_ids = (t.to(device) for t in task.sample(batch_size, generator, held_out=False))
        logits = model(source_ids)                      # (B, T_q, 90)
        return nn.functional.cross_entropy(logits.flatten(0, 1), target_ids.flatten(), ignore_index=task.ignore_id)

    losses = train_loop(model, step_loss, num_steps=num_steps, lr=lr, seed=seed, record=record,
                        record_every=eval_every)  # the course's one loop: Adam, one thread, fresh batches
    return NumberWordsRun(model.eval(), losses, steps, accuracies)
