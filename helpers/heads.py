"""Multi-head bookkeeping: wrapper <-> split-head weights, and what a layer costs.

Two ways to build ``num_heads`` causal heads:

* :class:`~helpers.modules.MultiHeadAttentionWrapper`: independent heads, each
  projecting all ``d_in`` features to its own ``d_out`` (per head), outputs
  concatenated, no output projection.
* :class:`~helpers.modules.MultiHeadAttention`: one projection per Q/K/V of width
  ``d_out`` (total), cut into ``num_heads`` slices of ``head_dim``, then ``out_proj``.

:func:`wrapper_to_multihead` copies a wrapper's weights into a split-head module
that computes the same function. :func:`layer_cost`, :func:`split_heads_cost` and
:func:`full_width_heads_cost` count parameters and matmul FLOPs, so the notebook
can compare designs with numbers.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from ._checks import check_positive_int
from .modules import MultiHeadAttention, MultiHeadAttentionWrapper

__all__ = ["AttentionCost", "wrapper_to_multihead", "layer_cost", "split_heads_cost", "full_width_heads_cost"]


class AttentionCost(NamedTuple):
    """What one multi-head attention layer costs, for one sequence of ``num_tokens`` tokens.

    ``flops`` counts the matrix products only, 2 per multiply-add (as
    ``torch.utils.flop_counter.FlopCounterMode`` does): the Q/K/V projections, the
    scores ``Q K^T``, the mixing ``A V`` and the output projection. Softmax, scaling,
    masking and bias additions are left out (they are a few per score, not per
    feature). The full ``T x T`` score matrix is counted, as the explicit formula
    computes it even where the causal mask then hides it.
    ``attn_weights`` is the number of entries of the ``(H, T, T)`` weights tensor.
    """

    num_heads: int
    head_dim: int
    parameters: int
    flops: int
    attn_weights: int


def layer_cost(d_in: int, num_heads: int, head_dim: int, num_tokens: int, d_out: int | None = None,
               qkv_bias: bool = False) -> AttentionCost:
    """Cost of ``num_heads`` heads of width ``head_dim`` reading ``d_in`` features.

    Layout: Q, K and V each ``nn.Linear(d_in, num_heads * head_dim, bias=qkv_bias)``,
    then ``out_proj = nn.Linear(num_heads * head_dim, d_out)`` with a bias
    (``d_out`` defaults to ``num_heads * head_dim``, as in :class:`MultiHeadAttention`).
    """
    for name, value in (("d_in", d_in), ("num_heads", num_heads), ("head_dim", head_dim),
                        ("num_tokens", num_tokens)):
        check_positive_int(name, value)
    inner = num_heads * head_dim  # width of Q, K, V once all heads are side by side
    d_out = inner if d_out is None else d_out
    check_positive_int("d_out", d_out)
    if not isinstance(qkv_bias, bool):
        raise TypeError(f"qkv_bias must be a bool, got {type(qkv_bias).__name__}")
    parameters = 3 * (d_in * inner + (inner if qkv_bias else 0)) + inner * d_out + d_out
    projections = 3 * 2 * num_tokens * d_in * inner           # (T, d_in) @ (d_in, H*D), three times
    scores = num_heads * 2 * num_tokens * num_tokens * head_dim  # H x (T, D) @ (D, T)
    mixing = num_heads * 2 * num_tokens * num_tokens * head_dim  # H x (T, T) @ (T, D)
    out_projection = 2 * num_tokens * inner * d_out            # (T, H*D) @ (H*D, d_out)
    return AttentionCost(num_heads=num_heads, head_dim=head_dim, parameters=parameters,
                         flops=projections + scores + mixing + out_projection,
                         attn_weights=num_heads * num_tokens * num_tokens)


def split_heads_cost(d_model: int, num_heads: int, num_tokens: int, qkv_bias: bool = False) -> AttentionCost:
    """Heads that share the ``d_model`` features: ``head_dim = d_model // num_heads`` (the usual design).

    GPT-2 small (``d_model=768, num_heads=12``) has biases on its query/key/value projection: pass
    ``qkv_bias=True`` for its 2,362,368 parameters; the default ``qkv_bias=False`` gives the 2,360,064 of the
    chapter-3 layer of Raschka (2024).
    """
    check_positive_int("d_model", d_model)
    check_positive_int("num_heads", num_heads)
    if d_model % num_heads != 0:
        raise ValueError(f"d_model must be divisible by num_heads, got d_model={d_model}, num_heads={num_heads}")
    return layer_cost(d_model, num_heads, d_model // num_heads, num_tokens, d_out=d_model, qkv_bias=qkv_bias)


def full_width_heads_cost(d_model: int, num_heads: int, num_tokens: int, qkv_bias: bool = False) -> AttentionCost:
    """Heads that each get all ``d_model`` features (``head_dim = d_model``), projected back to ``d_model``.

    That is a :class:`MultiHeadAttentionWrapper` with ``d_out = d_model`` per head,
    followed by ``nn.Linear(num_heads * d_model, d_model)``.
    """
    check_positive_int("d_model", d_model)
    return layer_cost(d_model, num_heads, d_model, num_tokens, d_out=d_model, qkv_bias=qkv_bias)


def wrapper_to_multihead(wrapper: MultiHeadAttentionWrapper, out_proj: nn.Linear | None = None) -> MultiHeadAttention:
    """A :class:`MultiHeadAttention` that computes the same function as ``wrapper``.

    Head ``h`` of the wrapper becomes rows ``h*head_dim : (h+1)*head_dim`` of the
    split module's ``W_query``, ``W_key`` and ``W_value`` weights (``nn.Linear``
    stores ``(out_features, in_features)``), so that ``view(B, T, H, head_dim)``
    hands each head exactly its own features back.

    The wrapper has no output projection. With ``out_proj=None`` the split module's
    ``out_proj`` becomes the identity (weight ``I``, bias ``0``) and the two outputs
    are equal; pass an ``nn.Linear(H*d_out, H*d_out)`` to get ``out_proj(wrapper(x))``
    instead. The new module is in the wrapper's train/eval mode.

    Shapes: wrapper with ``H`` heads of ``d_out`` features -> module with
    ``d_out_total = H * d_out`` and ``head_dim = d_out``.
    """
    if not isinstance(wrapper, MultiHeadAttentionWrapper):
        raise TypeError(f"wrapper must be a MultiHeadAttentionWrapper, got {type(wrapper).__name__}")
    first = wrapper.heads[0]
    num_heads, head_dim = len(wrapper.heads), first.d_out
    d_total = num_heads * head_dim
    qkv_bias = first.W_query.bias is not None
    if out_proj is not None:
        if not isinstance(out_proj, nn.Linear) or tuple(out_proj.weight.shape) != (d_total, d_total) \
                or out_proj.bias is None:
            raise ValueError(f"out_proj must be an nn.Linear({d_total}, {d_total}) with a bias")
    split = MultiHeadAttention(first.d_in, d_total, first.context_length, first.dropout.p, num_heads,
                               qkv_bias=qkv_bias)
    split = split.to(device=first.W_query.weight.device, dtype=first.W_query.weight.dtype)
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            layers = [getattr(head, name) for head in wrapper.heads]
            # H x (D, d_in) -> (H*D, d_in): head h owns rows h*D .. (h+1)*D - 1
            getattr(split, name).weight.copy_(torch.cat([layer.weight for layer in layers], dim=0))
            if qkv_bias:
                getattr(split, name).bias.copy_(torch.cat([layer.bias for layer in layers], dim=0))
        if out_proj is None:
            split.out_proj.weight.copy_(torch.eye(d_total))
            split.out_proj.bias.zero_()
        else:
            split.out_proj.weight.copy_(out_proj.weight)
            split.out_proj.bias.copy_(out_proj.bias)
    return split.train(wrapper.training)
