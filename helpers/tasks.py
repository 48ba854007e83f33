"""A toy task whose correct attention pattern is known in advance, and a tiny training loop.

The task: every token must fetch the word just *before* it (the first token, which
has nothing before it, fetches itself). Each input vector is a word embedding plus
a position embedding, both fixed and drawn from ``[0, 1)`` like the book's
hand-picked embeddings. The word can only be found by looking at the right
*position*, so a self-attention module that solves the task must learn to put its
weight on the previous token: the pattern we expect to see is known before training.

Shapes use ``B`` (batch), ``T`` (tokens), ``S`` (snapshots).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ._checks import check_float_tensor, check_positive_int
from .data import YOUR_JOURNEY
from .modules import SelfAttention_v2

__all__ = ["PreviousTokenTask", "TrainingRun", "train_attention", "weight_on_target"]


class PreviousTokenTask:
    """Random sentences over a small vocabulary; each token must retrieve the previous word.

    Args:
        vocab: the words (distinct strings); the course uses the six words of
            "Your journey starts with one step".
        num_tokens: sentence length ``T`` (at least 2).
        d_in: width of the input vectors.
        seed: seed of the fixed embeddings (they never change during training).
    """

    def __init__(self, vocab: Sequence[str] = tuple(YOUR_JOURNEY), num_tokens: int = 6,
                 d_in: int = 32, seed: int = 0):
        if isinstance(vocab, str) or not all(isinstance(word, str) for word in vocab):
            raise TypeError("vocab must be a sequence of strings, e.g. ('Your', 'journey', ...)")
        if len(vocab) < 2 or len(set(vocab)) != len(vocab):
            raise ValueError(f"vocab must hold at least 2 distinct words, got {list(vocab)}")
        check_positive_int("num_tokens", num_tokens)
        if num_tokens < 2:
            raise ValueError(f"num_tokens must be at least 2 (a token needs a predecessor), got {num_tokens}")
        check_positive_int("d_in", d_in)
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        self.vocab, self.num_tokens, self.d_in = list(vocab), num_tokens, d_in
        generator = torch.Generator().manual_seed(seed)
        self.word_embeddings = torch.rand(len(vocab), d_in, generator=generator)  # (V, d_in)
        self.position_embeddings = torch.rand(num_tokens, d_in, generator=generator)  # (T, d_in)

    def __repr__(self) -> str:
        return f"PreviousTokenTask(vocab_size={len(self.vocab)}, num_tokens={self.num_tokens}, d_in={self.d_in})"

    def target_positions(self) -> torch.Tensor:
        """``(T,)`` long: the position each query must attend to, ``[0, 0, 1, ..., T-2]``."""
        return torch.cat([torch.zeros(1, dtype=torch.long), torch.arange(self.num_tokens - 1)])

    def target_pattern(self) -> torch.Tensor:
        """``(T, T)`` float: the ideal attention weights, a 1 on each query's target key."""
        return torch.eye(self.num_tokens)[self.target_positions()]

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``(B, T)`` long: random word ids, drawn with replacement from ``generator``."""
        check_positive_int("batch_size", batch_size)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        return torch.randint(0, len(self.vocab), (batch_size, self.num_tokens), generator=generator)

    def _check_ids(self, token_ids) -> None:
        if not isinstance(token_ids, torch.Tensor) or token_ids.dtype != torch.long:
            raise TypeError("token_ids must be a torch.long tensor of word ids, e.g. from task.sample()")
        if token_ids.dim() < 1 or token_ids.shape[-1] != self.num_tokens:
            raise ValueError(f"token_ids must have shape (..., {self.num_tokens}), got {tuple(token_ids.shape)}")
        if token_ids.numel() and (token_ids.min() < 0 or token_ids.max() >= len(self.vocab)):
            raise ValueError(f"token_ids must lie in [0, {len(self.vocab)}), the vocabulary's ids")

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Input vectors: ``(..., T)`` ids -> ``(..., T, d_in)``, word embedding + position embedding."""
        self._check_ids(token_ids)
        return self.word_embeddings[token_ids] + self.position_embeddings  # (..., T, d_in) + (T, d_in)

    def targets(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``(..., T)`` ids -> ``(..., T)`` ids: the word each token must retrieve."""
        self._check_ids(token_ids)
        return token_ids[..., self.target_positions()]

    def probe(self) -> tuple[list[str], torch.Tensor]:
        """A fixed sentence to watch during training: ``(labels, token_ids)`` with ids of shape ``(T,)``."""
        token_ids = torch.arange(self.num_tokens) % len(self.vocab)
        return [self.vocab[i] for i in token_ids], token_ids


def weight_on_target(attn_weights: torch.Tensor, target_positions: torch.Tensor) -> torch.Tensor:
    """The weight each query puts on its target key.

    Shapes: ``attn_weights`` ``(..., T, T)``, ``target_positions`` ``(T,)`` long; returns ``(..., T)``.
    """
    check_float_tensor("attn_weights", attn_weights)
    if attn_weights.dim() < 2 or attn_weights.shape[-1] != attn_weights.shape[-2]:
        raise ValueError(f"attn_weights must have shape (..., T, T), got {tuple(attn_weights.shape)}")
    if not isinstance(target_positions, torch.Tensor) or target_positions.dtype != torch.long:
        raise TypeError("target_positions must be a torch.long tensor, e.g. task.target_positions()")
    if target_positions.shape != attn_weights.shape[-1:]:
        raise ValueError(
            f"target_positions must have shape ({attn_weights.shape[-1]},), got {tuple(target_positions.shape)}"
        )
    index = target_positions.expand(*attn_weights.shape[:-1]).unsqueeze(-1)  # (..., T, 1)
    return attn_weights.gather(-1, index).squeeze(-1)  # (..., T)


@dataclass
class TrainingRun:
    """What :func:`train_attention` returns.

    Attributes:
        model: the trained module.
        steps: ``S`` step counts at which a snapshot was taken (0 = before training).
        snapshots: ``(S, T, T)`` attention weights on the probe sentence at those steps.
        losses: the training loss of every step (``num_steps`` floats).
        target_weights: mean probe weight on the correct token after 0, 1, ..., ``num_steps`` steps.
        probe_labels: the probe's words, to label heatmap axes.
    """

    model: nn.Module
    steps: list[int]
    snapshots: torch.Tensor
    losses: list[float]
    target_weights: list[float]
    probe_labels: list[str]

    def steps_to_reach(self, threshold: float) -> int | None:
        """First step count whose mean probe weight on the target is at least ``threshold`` (``None``: never)."""
        return next((step for step, weight in enumerate(self.target_weights) if weight >= threshold), None)


class _ProbeRecord:
    """Watches the probe sentence during training: its mean weight on the target after every step, and its
    ``(T, T)`` weights (on the CPU) every ``snapshot_every`` steps and after the last one."""

    def __init__(self, task: PreviousTokenTask, device: torch.device, num_steps: int, snapshot_every: int):
        self.labels, probe_ids = task.probe()
        self.x = task.embed(probe_ids).to(device)  # (T, d_in)
        self.target_positions = task.target_positions().to(device)
        self.num_steps, self.snapshot_every = num_steps, snapshot_every
        self.steps: list[int] = []
        self.snapshots: list[torch.Tensor] = []
        self.target_weights: list[float] = []

    def record(self, model: nn.Module, step: int) -> None:
        with torch.no_grad():
            _, probe_weights = model(self.x, return_weights=True)  # (T, T)
        self.target_weights.append(float(weight_on_target(probe_weights, self.target_positions).mean()))
        if step % self.snapshot_every == 0 or step == self.num_steps:
            self.steps.append(step)
            self.snapshots.append(probe_weights.cpu().clone())


def _seeded(attention_cls: type[nn.Module], d_in: int, d_out: int, seed: int) -> nn.Module:
    """``attention_cls(d_in, d_out)`` built under ``torch.manual_seed(seed)``; the caller's random stream is left
    alone."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return attention_cls(d_in, d_out)


def train_attention(task: PreviousTokenTask, attention_cls: type[nn.Module] = SelfAttention_v2, *,
                    num_steps: int = 200, batch_size: int = 64, lr: float = 0.02, seed: int = 123,
                    snapshot_every: int = 5, device: torch.device | str | None = None) -> TrainingRun:
    """Train ``attention_cls(task.d_in, vocab_size)`` on ``task`` with Adam; record the probe's weights.

    The context vector of each token is read as one score per word (logits) and
    trained with cross-entropy to name the word the token must retrieve.
    ``attention_cls`` is any module built as ``cls(d_in, d_out)`` whose
    ``forward(x, return_weights=True)`` returns ``(context_vecs, attn_weights)``, e.g.
    ``SelfAttention_v1`` or ``SelfAttention_v2``. The run is reproducible: the
    module is initialised under ``torch.manual_seed(seed)`` inside a forked random
    state (the caller's global generator is left untouched) and batches come from
    a ``torch.Generator`` seeded with ``seed``.

    ``device`` (default: the CPU) is where the module trains. Initial weights and batches are still drawn on
    the CPU and moved there, so a GPU run starts from the same numbers; ``snapshots`` always live on the CPU.
    """
    if not isinstance(task, PreviousTokenTask):
        raise TypeError(f"task must be a PreviousTokenTask, got {type(task).__name__}")
    if not (isinstance(attention_cls, type) and issubclass(attention_cls, nn.Module)):
        raise TypeError("attention_cls must be an nn.Module class such as SelfAttention_v2 "
                        "(the class itself, not an instance)")
    for name, value in (("num_steps", num_steps), ("batch_size", batch_size), ("snapshot_every", snapshot_every)):
        check_positive_int(name, value)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError(f"lr must be a number, got {type(lr).__name__}")
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    device = torch.device("cpu") if device is None else torch.device(device)
    probe = _ProbeRecord(task, device, num_steps, snapshot_every)
    vocab_size = len(task.vocab)                           # one logit per word
    model = _seeded(attention_cls, task.d_in, vocab_size, seed).to(device)  # seed fixes the initial weights ...
    generator = torch.Generator().manual_seed(seed)        # ... and the batches
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    probe.record(model, step=0)                            # the probe's weights before training
    losses = []
    for step in range(1, num_steps + 1):
        token_ids = task.sample(batch_size, generator)     # (B, T) word ids, drawn on the CPU
        logits = model(task.embed(token_ids).to(device))   # (B, T, d_in) -> (B, T, vocab_size)
        targets = task.targets(token_ids).to(device)       # (B, T): the word each token must name
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()                                    # gradients for W_query, W_key, W_value
        optimizer.step()                                   # one Adam step
        losses.append(loss.item())
        probe.record(model, step)                          # the probe's weights after this step
    return TrainingRun(model.eval(), probe.steps, torch.stack(probe.snapshots), losses, probe.target_weights,
                       probe.labels)
