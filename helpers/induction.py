"""Two attention layers that compose: the data, the model, the head scores and the knock-out of notebook 12.

The data: a start token (id 0) at position 0, then a pattern of ``Δ`` distinct random tokens repeated until the
end of the sequence; the period ``Δ`` is drawn anew for every sequence, so no fixed position holds the answer.
From the second period on, every next token is a copy: the token that followed the previous occurrence of the
current token (what an *induction head* predicts; Elhage et al. 2021, Olsson et al. 2022).

The model: token embedding + learned positions, ``num_layers`` causal attention layers
(:class:`~helpers.gqa.GroupedQueryAttention` with as many key/value heads as query heads, i.e. notebook 06's
multi-head attention), each *added* to a residual stream, then a linear read-out. No MLP, no LayerNorm.

Shapes: ``B`` batch, ``T`` tokens, ``H`` heads, ``V`` ``vocab_size``, ``D`` ``head_dim``.
"""

from __future__ import annotations

import contextlib
import string
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ._checks import check_float_tensor, check_positive_int
from .gqa import GroupedQueryAttention, KVCache
from .positions import LearnedPositions
from .training import remembered, seeded, train_loop

__all__ = ["START", "TOKENS", "encode", "repeated_sequences", "in_context_mask", "InductionModel", "knocked_out",
           "previous_token_score", "prefix_matching_score", "copying_score", "in_context_loss", "next_token_loss",
           "InductionRun", "train_induction_model"]

START = 0  # the id of the start token; the other ids are the random tokens
TOKENS = ["<s>", *string.ascii_uppercase, *string.ascii_lowercase, *string.digits]  # 63 names: id -> name


def encode(text: str) -> torch.Tensor:
    """``(1, 1 + len(text))`` ids: the start token, then one token per letter or digit of ``text``."""
    if not isinstance(text, str) or not all(ch in TOKENS[1:] for ch in text):
        raise ValueError(f"text must hold letters and digits only (one token each), got {text!r}")
    return torch.tensor([[START, *(TOKENS.index(ch) for ch in text)]])


def repeated_sequences(batch_size: int, num_tokens: int = 32, vocab_size: int = 63, min_period: int = 4,
                       max_period: int = 12, generator: torch.Generator | None = None,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids (B, T), periods (B,))``: the start token, then ``Δ`` distinct random tokens repeated until ``T``.

    Each sequence draws its period ``Δ`` uniformly from ``min_period..max_period`` and its pattern from the ids
    ``1 .. V - 1`` without repetition (so every token has at most one earlier occurrence per period).
    """
    for name, value in (("batch_size", batch_size), ("num_tokens", num_tokens), ("vocab_size", vocab_size),
                        ("min_period", min_period), ("max_period", max_period)):
        check_positive_int(name, value)
    if not min_period <= max_period < vocab_size:
        raise ValueError(f"need min_period <= max_period < vocab_size, got {min_period}, {max_period}, {vocab_size}")
    if max_period + 2 > num_tokens:
        raise ValueError(f"num_tokens={num_tokens} leaves no room for a repeat of a period of {max_period}")
    periods = torch.randint(min_period, max_period + 1, (batch_size,), generator=generator)  # (B,)
    patterns = torch.rand(batch_size, vocab_size - 1, generator=generator).argsort(dim=-1) + 1  # (B, V - 1)
    index = (torch.arange(num_tokens - 1)[None, :] % periods[:, None])  # (B, T - 1): i mod L
    ids = torch.cat([torch.full((batch_size, 1), START), patterns.gather(1, index)], dim=1)  # (B, T)
    return ids, periods


def in_context_mask(periods: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """``(B, T - 1)`` bool: the positions ``i`` whose next token an induction head can predict.

    Position ``i`` predicts token ``i + 1``; from ``i = Δ + 1`` on, token ``i`` occurred at ``i - Δ`` and the
    token after that occurrence is the answer.
    """
    positions = torch.arange(num_tokens - 1)[None, :]  # (1, T - 1)
    return positions >= periods[:, None] + 1


class InductionModel(nn.Module):
    """``num_layers`` causal attention layers on a residual stream: ``x <- x + MultiHead_l(x)``, then read out.

    Args:
        vocab_size: ``V``, the start token included.
        context_length: the longest sequence (the rows of the position table).
        d_model, num_heads: width of the stream and heads per layer.
        num_layers: attention layers (2 for induction heads; 1 for the control).

    ``forward(token_ids, caches=None, return_weights=False)``: ``(B, T)`` long -> logits ``(B, T, V)``; with
    ``return_weights=True`` also a list of one ``(B, H, T, T_k)`` tensor per layer. With ``caches`` (one
    :class:`~helpers.gqa.KVCache` per layer) the tokens sit after those already cached.
    """

    def __init__(self, vocab_size: int = 63, context_length: int = 32, d_model: int = 64, num_heads: int = 2,
                 num_layers: int = 2):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("context_length", context_length), ("d_model", d_model),
                            ("num_heads", num_heads), ("num_layers", num_layers)):
            check_positive_int(name, value)
        self.vocab_size, self.context_length = vocab_size, context_length
        self.num_heads, self.num_layers = num_heads, num_layers
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.token_embedding.weight, std=0.1)
        self.position_embedding = LearnedPositions(context_length, d_model)
        self.layers = nn.ModuleList(GroupedQueryAttention(d_model, d_model, context_length, 0.0, num_heads, num_heads)
                                    for _ in range(num_layers))
        self.unembed = nn.Linear(d_model, vocab_size)

    def forward(self, token_ids: torch.Tensor, caches: Sequence[KVCache] | None = None,
                return_weights: bool = False):
        if not isinstance(token_ids, torch.Tensor) or token_ids.dtype != torch.long or token_ids.dim() != 2:
            raise TypeError("token_ids must be a torch.long tensor of shape (batch_size, num_tokens)")
        if token_ids.numel() and (token_ids.min() < 0 or token_ids.max() >= self.vocab_size):
            raise ValueError(f"token_ids must lie in [0, {self.vocab_size})")
        if caches is not None and len(caches) != self.num_layers:
            raise ValueError(f"caches must hold one KVCache per layer ({self.num_layers}), got {len(caches)}")
        start = 0 if caches is None else caches[0].num_seen  # tokens already cached
        if start + token_ids.shape[1] > self.context_length:
            raise ValueError(f"{start} cached + {token_ids.shape[1]} new tokens exceed "
                             f"context_length={self.context_length}")
        positions = self.position_embedding.weight[start:start + token_ids.shape[1]]  # (T, d_model): P_i
        x = self.token_embedding(token_ids) + positions  # (B, T, d_model): the residual stream
        all_weights = []
        for index, layer in enumerate(self.layers):
            context_vecs, attn_weights = layer(x, cache=None if caches is None else caches[index],
                                               return_weights=True)  # (B, T, d_model), (B, H, T, T_k)
            x = x + context_vecs  # each layer adds to the stream; the next layer reads the sum
            all_weights.append(attn_weights)
        logits = self.unembed(x)  # (B, T, d_model) -> (B, T, V)
        return (logits, all_weights) if return_weights else logits


@contextlib.contextmanager
def knocked_out(model: InductionModel, heads: Sequence[tuple[int, int]]) -> Iterator[None]:
    """Inside the block, the listed ``(layer, head)`` heads write nothing to the residual stream.

    Head ``h``'s context vectors are columns ``h * D .. (h + 1) * D - 1`` of the merged ``(B, T, d_model)``
    tensor that enters ``out_proj`` (``W_o``); they are set to zero there.
    """
    hooks = []
    try:
        for layer, head in heads:
            if not (0 <= layer < model.num_layers and 0 <= head < model.num_heads):
                raise ValueError(f"no head {head} in layer {layer}: the model has {model.num_layers} layers of "
                                 f"{model.num_heads} heads")
            width = model.layers[layer].head_dim

            def zero_head(_module, inputs, head=head, width=width):
                (context_vecs,) = inputs  # (B, T, H * D): the heads side by side
                context_vecs = context_vecs.clone()
                context_vecs[..., head * width:(head + 1) * width] = 0.0
                return (context_vecs,)

            hooks.append(model.layers[layer].out_proj.register_forward_pre_hook(zero_head))
        yield
    finally:
        for hook in hooks:
            hook.remove()


def previous_token_score(attn_weights: torch.Tensor) -> torch.Tensor:
    """Mean weight a query puts on the token just before it: ``(..., T, T)`` -> ``(...)``.

    ``mean over i >= 1 of a[i, i - 1]`` (query 0 has no previous token).
    """
    check_float_tensor("attn_weights", attn_weights)
    if attn_weights.dim() < 2 or attn_weights.shape[-1] != attn_weights.shape[-2]:
        raise ValueError(f"attn_weights must have shape (..., T, T), got {tuple(attn_weights.shape)}")
    return attn_weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1)  # a[i, i - 1] for i = 1 .. T - 1


def _prefix_targets(token_ids: torch.Tensor) -> torch.Tensor:
    """``(..., T)`` ids -> ``(..., T, T)`` bool: key ``j`` follows an earlier occurrence of query ``i``'s token."""
    num_tokens = token_ids.shape[-1]
    before = torch.cat([torch.full_like(token_ids[..., :1], -1), token_ids[..., :-1]], dim=-1)  # ids_{j-1}; -1 at 0
    same = before[..., None, :] == token_ids[..., :, None]  # (..., T, T): ids_{j-1} == ids_i
    causal = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=token_ids.device).tril()  # j <= i
    return same & causal


def prefix_matching_score(attn_weights: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Mean weight a query puts on the tokens that followed earlier occurrences of its own token.

    Shapes: ``attn_weights`` ``(B, H, T, T)``, ``token_ids`` ``(B, T)`` -> ``(H,)``. Averaged over the queries
    whose token occurred before (the others have nothing to match).
    """
    check_float_tensor("attn_weights", attn_weights)
    if attn_weights.dim() != 4 or token_ids.shape != (attn_weights.shape[0], attn_weights.shape[-1]):
        raise ValueError(f"need attn_weights (B, H, T, T) and token_ids (B, T), got {tuple(attn_weights.shape)} "
                         f"and {tuple(token_ids.shape)}")
    targets = _prefix_targets(token_ids)  # (B, T, T)
    counted = targets.any(dim=-1)  # (B, T): queries with an earlier occurrence
    on_target = (attn_weights * targets[:, None]).sum(dim=-1)  # (B, H, T)
    return on_target.transpose(0, 1)[:, counted].mean(dim=-1)  # (H,)


@torch.no_grad()
def copying_score(model: InductionModel, layer: int) -> torch.Tensor:
    """``(H,)``: for each head, the fraction of tokens it copies through its value and output matrices alone.

    The head's path from a token to the logits, ``E W_v^h W_o^h W_out`` (``V x V``), taken straight (nothing
    else added to the stream): token ``t`` is copied if its own logit is strictly the largest in row ``t``.
    The start token is left out.
    """
    attention = model.layers[layer]
    width = attention.head_dim
    embeddings = model.token_embedding.weight[1:]  # (V - 1, d_model): every token but the start token
    scores = []
    for head in range(model.num_heads):
        columns = slice(head * width, (head + 1) * width)
        values = embeddings @ attention.W_value.weight[columns].T  # (V - 1, D)
        written = values @ attention.out_proj.weight[:, columns].T  # (V - 1, d_model)
        logits = written @ model.unembed.weight[1:].T  # (V - 1, V - 1): logits of the ordinary tokens
        own = logits.diagonal()  # (V - 1,): the logit of the token attended to
        others = logits.masked_fill(torch.eye(len(logits), dtype=torch.bool, device=logits.device), float("-inf"))
        scores.append((own > others.max(dim=-1).values).float().mean())  # strictly the largest
    return torch.stack(scores)


def in_context_loss(logits: torch.Tensor, token_ids: torch.Tensor, periods: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the next token at the positions an induction head can predict (:func:`in_context_mask`).

    ``logits`` ``(B, T, V)``, ``token_ids`` ``(B, T)``, ``periods`` ``(B,)`` -> a scalar.
    """
    mask = in_context_mask(periods, token_ids.shape[1]).to(logits.device)  # (B, T - 1)
    losses = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), token_ids[:, 1:], reduction="none")
    return losses[mask].mean()


@dataclass
class InductionRun:
    """What :func:`train_induction_model` returns; the checkpoints are kept in memory, on the CPU.

    Attributes:
        model: the trained model, in ``eval()`` mode.
        steps: ``S`` step counts of the checkpoints (0 = before training).
        losses: the training loss (every position) of every step.
        in_context_losses: ``S`` floats, :func:`in_context_loss` on the evaluation batch.
        previous_token, prefix_matching, copying: ``(S, layers, H)`` head scores at each checkpoint
            (the first two on the evaluation batch).
        watch_ids: ``(T,)`` one sequence of the evaluation batch, watched during training;
            ``watch_period`` its period Δ.
        watch_weights: ``(S, layers, H, T, T)`` every head's weights on ``watch_ids`` at each checkpoint.
        states: ``S`` copies of the model's ``state_dict`` (on the CPU), one per checkpoint:
            ``model.load_state_dict(run.states[k])`` gives the model as it was at ``steps[k]``.
    """

    model: InductionModel
    steps: list[int]
    losses: list[float]
    in_context_losses: list[float]
    previous_token: torch.Tensor
    prefix_matching: torch.Tensor
    copying: torch.Tensor
    watch_ids: torch.Tensor
    watch_period: int
    watch_weights: torch.Tensor
    states: list[dict[str, torch.Tensor]]

    def checkpoint(self, step: int) -> int:
        """Index of the checkpoint taken at ``step``."""
        if step not in self.steps:
            raise ValueError(f"no checkpoint at step {step}; checkpoints every {self.steps[1]} steps")
        return self.steps.index(step)


def next_token_loss(model: InductionModel, token_ids: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of every next token: position ``i`` predicts token ``i + 1``."""
    logits = model(token_ids)  # (B, T, V)
    return nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), token_ids[:, 1:].flatten())


@remembered
def train_induction_model(num_layers: int = 2, *, num_steps: int = 400, batch_size: int = 32, lr: float = 3e-3,
                          seed: int = 0, checkpoint_every: int = 10, vocab_size: int = 63, num_tokens: int = 32,
                          min_period: int = 4, max_period: int = 12, d_model: int = 64, num_heads: int = 2,
                          num_eval: int = 64, device: torch.device | str | None = None) -> InductionRun:
    """Train an :class:`InductionModel` on :func:`repeated_sequences` (AdamW, every next token); keep checkpoints.

    Uses the course's loop (:func:`helpers.training.train_loop`): initial weights under ``seed``, a fresh batch
    every step from a generator seeded with ``seed``, one thread. The evaluation batch (``num_eval`` sequences)
    comes from its own generator (seed ``seed + 1000``), so it is never a training batch. The same call made again
    in the same kernel returns a copy of the first run (:func:`helpers.training.remembered`) instead of training
    again.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    model = seeded(lambda: InductionModel(vocab_size, num_tokens, d_model, num_heads, num_layers), seed).to(device)
    eval_ids, eval_periods = repeated_sequences(num_eval, num_tokens, vocab_size, min_period, max_period,
                                                torch.Generator().manual_seed(seed + 1000))
    eval_ids = eval_ids.to(device)
    record = _Recorder(model, eval_ids, eval_periods)

    def step_loss(model: InductionModel, generator: torch.Generator) -> torch.Tensor:
        token_ids, _ = repeated_sequences(batch_size, num_tokens, vocab_size, min_period, max_period, generator)
        return next_token_loss(model, token_ids.to(device))

    losses = train_loop(model, step_loss, num_steps=num_steps, lr=lr, seed=seed, optimizer=torch.optim.AdamW,
                        record=record, record_every=checkpoint_every)
    return InductionRun(model, record.steps, losses, record.in_context, torch.tensor(record.previous),
                        torch.tensor(record.prefix), torch.tensor(record.copying), eval_ids[0].cpu(),
                        int(eval_periods[0]), torch.stack(record.weights), record.states)


class _Recorder:
    """Called at every checkpoint: scores on the evaluation batch, the watched sequence's weights, the parameters."""

    def __init__(self, model: InductionModel, eval_ids: torch.Tensor, eval_periods: torch.Tensor):
        self.model, self.eval_ids, self.eval_periods = model, eval_ids, eval_periods
        self.steps, self.in_context, self.previous, self.prefix, self.copying, self.weights = [], [], [], [], [], []
        self.states = []

    def __call__(self, step: int) -> None:
        logits, all_weights = self.model(self.eval_ids, return_weights=True)
        self.steps.append(step)
        self.in_context.append(float(in_context_loss(logits, self.eval_ids, self.eval_periods)))
        self.previous.append([previous_token_score(w).mean(dim=0).tolist() for w in all_weights])
        self.prefix.append([prefix_matching_score(w, self.eval_ids).tolist() for w in all_weights])
        self.copying.append([copying_score(self.model, layer).tolist() for layer in range(self.model.num_layers)])
        self.weights.append(torch.stack([w[0] for w in all_weights]).cpu())  # (layers, H, T, T)
        self.states.append({name: value.detach().cpu().clone() for name, value in self.model.state_dict().items()})
