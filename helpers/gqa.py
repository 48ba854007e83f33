"""Attention at generation time: the decoding mask, the KV cache and grouped-query attention.

Shapes use ``B`` (batch), ``H`` (query heads), ``H_kv`` (key/value heads), ``T_q`` (new queries),
``T_k`` (keys, cached and new), ``D`` (``head_dim``). A query's position counts from 0 over the whole
sequence, cache included: the last of ``T_q`` new queries sits at the same position as the last key.
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import check_float_tensor, check_ndim, check_positive_int, check_probability
from .attention import scaled_dot_product_attention

__all__ = ["decode_mask", "expand_kv_heads", "KVCache", "GroupedQueryAttention"]


def _check_window(window_size) -> None:
    if window_size is not None:
        check_positive_int("window_size", window_size)


def decode_mask(num_queries: int, num_keys: int, window_size: int | None = None,
                device: torch.device | str | None = None) -> torch.Tensor:
    """Bool mask ``(T_q, T_k)``, ``True`` = hide, for the *last* ``T_q`` tokens of ``T_k`` meeting all ``T_k`` keys.

    Query ``i`` sits at position ``p = T_k - T_q + i``: it sees keys ``j <= p`` and, with a window ``w``,
    only those with ``p - w < j``. With ``T_q == T_k`` this is the causal mask (or the sliding-window
    mask); with one new query and no window it hides nothing. The triangle is aligned bottom-right,
    not top-left as ``F.scaled_dot_product_attention(..., is_causal=True)`` aligns it.
    """
    check_positive_int("num_queries", num_queries)
    check_positive_int("num_keys", num_keys)
    _check_window(window_size)
    if num_queries > num_keys:
        raise ValueError(f"num_queries must be at most num_keys (the new tokens are among the keys), got "
                         f"num_queries={num_queries}, num_keys={num_keys}")
    query_positions = torch.arange(num_keys - num_queries, num_keys, device=device)[:, None]  # (T_q, 1)
    key_positions = torch.arange(num_keys, device=device)[None, :]  # (1, T_k)
    hide = key_positions > query_positions  # (T_q, T_k): the future
    if window_size is not None:
        hide |= key_positions <= query_positions - window_size  # fell out of the window
    return hide


def expand_kv_heads(kv: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(B, H_kv, T, D) -> (B, H, T, D)``: query head ``h`` gets key/value head ``h // G``, ``G = H / H_kv``.

    ``repeat_interleave`` keeps the ``G`` copies of each key/value head next to each other
    (heads ``0..G-1`` share head 0); ``repeat`` would interleave the groups instead.
    """
    check_float_tensor("kv", kv)
    check_ndim("kv", kv, (4,), "(batch_size, num_kv_heads, num_tokens, head_dim)")
    check_positive_int("num_heads", num_heads)
    if num_heads % kv.shape[1] != 0:
        raise ValueError(f"num_heads must be a multiple of the {kv.shape[1]} key/value heads, got {num_heads}")
    return kv.repeat_interleave(num_heads // kv.shape[1], dim=1)


class KVCache:
    """The keys and values of the tokens seen so far, for one attention layer.

    ``update(keys, values)`` appends the new tokens' keys ``(B, H_kv, T_new, D)`` and values ``(B, H_kv, T_new, D_v)``
    (usually ``D_v = D``) and returns
    everything the new queries may need: what was held, then the new entries. ``num_seen`` counts every
    token ever added: the position of the next token. With ``window_size=w`` the cache then keeps only
    the last ``w`` entries (a rolling cache): a later query never sees a key older than that.
    An empty cache holds nothing (``len(cache) == 0``, ``keys is None``).
    """

    def __init__(self, window_size: int | None = None):
        _check_window(window_size)
        self.window_size = window_size
        self.keys: torch.Tensor | None = None  # (B, H_kv, len(self), D)
        self.values: torch.Tensor | None = None
        self.num_seen = 0

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def __repr__(self) -> str:
        window = "" if self.window_size is None else f", window_size={self.window_size}"
        return f"KVCache(entries={len(self)}, num_seen={self.num_seen}{window})"

    def update(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for name, tensor in (("keys", keys), ("values", values)):
            check_float_tensor(name, tensor)
            check_ndim(name, tensor, (4,), "(batch_size, num_kv_heads, num_new_tokens, head_dim)")
        if keys.shape[:3] != values.shape[:3]:  # a value may be narrower or wider than its key (DeepSeek's MLA)
            raise ValueError(f"keys and values must have the same shape (batch_size, num_kv_heads, num_new_tokens), "
                             f"got {tuple(keys.shape)} and {tuple(values.shape)}")
        if self.keys is not None:
            for name, new, held in (("keys", keys, self.keys), ("values", values, self.values)):
                if (new.shape[0], new.shape[1], new.shape[3]) != (held.shape[0], held.shape[1], held.shape[3]):
                    raise ValueError(f"new {name} {tuple(new.shape)} do not fit the cache's (batch_size, "
                                     f"num_kv_heads, T, width) = ({held.shape[0]}, {held.shape[1]}, T, "
                                     f"{held.shape[3]})")
        num_new = keys.shape[2]
        if self.keys is not None:
            keys = torch.cat([self.keys, keys], dim=2)  # (B, H_kv, T_held, D) + (B, H_kv, T_new, D)
            values = torch.cat([self.values, values], dim=2)
        self.num_seen += num_new
        keep = keys.shape[2] if self.window_size is None else min(self.window_size, keys.shape[2])
        self.keys, self.values = keys[:, :, -keep:], values[:, :, -keep:]  # a rolling cache drops the oldest
        return keys, values

    def memory_bytes(self) -> int:
        """Bytes held by the cached keys and values."""
        if self.keys is None:
            return 0
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()


def check_layer_input(x, d_in: int, cache, cache_source: str = "") -> None:
    """The checks every cached attention layer makes on its input: ``x`` a float ``(B, T, d_in)`` tensor, ``cache`` a
    :class:`KVCache` or None (``cache_source`` names where a right one comes from, for the message)."""
    check_float_tensor("x", x)
    check_ndim("x", x, (3,), "(batch_size, num_tokens, d_in)")
    if x.shape[-1] != d_in:
        raise ValueError(f"x must have last dimension d_in={d_in}, got shape {tuple(x.shape)}")
    if cache is not None and not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache{cache_source} or None, got {type(cache).__name__}")


class GroupedQueryAttention(nn.Module):
    """Causal multi-head attention whose ``H`` query heads share ``H_kv`` key/value heads.

    ``W_query`` is ``nn.Linear(d_in, d_out)``; ``W_key`` and ``W_value`` are ``nn.Linear(d_in, H_kv * D)``;
    ``out_proj`` is ``nn.Linear(d_out, d_out)``, created in the order of
    :class:`helpers.modules.MultiHeadAttention`. ``num_kv_heads == num_heads`` is multi-head attention
    (under the same seed, the same parameters), ``num_kv_heads == 1`` is multi-query attention.
    ``window_size`` (optional): each query sees only itself and the ``window_size - 1`` keys before it.

    ``forward(x, cache=None)``: ``x`` ``(B, T, d_in)`` -> ``(B, T, d_out)``; with ``return_weights=True``
    also the weights ``(B, H, T, T_k)``. With a :class:`KVCache`, ``x`` holds only the new tokens and
    their keys and values join the cache; the positions seen may not exceed ``context_length``.
    """

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 num_kv_heads: int, qkv_bias: bool = False, window_size: int | None = None):
        super().__init__()
        for name, value in (("d_in", d_in), ("d_out", d_out), ("context_length", context_length),
                            ("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
            check_positive_int(name, value)
        check_probability("dropout", dropout)
        if not isinstance(qkv_bias, bool):
            raise TypeError(f"qkv_bias must be a bool, got {type(qkv_bias).__name__}")
        _check_window(window_size)
        if d_out % num_heads != 0:
            raise ValueError(f"d_out must be divisible by num_heads, got d_out={d_out}, num_heads={num_heads}")
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads must be divisible by num_kv_heads (each key/value head serves a whole "
                             f"group of query heads), got num_heads={num_heads}, num_kv_heads={num_kv_heads}")
        self.d_in, self.d_out, self.context_length, self.window_size = d_in, d_out, context_length, window_size
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = d_out // num_heads
        self.group_size = num_heads // num_kv_heads  # G: query heads per key/value head
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)

    def _split(self, t: torch.Tensor, heads: int) -> torch.Tensor:
        batch_size, num_tokens, _ = t.shape
        return t.view(batch_size, num_tokens, heads, self.head_dim).transpose(1, 2)  # (B, T, h*D) -> (B, h, T, D)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, return_weights: bool = False):
        check_layer_input(x, self.d_in, cache)
        batch_size, num_new, _ = x.shape
        seen = 0 if cache is None else cache.num_seen
        if seen + num_new > self.context_length:
            raise ValueError(f"{seen} cached + {num_new} new tokens exceed context_length={self.context_length}")
        queries = self._split(self.W_query(x), self.num_heads)  # (B, T_new, H * D) -> (B, H, T_new, D)
        keys = self._split(self.W_key(x), self.num_kv_heads)  # (B, T_new, H_kv * D) -> (B, H_kv, T_new, D)
        values = self._split(self.W_value(x), self.num_kv_heads)
        if cache is not None:
            keys, values = cache.update(keys, values)  # (B, H_kv, T_k, D): held entries, then the new ones
        mask = decode_mask(num_new, keys.shape[2], self.window_size, device=x.device)  # (T_new, T_k)
        keys = expand_kv_heads(keys, self.num_heads)  # (B, H_kv, T_k, D) -> (B, H, T_k, D)
        values = expand_kv_heads(values, self.num_heads)
        context_vecs, attn_weights = scaled_dot_product_attention(
            queries, keys, values, mask=mask, dropout_p=self.dropout.p, training=self.training
        )  # (B, H, T_new, D), (B, H, T_new, T_k)
        context_vecs = context_vecs.transpose(1, 2).reshape(batch_size, num_new, self.d_out)  # -> (B, T_new, d_out)
        outputs = self.out_proj(context_vecs)  # Z W_o + b_o: (B, T_new, d_out)
        return (outputs, attn_weights) if return_weights else outputs

    def extra_repr(self) -> str:
        window = "" if self.window_size is None else f", window_size={self.window_size}"
        return (f"num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
                f"context_length={self.context_length}{window}")
