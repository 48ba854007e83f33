"""A tiny attention-only model with a choice of position information, and two tasks that need positions.

Notebook 09 trains the same model four ways: no positions, a learned table, sinusoidal encodings (both added to
the token embeddings) and RoPE (rotating each head's queries and keys), on

* ``reversal``: output ``i`` writes input ``T - 1 - i`` (the task of notebook 08, an *absolute* rule: the source
  depends on where the sequence ends);
* ``copy_back``: output ``i`` writes input ``i - offset`` (a *relative* rule: always ``offset`` places back);
  the first ``offset`` outputs have nothing to copy and are left out of the loss and the accuracy.

Shapes: ``B`` batch, ``T`` tokens, ``H`` heads, ``D`` ``head_dim``.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn

from ._checks import check_positive_int
from .attention import scaled_dot_product_attention
from .positions import LearnedPositions, apply_rope, sinusoidal_positions
from .training import remembered, seeded, train_loop

__all__ = ["POSITION_KINDS", "PositionTask", "PositionModel", "train_position_model", "position_accuracy",
           "accuracy_table"]

POSITION_KINDS = ("none", "learned", "sinusoidal", "rope")
IGNORE = -100  # the target of an output with nothing to copy (cross_entropy's ignore_index)


class PositionTask:
    """Random token sequences of any length, and the token each output position must write.

    Args:
        kind: ``"reversal"`` or ``"copy_back"``.
        vocab_size: number of distinct tokens (2 to 26; named ``A``, ``B``, ...).
        offset: how many places back ``copy_back`` copies from (at least 1).
    """

    def __init__(self, kind: str, vocab_size: int = 10, offset: int = 2):
        if kind not in ("reversal", "copy_back"):
            raise ValueError(f"kind must be 'reversal' or 'copy_back', got {kind!r}")
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("offset", offset)
        if not 2 <= vocab_size <= 26:
            raise ValueError(f"vocab_size must be between 2 and 26, got {vocab_size}")
        self.kind, self.vocab_size, self.offset = kind, vocab_size, offset
        self.name = "reversal" if kind == "reversal" else f"copy {offset} back"

    def __repr__(self) -> str:
        return f"PositionTask({self.name}, vocab_size={self.vocab_size})"

    def sample(self, batch_size: int, num_tokens: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``(B, T)`` long: random token ids from ``generator``."""
        check_positive_int("batch_size", batch_size)
        check_positive_int("num_tokens", num_tokens)
        if self.kind == "copy_back" and num_tokens <= self.offset:
            raise ValueError(f"num_tokens must be more than offset={self.offset}, got {num_tokens}")
        return torch.randint(0, self.vocab_size, (batch_size, num_tokens), generator=generator)

    def targets(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` ids -> ``(B, T)`` targets; ``-100`` where an output has nothing to copy."""
        if not isinstance(token_ids, torch.Tensor) or token_ids.dtype != torch.long or token_ids.dim() != 2:
            raise TypeError("token_ids must be a torch.long tensor of shape (batch_size, num_tokens)")
        if self.kind == "reversal":
            return token_ids.flip(-1)
        targets = torch.full_like(token_ids, IGNORE)
        targets[:, self.offset:] = token_ids[:, :-self.offset]   # output i copies input i - offset
        return targets


class PositionModel(nn.Module):
    """Token embedding (+ positions), one bidirectional multi-head attention layer, a linear read-out.

    Args:
        vocab_size: number of token ids.
        position: ``"none"``, ``"learned"`` (a table of ``max_tokens`` rows), ``"sinusoidal"`` (added to the
            token embeddings, as in Vaswani et al. 2017) or ``"rope"`` (each head's queries and keys rotated).
        max_tokens: length of the learned table; the other kinds read sequences of any length.
        d_model, num_heads: width of the model and number of heads (``head_dim = d_model / num_heads``).

    ``forward(token_ids)``: ``(B, T)`` long -> logits ``(B, T, vocab_size)``; with ``return_weights=True`` also
    the attention weights ``(B, H, T, T)``. No residual path, as in notebook 08: an output knows only what its
    attention fetched.
    """

    def __init__(self, vocab_size: int, position: str = "learned", max_tokens: int = 8, d_model: int = 32,
                 num_heads: int = 2):
        super().__init__()
        if position not in POSITION_KINDS:
            raise ValueError(f"position must be one of {POSITION_KINDS}, got {position!r}")
        for name, value in (("vocab_size", vocab_size), ("max_tokens", max_tokens), ("d_model", d_model),
                            ("num_heads", num_heads)):
            check_positive_int(name, value)
        if d_model % num_heads:
            raise ValueError(f"d_model must be divisible by num_heads, got {d_model} and {num_heads}")
        self.vocab_size, self.position, self.max_tokens = vocab_size, position, max_tokens
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        if position in ("sinusoidal", "rope") and (d_model if position == "sinusoidal" else self.head_dim) % 2:
            raise ValueError(f"{position} positions need an even width, got d_model={d_model}, "
                             f"head_dim={self.head_dim}")
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.token_embedding.weight, std=0.1)
        # Created for every kind (used by "learned" only), so all four models start from the same other weights.
        self.position_embedding = LearnedPositions(max_tokens, d_model)
        self.W_query = nn.Linear(d_model, d_model, bias=False)
        self.W_key = nn.Linear(d_model, d_model, bias=False)
        self.W_value = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model)
        self.unembed = nn.Linear(d_model, vocab_size)

    def supports(self, num_tokens: int) -> bool:
        """Whether the model can read sequences of ``num_tokens`` tokens (a learned table has a fixed length)."""
        return self.position != "learned" or num_tokens <= self.max_tokens

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        batch_size, num_tokens, _ = t.shape
        return t.view(batch_size, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)  # -> (B, H, T, D)

    def forward(self, token_ids: torch.Tensor, return_weights: bool = False):
        if not isinstance(token_ids, torch.Tensor) or token_ids.dtype != torch.long or token_ids.dim() != 2:
            raise TypeError("token_ids must be a torch.long tensor of shape (batch_size, num_tokens)")
        if token_ids.numel() and (token_ids.min() < 0 or token_ids.max() >= self.vocab_size):
            raise ValueError(f"token_ids must lie in [0, {self.vocab_size})")
        batch_size, num_tokens = token_ids.shape
        x = self.token_embedding(token_ids)                                           # (B, T) -> (B, T, d_model)
        if self.position == "learned":
            x = x + self.position_embedding(num_tokens)                              # + (T, d_model)
        elif self.position == "sinusoidal":
            x = x + sinusoidal_positions(num_tokens, x.shape[-1]).to(x.device)       # + (T, d_model)
        queries = self._split_heads(self.W_query(x))                                  # (B, H, T, D)
        keys = self._split_heads(self.W_key(x))
        values = self._split_heads(self.W_value(x))
        if self.position == "rope":
            queries, keys = apply_rope(queries), apply_rope(keys)                     # rotate q and k, never v
        context_vecs, attn_weights = scaled_dot_product_attention(queries, keys, values)  # (B, H, T, D), (B, H, T, T)
        context_vecs = context_vecs.transpose(1, 2).reshape(batch_size, num_tokens, -1)  # -> (B, T, d_model)
        logits = self.unembed(self.out_proj(context_vecs))                            # (B, T, vocab_size)
        return (logits, attn_weights) if return_weights else logits


def position_accuracy(model: PositionModel, task: PositionTask, token_ids: torch.Tensor,
                      per_position: bool = False) -> float | torch.Tensor:
    """Fraction of outputs with a target whose highest logit is that target (``token_ids`` ``(B, T)``).

    With ``per_position=True``: a ``(T,)`` CPU tensor, one fraction per output position (``nan`` where an output
    has nothing to copy).
    """
    device = next(model.parameters()).device
    targets = task.targets(token_ids).to(device)                                     # (B, T)
    with torch.no_grad():
        answers = model(token_ids.to(device)).argmax(dim=-1)                          # (B, T)
    counted = targets != IGNORE
    right = (answers == targets).float()
    if per_position:
        per_output = right.sum(dim=0) / counted.sum(dim=0)                            # (T,): 0 / 0 = nan
        return per_output.cpu()
    return float(right[counted].mean())


def accuracy_table(models: dict[tuple[str, str], PositionModel], tasks: dict[str, PositionTask],
                   test_ids: dict[int, torch.Tensor], columns: list[tuple[str, int]]) -> str:
    """A printable table: one row per kind of position, one column per ``(task name, T)`` in ``columns``.

    ``models[(task name, kind)]`` is scored with :func:`position_accuracy` on ``test_ids[T]`` ``(B, T)``; a model
    that cannot read ``T`` tokens (a learned table that is too short) says ``not defined``.
    """
    kinds = list(dict.fromkeys(kind for _, kind in models))
    for name, num_tokens in columns:
        if name not in tasks or num_tokens not in test_ids:
            raise ValueError(f"columns: no task {name!r} or no test_ids for T={num_tokens}")
    lines = [f"{'position':<12}" + "".join(f"{f'{name}, T={T}':>20}" for name, T in columns)]
    for kind in kinds:
        cells = []
        for name, num_tokens in columns:
            model = models[(name, kind)]
            cells.append(f"{position_accuracy(model, tasks[name], test_ids[num_tokens]):.0%}"
                         if model.supports(num_tokens) else "not defined")
        lines.append(f"{kind:<12}" + "".join(f"{cell:>20}" for cell in cells))
    return "\n".join(lines)


@remembered
def train_position_model(task: PositionTask, position: str, *, num_tokens: int = 8, num_steps: int = 200,
                         batch_size: int = 64, lr: float = 0.01, d_model: int = 32, num_heads: int = 2,
                         seed: int = 0, device: torch.device | str | None = None) -> PositionModel:
    """Train a :class:`PositionModel` on fresh batches of ``num_tokens`` tokens with Adam; return it in ``eval()``.

    Reproducible: the model is built under ``torch.manual_seed(seed)`` in a forked random state and the batches
    come from a ``torch.Generator`` seeded with ``seed``, all on the CPU, then moved to ``device``. The same
    ``seed`` gives the four kinds of position the same batches and the same starting weights (but for positions).

    The same call made again returns a copy of the first run instead of training again
    (:func:`helpers.training.remembered`).
    """
    if not isinstance(task, PositionTask):
        raise TypeError(f"task must be a PositionTask, got {type(task).__name__}")
    for name, value in (("num_tokens", num_tokens), ("num_steps", num_steps), ("batch_size", batch_size)):
        check_positive_int(name, value)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    device = torch.device("cpu") if device is None else torch.device(device)
    model = seeded(lambda: PositionModel(task.vocab_size, position, num_tokens, d_model, num_heads), seed).to(device)

    def step_loss(model: PositionModel, generator: torch.Generator) -> torch.Tensor:
        token_ids = task.sample(batch_size, num_tokens, generator)                     # (B, T), on the CPU
        logits = model(token_ids.to(device))                                           # (B, T, vocab_size)
        return nn.functional.cross_entropy(logits.flatten(0, 1), task.targets(token_ids).to(device).flatten(),
                                           ignore_index=IGNORE)

    train_loop(model, step_loss, num_steps=num_steps, lr=lr, seed=seed)  # the course's one loop: Adam, one thread
    return model.eval()
