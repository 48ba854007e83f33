"""Cross-attention: queries from one sequence, keys and values from another.

In an encoder-decoder transformer (Vaswani et al. 2017) the decoder's tokens ``x`` (the target being written)
ask the questions, and the encoder's output ``source`` (written $Y$) answers them:

    Q = x W_q   (B, T_q, d_out)        K = Y W_k,  V = Y W_v   (B, T_k, d_out)
    A = softmax(Q K^T / sqrt(d_head))  (B, H, T_q, T_k): one row per query, one column per source token

The weights are no longer square: ``T_q`` target tokens against ``T_k`` source tokens. The only mask that
belongs here hides the source's padding, a *key* mask of shape ``(B, T_k)``; causality is the business of the
decoder's self-attention, never of cross-attention (every output may read the whole source).

Shapes use ``B`` (batch), ``T_q`` (queries), ``T_k`` (keys and values, the source tokens), ``H`` (heads),
``D`` (``head_dim``).
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import check_float_tensor, check_last_dim, check_ndim, check_positive_int, check_probability
from .attention import scaled_dot_product_attention

__all__ = ["CrossAttention"]


class CrossAttention(nn.Module):
    """Multi-head cross-attention: ``x`` queries, ``source`` supplies keys and values.

    The constructor follows :class:`helpers.modules.MultiHeadAttention` (without ``context_length``: there is no
    causal mask to size): ``W_query`` (``d_in -> d_out``), ``W_key`` and ``W_value`` (``d_source -> d_out``),
    created in that order, then ``out_proj`` (``nn.Linear(d_out, d_out)``). ``d_source`` is the width of the
    source's vectors; it defaults to ``d_in``. It is ``kdim``/``vdim`` of ``torch.nn.MultiheadAttention``.

    ``forward(x, source, source_padding_mask=None, return_weights=False)``:
        x: ``(B, T_q, d_in)``, the queries' sequence (the decoder's tokens).
        source: ``(B, T_k, d_source)``, the keys' and values' sequence ($Y$, the encoder's output).
        source_padding_mask: optional bool ``(B, T_k)``, True at the source's padding tokens (hidden from every
            query; the same convention as ``key_padding_mask`` of ``torch.nn.MultiheadAttention``).
        returns: context vectors ``(B, T_q, d_out)``; with ``return_weights=True`` also the weights
            ``(B, H, T_q, T_k)``.
    """

    def __init__(self, d_in: int, d_out: int, dropout: float, num_heads: int, qkv_bias: bool = False,
                 d_source: int | None = None):
        super().__init__()
        d_source = d_in if d_source is None else d_source
        for name, value in (("d_in", d_in), ("d_out", d_out), ("num_heads", num_heads), ("d_source", d_source)):
            check_positive_int(name, value)
        check_probability("dropout", dropout)
        if not isinstance(qkv_bias, bool):
            raise TypeError(f"qkv_bias must be a bool, got {type(qkv_bias).__name__}")
        if d_out % num_heads != 0:
            raise ValueError(f"d_out must be divisible by num_heads, got d_out={d_out}, num_heads={num_heads}")
        self.d_in, self.d_out, self.d_source, self.num_heads = d_in, d_out, d_source, num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)       # reads the target's tokens x
        self.W_key = nn.Linear(d_source, d_out, bias=qkv_bias)     # reads the source Y
        self.W_value = nn.Linear(d_source, d_out, bias=qkv_bias)   # reads the source Y
        self.out_proj = nn.Linear(d_out, d_out)  # mixes what the heads found
        self.dropout = nn.Dropout(dropout)

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        batch_size, num_tokens, _ = t.shape
        t = t.view(batch_size, num_tokens, self.num_heads, self.head_dim)  # (B, T, d_out) -> (B, T, H, D)
        return t.transpose(1, 2)  # (B, T, H, D) -> (B, H, T, D)

    def _check(self, x, source, source_padding_mask) -> None:
        check_float_tensor("x", x)
        check_float_tensor("source", source)
        check_ndim("x", x, (3,), "(batch_size, num_queries, d_in)")
        check_ndim("source", source, (3,), "(batch_size, num_keys, d_source)")
        check_last_dim("x", x, self.d_in, "d_in")
        check_last_dim("source", source, self.d_source, "d_source")
        if x.shape[0] != source.shape[0]:
            raise ValueError(f"x and source must hold the same number of sequences (batch_size), got x "
                             f"{tuple(x.shape)} and source {tuple(source.shape)}")
        if source_padding_mask is None:
            return
        if not isinstance(source_padding_mask, torch.Tensor) or source_padding_mask.dtype != torch.bool:
            raise TypeError("source_padding_mask must be a bool torch.Tensor of shape (batch_size, num_keys), "
                            "True at the source's padding")
        expected = (source.shape[0], source.shape[1])
        if tuple(source_padding_mask.shape) != expected:
            raise ValueError(f"source_padding_mask must have shape (batch_size, num_keys) = {expected}, one entry "
                             f"per source token, got {tuple(source_padding_mask.shape)}")
        if source_padding_mask.all(dim=-1).any():
            empty = source_padding_mask.all(dim=-1).nonzero().flatten().tolist()
            raise ValueError(f"source_padding_mask hides every token of source sequence(s) {empty}: "
                             "there is nothing left to attend to (True means padding)")

    def forward(self, x: torch.Tensor, source: torch.Tensor, source_padding_mask: torch.Tensor | None = None,
                return_weights: bool = False):
        self._check(x, source, source_padding_mask)
        batch_size, num_queries, _ = x.shape
        queries = self._split_heads(self.W_query(x))     # (B, T_q, d_in) -> (B, H, T_q, D)
        keys = self._split_heads(self.W_key(source))     # (B, T_k, d_source) -> (B, H, T_k, D)
        values = self._split_heads(self.W_value(source))  # (B, T_k, d_source) -> (B, H, T_k, D)
        mask = None
        if source_padding_mask is not None:
            mask = source_padding_mask[:, None, None, :]  # (B, T_k) -> (B, 1, 1, T_k): hide keys, for every query
        context_vecs, attn_weights = scaled_dot_product_attention(
            queries, keys, values, mask=mask, dropout_p=self.dropout.p, training=self.training
        )  # (B, H, T_q, D), (B, H, T_q, T_k)
        context_vecs = context_vecs.transpose(1, 2).contiguous()  # (B, H, T_q, D) -> (B, T_q, H, D)
        context_vecs = context_vecs.view(batch_size, num_queries, self.d_out)  # -> (B, T_q, d_out)
        outputs = self.out_proj(context_vecs)  # Z W_o + b_o: (B, T_q, d_out)
        return (outputs, attn_weights) if return_weights else outputs

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}, d_source={self.d_source}"
