"""Attention at generation time: a tiny causal language model, token-by-token generation with and
without a KV cache, and what the cache costs.

The toy language repeats a pattern: the first ``period`` tokens of a sequence are random letters, every
later token copies the token ``period`` places before it (``A C F B A C F B A ...``). After the first
period the next token is certain, so a trained model continues any prompt of one period without error.

The model (:class:`TinyCausalLM`) is token embedding + learned position embedding, one causal
:class:`~helpers.gqa.GroupedQueryAttention` layer, and a linear read-out, like notebook 08's model but
causal. Shapes use ``B`` (batch), ``T`` (tokens), ``V`` (``vocab_size``), ``H`` (heads).
"""

from __future__ import annotations

import string
import time
from dataclasses import dataclass

import torch
from torch import nn

from ._checks import check_positive_int
from .gqa import *  # noqa: F401,F403  (the cache and the attention layer are part of this lesson's API)
from .gqa import KVCache, GroupedQueryAttention
from .gqa import __all__ as _gqa_all
from .training import train_loop

__all__ = [*_gqa_all, "repeating_sequences", "TinyCausalLM", "train_tiny_lm", "Generation", "generate",
           "kv_cache_bytes", "time_per_token", "LETTERS"]

LETTERS = string.ascii_uppercase


def repeating_sequences(batch_size: int, num_tokens: int, period: int, vocab_size: int,
                        generator: torch.Generator | None = None) -> torch.Tensor:
    """``(B, T)`` long: ``period`` random token ids, repeated until ``num_tokens`` (the toy language)."""
    for name, value in (("batch_size", batch_size), ("num_tokens", num_tokens), ("period", period),
                        ("vocab_size", vocab_size)):
        check_positive_int(name, value)
    pattern = torch.randint(0, vocab_size, (batch_size, period), generator=generator)  # (B, period)
    return pattern.repeat(1, -(-num_tokens // period))[:, :num_tokens]  # (B, T): the pattern, again and again


class TinyCausalLM(nn.Module):
    """``logits = unembed(attention(token_embedding[ids] + position_embedding[positions]))``.

    Args:
        vocab_size: number of token ids ``V``.
        context_length: the longest sequence (the rows of the position table).
        d_model: width of the embeddings and of the attention layer.
        num_heads, num_kv_heads: query heads ``H`` and key/value heads ``H_kv`` (default ``H``).
        window_size: optional sliding window of the attention layer.

    ``forward(token_ids, cache=None)``: ``(B, T_new)`` long -> logits ``(B, T_new, V)``; with
    ``return_weights=True`` also the weights ``(B, H, T_new, T_k)``. With a cache the new tokens sit at
    positions ``cache.num_seen, cache.num_seen + 1, ...``, after the tokens already cached.
    """

    def __init__(self, vocab_size: int, context_length: int, d_model: int = 32, num_heads: int = 4,
                 num_kv_heads: int | None = None, window_size: int | None = None):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("context_length", context_length), ("d_model", d_model)):
            check_positive_int(name, value)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        self.vocab_size, self.context_length = vocab_size, context_length
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(context_length, d_model)
        self.attention = GroupedQueryAttention(d_model, d_model, context_length, 0.0, num_heads, num_kv_heads,
                                               window_size=window_size)
        self.unembed = nn.Linear(d_model, vocab_size)
        nn.init.normal_(self.token_embedding.weight, std=0.1)
        nn.init.normal_(self.position_embedding.weight, std=0.1)

    def new_cache(self) -> KVCache:
        """An empty cache for this model's attention layer (rolling if the layer has a window)."""
        return KVCache(window_size=self.attention.window_size)

    def forward(self, token_ids: torch.Tensor, cache: KVCache | None = None, return_weights: bool = False):
        if not isinstance(token_ids, torch.Tensor) or token_ids.dtype != torch.long:
            raise TypeError("token_ids must be a torch.long tensor of token ids, shape (batch_size, num_tokens)")
        if token_ids.dim() != 2 or token_ids.shape[1] == 0:
            raise ValueError(f"token_ids must have shape (batch_size, num_tokens), got {tuple(token_ids.shape)}")
        if token_ids.min() < 0 or token_ids.max() >= self.vocab_size:
            raise ValueError(f"token_ids must lie in [0, {self.vocab_size})")
        start = 0 if cache is None else cache.num_seen  # the position offset: tokens already in the cache
        if start + token_ids.shape[1] > self.context_length:
            raise ValueError(f"{start} cached + {token_ids.shape[1]} new tokens exceed "
                             f"context_length={self.context_length}")
        positions = torch.arange(start, start + token_ids.shape[1], device=token_ids.device)  # (T_new,)
        x = self.token_embedding(token_ids) + self.position_embedding(positions)  # (B, T_new, d_model)
        context_vecs, attn_weights = self.attention(x, cache=cache, return_weights=True)
        logits = self.unembed(context_vecs)  # (B, T_new, d_model) -> (B, T_new, V)
        return (logits, attn_weights) if return_weights else logits


def train_tiny_lm(model: TinyCausalLM, period: int, num_steps: int = 150, batch_size: int = 64, lr: float = 0.01,
                  seed: int = 0) -> list[float]:
    """Train ``model`` on the toy language with Adam; return the loss of every step.

    The loss is the cross-entropy of the next token at the positions where it is certain (from the
    last token of the first period on). The loop is :func:`helpers.training.train_loop`: batches come from a
    ``torch.Generator`` seeded with ``seed`` on the CPU, on one thread, so a run is the same on every machine.
    """
    if not isinstance(model, TinyCausalLM):
        raise TypeError(f"model must be a TinyCausalLM, got {type(model).__name__}")
    for name, value in (("period", period), ("num_steps", num_steps), ("batch_size", batch_size)):
        check_positive_int(name, value)
    if period >= model.context_length:
        raise ValueError(f"period must be shorter than context_length={model.context_length}, got {period}")
    device = next(model.parameters()).device

    def step_loss(model: TinyCausalLM, generator: torch.Generator) -> torch.Tensor:
        ids = repeating_sequences(batch_size, model.context_length, period, model.vocab_size, generator)
        ids = ids.to(device)  # (B, T)
        logits = model(ids[:, :-1])[:, period - 1:]  # (B, T - period, V): predictions of certain tokens
        return nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, period:].flatten())

    return train_loop(model, step_loss, num_steps=num_steps, lr=lr, seed=seed)  # the course's one loop


@dataclass
class Generation:
    """What :func:`generate` returns.

    Attributes:
        token_ids: ``(B, T_prompt + N)``: the prompt, then the ``N`` generated tokens.
        logits: ``(B, N, V)``: the logits each generated token was picked from.
        weights: ``N`` tensors ``(B, H, T_k)``: the newest query's weights over the keys at each step.
        query_rows: tokens pushed through the projections at each step (all of them, or the new ones).
        cache: the cache after the last step (``None`` without one).
    """

    token_ids: torch.Tensor
    logits: torch.Tensor
    weights: list[torch.Tensor]
    query_rows: list[int]
    cache: KVCache | None


@torch.no_grad()
def generate(model: TinyCausalLM, prompt_ids: torch.Tensor, num_new_tokens: int, use_cache: bool = True) -> Generation:
    """Greedy generation: append the highest-logit token ``num_new_tokens`` times.

    Without a cache every step runs the model on the whole sequence so far and keeps the last row.
    With one, the first step runs on the prompt (filling the cache) and each later step on the one
    token picked last, at the next position.
    """
    check_positive_int("num_new_tokens", num_new_tokens)
    if not isinstance(use_cache, bool):
        raise TypeError(f"use_cache must be a bool, got {type(use_cache).__name__}")
    if prompt_ids.shape[-1] + num_new_tokens - 1 > model.context_length:
        raise ValueError(f"a prompt of {prompt_ids.shape[-1]} tokens and {num_new_tokens} new ones do not fit "
                         f"context_length={model.context_length}")
    model.eval()
    cache = model.new_cache() if use_cache else None
    token_ids, new_input = prompt_ids, prompt_ids
    all_logits, weights, query_rows = [], [], []
    for _ in range(num_new_tokens):
        model_input = new_input if use_cache else token_ids  # (B, T_new) or (B, T)
        logits, attn_weights = model(model_input, cache=cache, return_weights=True)
        query_rows.append(model_input.shape[1])
        next_logits = logits[:, -1]  # (B, V): only the last position predicts the next token
        next_id = next_logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        all_logits.append(next_logits)
        weights.append(attn_weights[:, :, -1])  # (B, H, T_k): the newest query's row
        token_ids = torch.cat([token_ids, next_id], dim=1)
        new_input = next_id
    return Generation(token_ids, torch.stack(all_logits, dim=1), weights, query_rows, cache)


def kv_cache_bytes(num_layers: int, num_kv_heads: int, head_dim: int, num_tokens: int, bytes_per_value: int = 2,
                   batch_size: int = 1) -> int:
    """Memory of a full KV cache: ``2 (K and V) * layers * H_kv * head_dim * T * bytes * batch_size``."""
    for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim),
                        ("num_tokens", num_tokens), ("bytes_per_value", bytes_per_value),
                        ("batch_size", batch_size)):
        check_positive_int(name, value)
    return 2 * num_layers * num_kv_heads * head_dim * num_tokens * bytes_per_value * batch_size


@torch.no_grad()
def time_per_token(model: TinyCausalLM, num_tokens: int, use_cache: bool, repeats: int = 5) -> float:
    """Seconds to produce the logits of token ``num_tokens`` when ``num_tokens - 1`` tokens came before.

    Without a cache that is one pass over all ``num_tokens - 1`` tokens; with one, a pass over the one
    newest token, the cache holding the others (filled beforehand, not timed). The median of
    ``repeats`` runs on random tokens.
    """
    check_positive_int("repeats", repeats)
    if not 2 <= num_tokens <= model.context_length:
        raise ValueError(f"num_tokens must be in [2, {model.context_length}], got {num_tokens}")
    model.eval()
    device = next(model.parameters()).device
    ids = torch.randint(0, model.vocab_size, (1, num_tokens - 1), generator=torch.Generator().manual_seed(0))
    ids = ids.to(device)
    times = []
    for _ in range(repeats):
        cache = None
        if use_cache:
            cache = model.new_cache()
            model(ids[:, :-1], cache=cache)  # fill the cache with all but the newest token
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        model(ids[:, -1:], cache=cache) if use_cache else model(ids)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]
