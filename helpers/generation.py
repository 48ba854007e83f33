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


def _check_layer(name: str, layer, num_layers: int) -> int:
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < num_layers:
        raise ValueError(f"{name} must hold layer indices 0 .. {num_layers - 1}, got {layer!r}")
    return layer


def kv_cache_bytes(num_layers: int, num_kv_heads: int | None = None, head_dim: int | None = None, num_tokens: int = 1,
                   bytes_per_value: int | None = None, batch_size: int = 1, *, num_heads: int | None = None,
                   dtype: torch.dtype | None = None, value_head_dim: int | None = None,
                   window_size: int | None = None, window_layers=None, shared_layers: dict | None = None,
                   latent_dim: int | None = None, rope_dim: int | None = None) -> int:
    """Bytes of the cache of a whole model for ``batch_size`` sequences of ``num_tokens`` tokens.

    Per layer and token a layer with key/value heads holds ``H_kv * (head_dim + value_head_dim)`` numbers (keys and
    values; ``value_head_dim`` defaults to ``head_dim``); a multi-head latent attention layer (``latent_dim`` =
    ``d_c`` and ``rope_dim`` = ``d_R`` given instead of ``num_kv_heads`` and ``head_dim``) holds ``d_c + d_R``.

    Args:
        head_dim: the configuration's own ``head_dim``; never derived from ``d_model / num_heads`` (Qwen3-0.6B has
            ``d_model`` 1024, 16 heads and ``head_dim`` 128).
        num_heads: query heads ``H``: only checked (a multiple of ``H_kv``), since queries are never cached.
        bytes_per_value, dtype: the size of one number, as an int or a ``torch.dtype`` (default 2 bytes: bf16).
        window_size, window_layers: layers with a sliding window of ``window_size`` keep at most that many tokens
            (a rolling cache); ``window_layers`` lists them (default: every layer).
        shared_layers: ``{layer: other_layer}`` for layers that read another layer's cache and hold none.
    """
    check_positive_int("num_layers", num_layers)
    check_positive_int("num_tokens", num_tokens)
    check_positive_int("batch_size", batch_size)
    latent = latent_dim is not None or rope_dim is not None
    if latent:
        if num_kv_heads is not None or head_dim is not None or value_head_dim is not None:
            raise ValueError("give either num_kv_heads and head_dim (keys and values per head) or latent_dim and "
                             "rope_dim (multi-head latent attention), not both")
        check_positive_int("latent_dim", latent_dim)
        check_positive_int("rope_dim", rope_dim)
        per_token = latent_dim + rope_dim  # c_KV and the shared rotary key k_R
    else:
        if num_kv_heads is None or head_dim is None:
            raise ValueError("num_kv_heads and head_dim are needed (or latent_dim and rope_dim for latent attention)")
        check_positive_int("num_kv_heads", num_kv_heads)
        check_positive_int("head_dim", head_dim)
        value_head_dim = head_dim if value_head_dim is None else value_head_dim
        check_positive_int("value_head_dim", value_head_dim)
        if num_heads is not None:
            check_positive_int("num_heads", num_heads)
            if num_heads % num_kv_heads:
                raise ValueError(f"num_heads must be a multiple of num_kv_heads, got {num_heads} and {num_kv_heads}")
        per_token = num_kv_heads * (head_dim + value_head_dim)  # keys and values
    if dtype is not None:
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype such as torch.bfloat16, got {type(dtype).__name__}")
        size = torch.empty((), dtype=dtype).element_size()
        if bytes_per_value is not None and bytes_per_value != size:
            raise ValueError(f"bytes_per_value={bytes_per_value} contradicts dtype={dtype} ({size} bytes)")
        bytes_per_value = size
    bytes_per_value = 2 if bytes_per_value is None else bytes_per_value
    check_positive_int("bytes_per_value", bytes_per_value)
    if window_size is None and window_layers is not None:
        raise ValueError("window_layers needs a window_size")
    windowed = set()
    if window_size is not None:
        check_positive_int("window_size", window_size)
        layers = range(num_layers) if window_layers is None else list(window_layers)
        windowed = {_check_layer("window_layers", layer, num_layers) for layer in layers}
    shared = dict(shared_layers or {})
    for layer, source in shared.items():
        _check_layer("shared_layers", layer, num_layers)
        _check_layer("shared_layers", source, num_layers)
        if source == layer or source in shared:
            raise ValueError(f"shared_layers: layer {layer} must read the cache of a layer that keeps its own, "
                             f"got {source}")
    tokens = sum(min(num_tokens, window_size) if layer in windowed else num_tokens
                 for layer in range(num_layers) if layer not in shared)  # token entries over the layers that cache
    return tokens * per_token * bytes_per_value * batch_size


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
            if num_tokens > 2:  # fill the cache with all but the newest token (there is none to hold at 2)
                model(ids[:, :-1], cache=cache)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        model(ids[:, -1:], cache=cache) if use_cache else model(ids)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]
