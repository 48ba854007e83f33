"""The five attention modules learners meet, in the order the course builds them.

Constructor signatures and the order in which parameters are created follow the
chapter-3 classes of *Build a Large Language Model (From Scratch)*, so that under
the same ``torch.manual_seed`` a learner gets the numbers printed in the book.

Every ``forward`` returns the context vectors; pass ``return_weights=True`` to
get ``(context_vecs, attn_weights)`` instead (for plotting). Nothing is stored on
``self`` between calls.
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import (
    check_float_tensor,
    check_last_dim,
    check_ndim,
    check_positive_int,
    check_probability,
)
from .attention import scaled_dot_product_attention

__all__ = [
    "SelfAttention_v1",
    "SelfAttention_v2",
    "CausalAttention",
    "MultiHeadAttentionWrapper",
    "MultiHeadAttention",
]


def _check_bias(qkv_bias) -> None:
    if not isinstance(qkv_bias, bool):
        raise TypeError(f"qkv_bias must be a bool, got {type(qkv_bias).__name__}")


def _check_input(x, d_in: int, context_length: int | None = None, batched_only: bool = False) -> None:
    """Validate a module input ``x`` of shape ``(B, T, d_in)`` (or ``(T, d_in)``)."""
    check_float_tensor("x", x)
    if batched_only:
        check_ndim("x", x, (3,), "(batch_size, num_tokens, d_in); add a batch dim with x.unsqueeze(0)")
    else:
        check_ndim("x", x, (2, 3), "(num_tokens, d_in) or (batch_size, num_tokens, d_in)")
    check_last_dim("x", x, d_in, "d_in")
    if context_length is not None and x.shape[-2] > context_length:
        raise ValueError(
            f"x has {x.shape[-2]} tokens but the module was built with context_length={context_length}"
        )


class SelfAttention_v1(nn.Module):
    """Self-attention with the weight matrices written out as ``nn.Parameter``.

    ``W_query``, ``W_key``, ``W_value`` have shape ``(d_in, d_out)`` and are drawn
    uniformly from [0, 1), as in the book, so ``x @ W`` projects a token.

    Input ``x``: ``(T, d_in)`` or ``(B, T, d_in)``; output: same leading dims, ``d_out`` features.
    """

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        check_positive_int("d_in", d_in)
        check_positive_int("d_out", d_out)
        self.d_in, self.d_out = d_in, d_out
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        _check_input(x, self.d_in)
        queries = x @ self.W_query  # (..., T, d_in) @ (d_in, d_out) -> (..., T, d_out)
        keys = x @ self.W_key
        values = x @ self.W_value
        context_vecs, attn_weights = scaled_dot_product_attention(queries, keys, values)
        return (context_vecs, attn_weights) if return_weights else context_vecs

    def extra_repr(self) -> str:
        return f"d_in={self.d_in}, d_out={self.d_out}"


class SelfAttention_v2(nn.Module):
    """Self-attention with ``nn.Linear`` projections (better initialisation, optional bias).

    ``nn.Linear`` stores its weight as ``(d_out, d_in)`` and computes ``x @ weight.T``:
    copying ``W_query.weight.T`` into a :class:`SelfAttention_v1` gives the same function.

    Input ``x``: ``(T, d_in)`` or ``(B, T, d_in)``; output: same leading dims, ``d_out`` features.
    """

    def __init__(self, d_in: int, d_out: int, qkv_bias: bool = False):
        super().__init__()
        check_positive_int("d_in", d_in)
        check_positive_int("d_out", d_out)
        _check_bias(qkv_bias)
        self.d_in, self.d_out = d_in, d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        _check_input(x, self.d_in)
        queries = self.W_query(x)  # (..., T, d_in) -> (..., T, d_out)
        keys = self.W_key(x)
        values = self.W_value(x)
        context_vecs, attn_weights = scaled_dot_product_attention(queries, keys, values)
        return (context_vecs, attn_weights) if return_weights else context_vecs


class CausalAttention(nn.Module):
    """Single-head causal self-attention with dropout on the attention weights.

    The mask is a buffer (it moves with ``.to(device)`` and is saved in the
    ``state_dict`` under ``mask``, as in the book). Dropout is only active in
    ``train()`` mode; call ``.eval()`` for deterministic outputs.

    Input ``x``: ``(B, T, d_in)`` with ``T <= context_length``; output ``(B, T, d_out)``;
    weights ``(B, T, T)``.
    """

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, qkv_bias: bool = False):
        super().__init__()
        check_positive_int("d_in", d_in)
        check_positive_int("d_out", d_out)
        check_positive_int("context_length", context_length)
        check_probability("dropout", dropout)
        _check_bias(qkv_bias)
        self.d_in, self.d_out, self.context_length = d_in, d_out, context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        # 1 above the diagonal = a future token this query must not see.
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        _check_input(x, self.d_in, self.context_length, batched_only=True)
        num_tokens = x.shape[1]
        queries = self.W_query(x)  # (B, T, d_in) -> (B, T, d_out)
        keys = self.W_key(x)
        values = self.W_value(x)
        mask = self.mask[:num_tokens, :num_tokens].bool()  # (T, T), broadcast over the batch
        context_vecs, attn_weights = scaled_dot_product_attention(
            queries, keys, values, mask=mask, dropout_p=self.dropout.p, training=self.training
        )
        return (context_vecs, attn_weights) if return_weights else context_vecs


class MultiHeadAttentionWrapper(nn.Module):
    """``num_heads`` independent :class:`CausalAttention` heads, outputs concatenated.

    ``head_dim`` is the width of *each* head, so the output has ``num_heads * head_dim`` features. Raschka
    (2024, ch. 3) calls this argument ``d_out``; ``d_out=`` is still accepted as a keyword for it.

    Input ``x``: ``(B, T, d_in)``; output ``(B, T, num_heads * head_dim)``; weights ``(B, H, T, T)``.
    """

    def __init__(self, d_in: int, head_dim: int | None = None, context_length: int | None = None,
                 dropout: float | None = None, num_heads: int | None = None, qkv_bias: bool = False, *,
                 d_out: int | None = None):
        super().__init__()
        if d_out is not None:
            if head_dim is not None:
                raise TypeError("give the width of one head once: head_dim (or its old name d_out), not both")
            head_dim = d_out
        for name, value in (("head_dim", head_dim), ("context_length", context_length), ("dropout", dropout),
                            ("num_heads", num_heads)):
            if value is None:
                raise TypeError(f"MultiHeadAttentionWrapper needs {name}")
        check_positive_int("num_heads", num_heads)
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, head_dim, context_length, dropout, qkv_bias) for _ in range(num_heads)]
        )

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        outputs = [head(x, return_weights=True) for head in self.heads]
        context_vecs = torch.cat([ctx for ctx, _ in outputs], dim=-1)  # H x (B, T, head_dim) -> (B, T, H*head_dim)
        if not return_weights:
            return context_vecs
        attn_weights = torch.stack([w for _, w in outputs], dim=1)  # H x (B, T, T) -> (B, H, T, T)
        return context_vecs, attn_weights


class MultiHeadAttention(nn.Module):
    """Multi-head attention (causal by default) with the heads split out of one set of projections.

    One ``nn.Linear(d_in, d_out)`` each for queries, keys and values; the ``d_out``
    features are split into ``num_heads`` heads of ``head_dim = d_out // num_heads``,
    attended separately, concatenated back and mixed by ``out_proj``
    (``nn.Linear(d_out, d_out)``, created last).

    ``causal=False`` drops the causal mask (an encoder such as BERT: every token sees
    every other). ``forward(x, padding_mask=...)`` hides padded keys: a bool
    ``(B, T)`` tensor, ``True`` at padding (the convention of ``key_padding_mask`` in
    ``torch.nn.MultiheadAttention``), so a batch of sentences of different lengths
    gives each sentence the result it gets alone.

    Input ``x``: ``(B, T, d_in)`` with ``T <= context_length``; output ``(B, T, d_out)``;
    weights ``(B, H, T, T)``.
    """

    def __init__(self, d_in: int, d_out: int, context_length: int, dropout: float, num_heads: int,
                 qkv_bias: bool = False, causal: bool = True):
        super().__init__()
        for name, value in (("d_in", d_in), ("d_out", d_out), ("context_length", context_length),
                            ("num_heads", num_heads)):
            check_positive_int(name, value)
        check_probability("dropout", dropout)
        _check_bias(qkv_bias)
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
        self.causal = causal
        if d_out % num_heads != 0:
            raise ValueError(f"d_out must be divisible by num_heads, got d_out={d_out}, num_heads={num_heads}")
        self.d_in, self.d_out, self.context_length = d_in, d_out, context_length
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)  # mixes what the heads found
        self.dropout = nn.Dropout(dropout)
        # None (and not in the state_dict) without a causal mask
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1)
                             if causal else None)

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        batch_size, num_tokens, _ = t.shape
        t = t.view(batch_size, num_tokens, self.num_heads, self.head_dim)  # (B, T, d_out) -> (B, T, H, D)
        return t.transpose(1, 2)  # (B, T, H, D) -> (B, H, T, D)

    def forward(self, x: torch.Tensor, return_weights: bool = False, padding_mask: torch.Tensor | None = None):
        _check_input(x, self.d_in, self.context_length, batched_only=True)
        batch_size, num_tokens, _ = x.shape
        queries = self._split_heads(self.W_query(x))  # (B, T, d_in) -> (B, H, T, D)
        keys = self._split_heads(self.W_key(x))
        values = self._split_heads(self.W_value(x))
        mask = self.mask[:num_tokens, :num_tokens].bool() if self.causal else None  # (T, T), over batch and heads
        if padding_mask is not None:
            if not isinstance(padding_mask, torch.Tensor) or padding_mask.dtype != torch.bool \
                    or tuple(padding_mask.shape) != (batch_size, num_tokens):
                raise ValueError(f"padding_mask must be a bool tensor of shape (batch_size, num_tokens) = "
                                 f"{(batch_size, num_tokens)}, True at padding; got "
                                 f"{getattr(padding_mask, 'dtype', type(padding_mask).__name__)} "
                                 f"{tuple(getattr(padding_mask, 'shape', ()))}")
            hide_keys = padding_mask[:, None, None, :]  # (B, T) -> (B, 1, 1, T): a padded key, hidden from every query
            mask = hide_keys if mask is None else mask | hide_keys
        context_vecs, attn_weights = scaled_dot_product_attention(
            queries, keys, values, mask=mask, dropout_p=self.dropout.p, training=self.training
        )  # (B, H, T, D), (B, H, T, T)
        context_vecs = context_vecs.transpose(1, 2).contiguous()  # (B, H, T, D) -> (B, T, H, D)
        context_vecs = context_vecs.view(batch_size, num_tokens, self.d_out)  # (B, T, H, D) -> (B, T, d_out)
        context_vecs = self.out_proj(context_vecs)
        return (context_vecs, attn_weights) if return_weights else context_vecs

    def extra_repr(self) -> str:
        causal = "" if self.causal else ", causal=False"
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}, context_length={self.context_length}{causal}"
