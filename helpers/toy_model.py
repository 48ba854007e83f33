"""A tiny attention-only model and toy "fetch" tasks whose ideal attention pattern is known.

A fetch task asks the model to write, at every output position ``i``, the input
token found at a fixed source position ``source[i]``: reversing a sequence
(``source[i] = T - 1 - i``) or rotating it by an offset. The ideal attention of a
model that solves it is a one-hot row per output position, on the source key:
the anti-diagonal for reversal, a shifted diagonal for rotation.

The model is one bidirectional multi-head attention layer between a token
embedding (plus an optional learned position embedding) and a linear read-out,
with no residual path: whatever an output position writes must have come
through its attention weights, so the weights tell the whole story.

Shapes use ``B`` (batch), ``T`` (tokens), ``H`` (heads), ``vocab_size``,
``S`` (checkpoints), ``N`` (watched examples).
"""

from __future__ import annotations

import numbers
import string
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ._checks import check_positive_int
from .modules import MultiHeadAttention
from .training import remembered

__all__ = ["FetchTask", "BidirectionalAttention", "AttentionOnlyModel", "ToyTrainingRun", "train_toy_model",
           "train_step", "accuracy"]


def _check_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")


class FetchTask:
    """Sequences of random tokens; output position ``i`` must name the input token at ``source_positions[i]``.

    Build one with :meth:`reversal` or :meth:`rotation`. Tokens are named by the
    first ``vocab_size`` capital letters so heatmaps can be labelled.

    Args:
        source_positions: ``T`` ints in ``[0, T)``, the input position each output copies.
        vocab_size: number of distinct tokens ``V`` (2 to 26).
        name: a short description for ``repr``.
    """

    def __init__(self, source_positions: Sequence[int], vocab_size: int = 10, name: str = "fetch"):
        check_positive_int("vocab_size", vocab_size)
        if not 2 <= vocab_size <= 26:
            raise ValueError(f"vocab_size must be between 2 and 26 (one capital letter per token), got {vocab_size}")
        if isinstance(source_positions, torch.Tensor):
            source_positions = source_positions.tolist()
        if isinstance(source_positions, (str, bytes)) or not isinstance(source_positions, Sequence):
            raise TypeError("source_positions must be a sequence of ints, e.g. [3, 2, 1, 0]")
        for position in source_positions:
            _check_int("source_positions[i]", position)
        num_tokens = len(source_positions)
        if num_tokens < 2 or not all(0 <= p < num_tokens for p in source_positions):
            raise ValueError(f"source_positions must hold at least 2 positions, each in [0, {max(num_tokens, 2)}), "
                             f"got {list(source_positions)}")
        self.num_tokens, self.vocab_size, self.name = num_tokens, vocab_size, name
        self.vocab = list(string.ascii_uppercase[:vocab_size])
        self._source = torch.tensor(list(source_positions), dtype=torch.long)

    @classmethod
    def reversal(cls, num_tokens: int = 8, vocab_size: int = 10) -> FetchTask:
        """Write the input backwards: output ``i`` fetches input ``T - 1 - i`` (anti-diagonal)."""
        check_positive_int("num_tokens", num_tokens)
        return cls(list(range(num_tokens - 1, -1, -1)), vocab_size, name="reversal")

    @classmethod
    def rotation(cls, num_tokens: int = 8, offset: int = 1, vocab_size: int = 10) -> FetchTask:
        """Shift the input right by ``offset`` (wrapping round): output ``i`` fetches input ``(i - offset) mod T``."""
        check_positive_int("num_tokens", num_tokens)
        _check_int("offset", offset)
        return cls([(i - offset) % num_tokens for i in range(num_tokens)], vocab_size, name=f"rotation by {offset}")

    def __repr__(self) -> str:
        return f"FetchTask({self.name}, num_tokens={self.num_tokens}, vocab_size={self.vocab_size})"

    def source_positions(self) -> torch.Tensor:
        """``(T,)`` long: the input position each output position must fetch."""
        return self._source.clone()

    def ideal_pattern(self) -> torch.Tensor:
        """``(T, T)`` float, rows = output positions (queries), columns = input positions (keys): a 1 on each source."""
        return torch.eye(self.num_tokens)[self._source]  # row i = one-hot of source[i]

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``(B, T)`` long: random token ids, drawn uniformly (with replacement) from ``generator``."""
        check_positive_int("batch_size", batch_size)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        return torch.randint(0, self.vocab_size, (batch_size, self.num_tokens), generator=generator)

    def check_ids(self, token_ids) -> None:
        """Raise unless ``token_ids`` is a long tensor of shape ``(..., T)`` with ids in ``[0, V)``."""
        if not isinstance(token_ids, torch.Tensor) or token_ids.dtype != torch.long:
            raise TypeError("token_ids must be a torch.long tensor of token ids, e.g. from task.sample()")
        if token_ids.dim() < 1 or token_ids.shape[-1] != self.num_tokens:
            raise ValueError(f"token_ids must have shape (..., {self.num_tokens}), got {tuple(token_ids.shape)}")
        if token_ids.numel() and (token_ids.min() < 0 or token_ids.max() >= self.vocab_size):
            raise ValueError(f"token_ids must lie in [0, {self.vocab_size}), the task's vocabulary")

    def targets(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``(..., T)`` ids -> ``(..., T)`` ids: the token each output position must write."""
        self.check_ids(token_ids)
        return token_ids[..., self._source]

    def labels(self, token_ids: torch.Tensor) -> list[str]:
        """The letters of one sequence of ``T`` ids, to label a heatmap axis."""
        self.check_ids(token_ids)
        if token_ids.dim() != 1:
            raise ValueError(f"token_ids must be one sequence of shape ({self.num_tokens},), "
                             f"got {tuple(token_ids.shape)}")
        return [self.vocab[i] for i in token_ids.tolist()]


class BidirectionalAttention(MultiHeadAttention):
    """:class:`~helpers.modules.MultiHeadAttention` with its causal mask emptied: every token sees every token.

    An encoder-style layer. The only thing that makes ``MultiHeadAttention``
    causal is its ``mask`` buffer (1 = hide); here it is all zeros, so nothing is
    hidden. Same constructor, same parameters (under the same seed, the very same
    numbers), same ``forward``:
    input ``(B, T, d_in)``, output ``(B, T, d_out)``, weights ``(B, H, T, T)``.

    The zero mask is not saved in the ``state_dict`` (``persistent=False``), so loading a causal module's
    ``state_dict`` here raises an error about ``mask`` instead of silently making this layer causal.
    """

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias)
        # Replace the causal mask by a (T, T) of zeros: no key is hidden from any query.
        del self.mask
        self.register_buffer("mask", torch.zeros(context_length, context_length), persistent=False)


class AttentionOnlyModel(nn.Module):
    """Embed tokens (+ positions), one bidirectional multi-head attention layer, read out one score per token.

    ``logits = unembed(attention(token_embedding[ids] + position_embedding))``.
    There is no residual connection and no MLP, so an output position knows
    only what its attention weights fetched. Both embeddings start small
    (normal, std 0.1), so the untrained attention is close to uniform.

    Args:
        vocab_size: number of token ids ``V``.
        num_tokens: sequence length ``T`` (also the number of learned positions).
        d_model: width of the embeddings and of the attention layer.
        num_heads: attention heads (``d_model`` must be divisible by it).
        use_positions: add a learned position embedding; without it the model
            cannot tell where a token sits.

    ``forward(token_ids)``: ``(B, T)`` long -> logits ``(B, T, vocab_size)``; with
    ``return_weights=True`` also the attention weights ``(B, H, T, T)``.
    """

    def __init__(self, vocab_size: int, num_tokens: int, d_model: int = 32, num_heads: int = 2,
                 use_positions: bool = True):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("num_tokens", num_tokens), ("d_model", d_model),
                            ("num_heads", num_heads)):
            check_positive_int(name, value)
        if not isinstance(use_positions, bool):
            raise TypeError(f"use_positions must be a bool, got {type(use_positions).__name__}")
        self.vocab_size, self.num_tokens, self.use_positions = vocab_size, num_tokens, use_positions
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        # Created even when unused, so models with and without positions start from the same other weights.
        self.position_embedding = nn.Embedding(num_tokens, d_model)
        self.attention = BidirectionalAttention(d_model, d_model, num_tokens, 0.0, num_heads)
        self.unembed = nn.Linear(d_model, vocab_size)
        # Small embeddings (nn.Embedding's default is std 1): the attention scores start near zero, so every
        # head starts out spreading its weight almost uniformly and the pattern has to be learned.
        nn.init.normal_(self.token_embedding.weight, std=0.1)
        nn.init.normal_(self.position_embedding.weight, std=0.1)

    def forward(self, token_ids: torch.Tensor, return_weights: bool = False):
        if not isinstance(token_ids, torch.Tensor) or token_ids.dtype != torch.long:
            raise TypeError("token_ids must be a torch.long tensor of token ids, shape (batch_size, num_tokens)")
        if token_ids.dim() != 2 or token_ids.shape[1] != self.num_tokens:
            raise ValueError(f"token_ids must have shape (batch_size, {self.num_tokens}), "
                             f"got {tuple(token_ids.shape)}")
        if token_ids.numel() and (token_ids.min() < 0 or token_ids.max() >= self.vocab_size):
            raise ValueError(f"token_ids must lie in [0, {self.vocab_size}), got ids from "
                             f"{int(token_ids.min())} to {int(token_ids.max())}")
        x = self.token_embedding(token_ids)  # (B, T) -> (B, T, d_model)
        if self.use_positions:
            x = x + self.position_embedding.weight  # (B, T, d_model) + (T, d_model)
        attn_out, attn_weights = self.attention(x, return_weights=True)  # MultiHead(X) = [Z_0 | Z_1] W_o + b_o: (B, T, d_model)
        logits = self.unembed(attn_out)  # (B, T, d_model) -> (B, T, vocab_size)
        return (logits, attn_weights) if return_weights else logits


def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of positions whose highest logit is the target: ``(..., vocab_size)`` and ``(...)`` -> a float."""
    if not isinstance(logits, torch.Tensor) or not isinstance(targets, torch.Tensor):
        raise TypeError("logits and targets must be torch tensors")
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits (..., vocab_size) must match targets (...): got {tuple(logits.shape)} "
                         f"and {tuple(targets.shape)}")
    return float((logits.argmax(dim=-1) == targets).float().mean())


@dataclass
class ToyTrainingRun:
    """What :func:`train_toy_model` returns (kept in memory; everything but the model on the CPU).

    Attributes:
        model: the trained model, in ``eval()`` mode, on the device it was trained on.
        steps: ``S`` step counts at which a checkpoint was taken (0 = before training).
        weights: ``(S, N, H, T, T)`` attention weights on the watched examples at each checkpoint.
        predictions: ``(S, N, T)`` the model's output tokens on the watched examples.
        accuracies: ``S`` floats, accuracy on the held-out set at each checkpoint.
        losses: the training loss of every step.
    """

    model: AttentionOnlyModel
    steps: list[int]
    weights: torch.Tensor
    predictions: torch.Tensor
    accuracies: list[float]
    losses: list[float]

    def checkpoint(self, step: int) -> int:
        """Index of the checkpoint taken at ``step``."""
        if step not in self.steps:
            raise ValueError(f"no checkpoint at step {step}; checkpoints: {self.steps[0]}, {self.steps[1]}, ...")
        return self.steps.index(step)


@remembered
def train_toy_model(task: FetchTask, *, watch_ids: torch.Tensor, test_ids: torch.Tensor, num_steps: int = 100,
                    batch_size: int = 64, lr: float = 0.01, d_model: int = 32, num_heads: int = 2,
                    use_positions: bool = True, seed: int = 0, checkpoint_every: int = 10,
                    device: torch.device | str | None = None,
                    optimizer: type[torch.optim.Optimizer] = torch.optim.Adam) -> ToyTrainingRun:
    """Train an :class:`AttentionOnlyModel` on ``task`` with cross-entropy; keep checkpoints in memory.

    ``optimizer`` is the class of the optimiser (Adam by default), built as ``optimizer(model.parameters(), lr=lr)``;
    every step trains on ``batch_size`` fresh sequences.

    Every ``checkpoint_every`` steps (and at 0 and ``num_steps``) it records the
    attention weights and predictions on ``watch_ids`` ``(N, T)`` and the accuracy
    on ``test_ids`` ``(num_test, T)``. Reproducible: the model is initialised under
    ``torch.manual_seed(seed)`` inside a forked random state (the caller's global
    generator is untouched), batches come from a ``torch.Generator`` seeded with
    ``seed``. Both are drawn on the CPU and then moved to ``device`` (default: the CPU), so the run starts
    from the same numbers on every machine; the checkpoints are kept on the CPU.

    The same call made again returns a copy of the first run instead of training again
    (:func:`helpers.training.remembered`).
    """
    if not isinstance(task, FetchTask):
        raise TypeError(f"task must be a FetchTask, got {type(task).__name__}")
    task.check_ids(watch_ids)
    task.check_ids(test_ids)
    for name, value in (("num_steps", num_steps), ("batch_size", batch_size), ("checkpoint_every", checkpoint_every)):
        check_positive_int(name, value)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    _check_int("seed", seed)
    if not (isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer)):
        raise TypeError(f"optimizer must be an optimiser class such as torch.optim.Adam, got {optimizer!r}")
    try:
        device = torch.device("cpu") if device is None else torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device must be a torch.device, a name such as 'cpu' or 'cuda', or None; got {device!r}") \
            from error
    previous_threads = torch.get_num_threads()
    # One thread: these matrices are tiny, so more threads only add waiting (badly so on a busy machine),
    # and a single thread makes the sums, hence the run, independent of how many cores the machine has.
    torch.set_num_threads(1)
    try:
        return _train(task, watch_ids, test_ids, num_steps, batch_size, lr, d_model, num_heads, use_positions,
                      seed, checkpoint_every, device, optimizer)
    finally:
        torch.set_num_threads(previous_threads)


def _train(task, watch_ids, test_ids, num_steps, batch_size, lr, d_model, num_heads, use_positions, seed,
           checkpoint_every, device, optimizer_class) -> ToyTrainingRun:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AttentionOnlyModel(task.vocab_size, task.num_tokens, d_model, num_heads, use_positions)
    model = model.to(device)  # initialised on the CPU, then moved: the same start on every device
    watch_ids, test_ids = watch_ids.to(device), test_ids.to(device)
    optimizer = optimizer_class(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    test_targets = task.targets(test_ids)  # (num_test, T)
    steps, weights, predictions, accuracies, losses = [], [], [], [], []
    for step in range(num_steps + 1):
        if step % checkpoint_every == 0 or step == num_steps:
            model.eval()
            with torch.no_grad():
                watch_logits, watch_weights = model(watch_ids, return_weights=True)  # (N, T, vocab_size), (N, H, T, T)
                accuracies.append(accuracy(model(test_ids), test_targets))
            model.train()
            steps.append(step)
            weights.append(watch_weights.cpu())
            predictions.append(watch_logits.argmax(dim=-1).cpu())  # (N, T)
        if step < num_steps:
            losses.append(train_step(model, optimizer, task, generator, batch_size))
    return ToyTrainingRun(model.eval(), steps, torch.stack(weights), torch.stack(predictions), accuracies, losses)


def train_step(model: AttentionOnlyModel, optimizer: torch.optim.Optimizer, task: FetchTask,
               generator: torch.Generator, batch_size: int) -> float:
    """One step of training on a fresh random batch; returns its loss (cross-entropy over every position)."""
    device = next(model.parameters()).device
    token_ids = task.sample(batch_size, generator).to(device)  # (B, T): a fresh batch, drawn on the CPU
    logits = model(token_ids)  # (B, T, vocab_size)
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), task.targets(token_ids).flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()
