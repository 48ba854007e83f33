"""Multi-head latent attention (MLA), as DeepSeek-V2 (Liu et al. 2024) and DeepSeek-V3 use it.

Keys and values of every head are expanded from one small latent per token, so a cache can keep the latent
instead of the keys and values. Notation (the course's card): ``d_c`` the latent width (``latent_dim``), ``d_R``
the width of the rotary part (``rope_dim``), ``D`` the head width (``head_dim``), ``H`` the heads; rows are tokens,
``x_t W`` is ``nn.Linear``'s ``x W^T``. For the token at position ``t``::

    c_t   = x_t W_DKV                      (d_c)   the latent: keys' and values' content, cached
    k_R_t = R_t (x_t W_KR)                 (d_R)   one rotary key for all heads, cached
    key of head h    = [c_t W_UK_h ; k_R_t]        (D + d_R)
    value of head h  =  c_t W_UV_h                 (D)
    query of head h  = [c_Q_t W_UQ_h ; R_t (c_Q_t W_QR_h)]   with c_Q_t = x_t W_DQ (or x_t without query compression)

``R_t`` is notebook 09's rotation (:func:`helpers.positions.apply_rope`). The rotation cannot sit inside the
compressed path: ``(R_t q) . (R_j k)`` depends on ``t - j``, so ``W_UK`` could no longer be folded into the query.

The cache of one layer is the course's :class:`~helpers.gqa.KVCache` with one "key" head holding ``k_R`` and one
"value" head holding the latent ``c``: ``d_c + d_R`` numbers per token. Two paths give the same outputs:

* naive: expand the cached latents into every head's keys and values, then attend;
* absorbed: fold ``W_UK_h`` into the query (``q_C W_UK_h^T`` is a ``d_c``-wide query) and ``W_UV_h`` into the
  output projection, and attend straight over the latents: multi-query attention with one key/value head.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import check_float_tensor, check_ndim, check_positive_int, check_probability
from .attention import scaled_dot_product_attention
from .gqa import KVCache, check_layer_input, decode_mask
from .positions import apply_rope

__all__ = ["MultiHeadLatentAttention"]


class MultiHeadLatentAttention(nn.Module):
    """Causal multi-head latent attention with decoupled RoPE, a naive and an absorbed path, and a latent cache.

    Args:
        d_in, d_out, context_length, dropout, num_heads: as :class:`helpers.modules.MultiHeadAttention`.
        latent_dim: ``d_c``, the width of the key/value latent (DeepSeek-V3: 512, its ``kv_lora_rank``).
        rope_dim: ``d_R``, the width of the rotary query and key parts (DeepSeek-V3: 64, ``qk_rope_head_dim``).
        head_dim: ``D``, the width of each head's content part (default ``d_out // num_heads``).
        query_latent_dim: ``d_c'``, compress the queries through a latent of this width first (DeepSeek-V3:
            1536, ``q_lora_rank``); ``None`` projects the queries from ``x`` directly.
        rope_base: the RoPE base of the rotary parts.

    ``forward(x, cache=None, absorbed=False)``: ``x`` ``(B, T_new, d_in)`` -> ``(B, T_new, d_out)``; with
    ``return_weights=True`` also the weights ``(B, H, T_new, T_k)``. With a cache from :meth:`new_cache`, ``x``
    holds only the new tokens, at positions ``cache.num_seen, ...``. Scores are divided by
    ``sqrt(head_dim + d_R)``, the width of a head's query, on both paths. DeepSeek's models also normalise the
    latents (RMSNorm), left out here.
    """

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int, latent_dim: int,
                 rope_dim: int, head_dim: int | None = None, query_latent_dim: int | None = None,
                 rope_base: float = 10000.0):
        super().__init__()
        for name, value in (("d_in", d_in), ("d_out", d_out), ("context_length", context_length),
                            ("num_heads", num_heads), ("latent_dim", latent_dim), ("rope_dim", rope_dim)):
            check_positive_int(name, value)
        check_probability("dropout", dropout)
        if rope_dim % 2:
            raise ValueError(f"rope_dim must be even (RoPE turns pairs of dimensions), got {rope_dim}")
        if head_dim is None:
            if d_out % num_heads:
                raise ValueError(f"d_out must be divisible by num_heads when head_dim is not given, got "
                                 f"d_out={d_out}, num_heads={num_heads}")
            head_dim = d_out // num_heads
        check_positive_int("head_dim", head_dim)
        if query_latent_dim is not None:
            check_positive_int("query_latent_dim", query_latent_dim)
        self.d_in, self.d_out, self.context_length, self.num_heads = d_in, d_out, context_length, num_heads
        self.latent_dim, self.rope_dim, self.head_dim, self.query_latent_dim = latent_dim, rope_dim, head_dim, \
            query_latent_dim
        self.rope_base = rope_base
        query_in = d_in if query_latent_dim is None else query_latent_dim
        self.W_DQ = None if query_latent_dim is None else nn.Linear(d_in, query_latent_dim, bias=False)
        self.W_UQ = nn.Linear(query_in, num_heads * head_dim, bias=False)   # content part of every head's query
        self.W_QR = nn.Linear(query_in, num_heads * rope_dim, bias=False)   # rotary part, one per head
        self.W_DKV = nn.Linear(d_in, latent_dim, bias=False)                # x -> c: the latent
        self.W_UK = nn.Linear(latent_dim, num_heads * head_dim, bias=False)  # c -> every head's key content
        self.W_UV = nn.Linear(latent_dim, num_heads * head_dim, bias=False)  # c -> every head's value
        self.W_KR = nn.Linear(d_in, rope_dim, bias=False)                   # x -> the shared rotary key
        self.out_proj = nn.Linear(num_heads * head_dim, d_out)
        self.dropout = nn.Dropout(dropout)

    def new_cache(self) -> KVCache:
        """An empty cache: per token it will hold ``k_R`` (as its key) and the latent ``c`` (as its value)."""
        return KVCache()

    def _heads(self, t: torch.Tensor, width: int) -> torch.Tensor:
        batch_size, num_tokens, _ = t.shape
        return t.view(batch_size, num_tokens, -1, width).transpose(1, 2)  # (B, T, h*w) -> (B, h, T, w)

    def queries(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The content part ``(B, H, T, D)`` and the rotated rotary part ``(B, H, T, d_R)`` of every query."""
        query_in = x if self.W_DQ is None else self.W_DQ(x)                   # (B, T, d_in or d_c')
        content = self._heads(self.W_UQ(query_in), self.head_dim)             # (B, H, T, D)
        rotary = apply_rope(self._heads(self.W_QR(query_in), self.rope_dim), positions, self.rope_base)
        return content, rotary                                                # R_t applied per head

    def latents(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What a token caches: its latent ``(B, 1, T, d_c)`` and its rotated rotary key ``(B, 1, T, d_R)``."""
        latents = self.W_DKV(x)[:, None]                                      # (B, T, d_in) -> (B, 1, T, d_c)
        rope_keys = apply_rope(self.W_KR(x)[:, None], positions, self.rope_base)  # (B, 1, T, d_R), shared by heads
        return latents, rope_keys

    def absorbed_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``W_UK`` per head ``(H, D, d_c)`` (for the queries) and ``W_UV_h W_O_h`` per head ``(H, d_c, d_out)``."""
        up_keys = self.W_UK.weight.view(self.num_heads, self.head_dim, self.latent_dim)      # (H, D, d_c)
        up_values = self.W_UV.weight.view(self.num_heads, self.head_dim, self.latent_dim)    # (H, D, d_c)
        out = self.out_proj.weight.view(self.d_out, self.num_heads, self.head_dim).permute(1, 2, 0)  # (H, D, d_out)
        return up_keys, up_values.transpose(1, 2) @ out                        # (H, d_c, D) @ (H, D, d_out)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, absorbed: bool = False,
                return_weights: bool = False):
        check_layer_input(x, self.d_in, cache, cache_source=" from new_cache()")
        if not isinstance(absorbed, bool):
            raise TypeError(f"absorbed must be a bool, got {type(absorbed).__name__}")
        batch_size, num_new, _ = x.shape
        seen = 0 if cache is None else cache.num_seen
        if seen + num_new > self.context_length:
            raise ValueError(f"{seen} cached + {num_new} new tokens exceed context_length={self.context_length}")
        positions = torch.arange(seen, seen + num_new)
        query_content, query_rotary = self.queries(x, positions)        # (B, H, T_new, D), (B, H, T_new, d_R)
        latents, rope_keys = self.latents(x, positions)                  # (B, 1, T_new, d_c), (B, 1, T_new, d_R)
        if cache is not None:
            rope_keys, latents = cache.update(rope_keys, latents)        # (B, 1, T_k, .): held, then new
        mask = decode_mask(num_new, latents.shape[2], device=x.device)   # (T_new, T_k)
        drop = dict(dropout_p=self.dropout.p, training=self.training)
        if absorbed:
            up_keys, up_values_out = self.absorbed_weights()
            latent_queries = query_content @ up_keys                     # (B, H, T, D) @ (H, D, d_c) -> (B, H, T, d_c)
            queries = torch.cat([latent_queries, query_rotary], dim=-1)  # (B, H, T, d_c + d_R)
            keys = torch.cat([latents, rope_keys], dim=-1)               # (B, 1, T_k, d_c + d_R): one head for all
            # The course's attention divides by sqrt(width of the keys) = sqrt(d_c + d_R); a head's query is
            # head_dim + d_R wide, so the queries are rescaled to give the naive path's sqrt(head_dim + d_R).
            queries = queries * math.sqrt((self.latent_dim + self.rope_dim) / (self.head_dim + self.rope_dim))
            latent_context, attn_weights = scaled_dot_product_attention(queries, keys, latents, mask=mask, **drop)
            outputs = torch.einsum("bhtc,hco->bto", latent_context, up_values_out) + self.out_proj.bias
        else:
            num_keys = latents.shape[2]
            keys = torch.cat([self._heads(self.W_UK(latents[:, 0]), self.head_dim),             # (B, H, T_k, D)
                              rope_keys.expand(batch_size, self.num_heads, num_keys, self.rope_dim)], dim=-1)
            values = self._heads(self.W_UV(latents[:, 0]), self.head_dim)                      # (B, H, T_k, D)
            queries = torch.cat([query_content, query_rotary], dim=-1)                        # (B, H, T, D + d_R)
            context_vecs, attn_weights = scaled_dot_product_attention(queries, keys, values, mask=mask, **drop)
            context_vecs = context_vecs.transpose(1, 2).reshape(batch_size, num_new, -1)      # (B, T, H * D)
            outputs = self.out_proj(context_vecs)
        return (outputs, attn_weights) if return_weights else outputs

    def extra_repr(self) -> str:
        query = "" if self.query_latent_dim is None else f", query_latent_dim={self.query_latent_dim}"
        return (f"num_heads={self.num_heads}, head_dim={self.head_dim}, latent_dim={self.latent_dim}, "
                f"rope_dim={self.rope_dim}{query}, context_length={self.context_length}")
