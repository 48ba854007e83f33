"""The attention maths as plain functions: scores, softmax, weights and context vectors.

Shapes use ``B`` (batch), ``T`` (tokens) and ``D`` (features); ``...`` means any
number of leading dimensions (none, a batch, or a batch and heads).
"""

from __future__ import annotations

import math

import torch

from ._checks import check_float_tensor, check_probability

__all__ = [
    "dot_product_scores",
    "softmax_naive",
    "softmax_stable",
    "scaled_dot_product_attention",
]


def _check_pair(queries: torch.Tensor, keys: torch.Tensor) -> None:
    check_float_tensor("queries", queries)
    check_float_tensor("keys", keys)
    if queries.dim() < 1 or keys.dim() < 1:
        raise ValueError("queries and keys must have at least one dimension (the features)")
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            "queries and keys must have the same last dimension (d_k), got "
            f"queries {tuple(queries.shape)} and keys {tuple(keys.shape)}"
        )


def dot_product_scores(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Unnormalised attention scores: the dot product of every query with every key.

    Shapes:
        queries: ``(..., T_q, D)``, or ``(D,)`` for a single query
        keys:    ``(..., T_k, D)``
        returns: ``(..., T_q, T_k)``, or ``(..., T_k)`` for a single query

    ``scores[..., i, j] = queries[..., i, :] . keys[..., j, :]``.
    """
    _check_pair(queries, keys)
    if keys.dim() < 2:
        raise ValueError(f"keys must have shape (..., num_tokens, d_k), got {tuple(keys.shape)}")
    if queries.dim() == 1:
        return keys @ queries  # (..., T, D) @ (D,) -> (..., T)
    return queries @ keys.transpose(-2, -1)  # (..., T_q, D) @ (..., D, T_k) -> (..., T_q, T_k)


def softmax_naive(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax straight from the formula ``exp(x_i) / sum_j exp(x_j)``.

    Kept for teaching: ``exp`` overflows to ``inf`` for scores above ~88 in
    float32, and ``inf / inf`` gives ``nan``. Use :func:`softmax_stable`.

    Shapes: ``scores`` any shape; returns the same shape, summing to 1 along ``dim``.
    """
    check_float_tensor("scores", scores)
    exps = torch.exp(scores)
    return exps / exps.sum(dim=dim, keepdim=True)


def softmax_stable(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax that cannot overflow: subtract each slice's maximum before ``exp``.

    ``exp(x_i - m) / sum_j exp(x_j - m)`` equals the naive formula for any ``m``
    (the factor ``exp(-m)`` cancels); with ``m = max(x)`` every exponent is <= 0,
    so every ``exp`` lies in (0, 1]. Masked scores of ``-inf`` become weights of 0.

    Shapes: ``scores`` any shape; returns the same shape, summing to 1 along ``dim``.
    """
    check_float_tensor("scores", scores)
    shifted = scores - scores.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    training: bool = True,
    fully_masked_rows: str = "raise",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(Q K^T / sqrt(d_k)) V``, returning the context vectors and the weights.

    Args:
        queries: ``(..., T_q, d_k)``
        keys:    ``(..., T_k, d_k)``
        values:  ``(..., T_k, d_v)``
        mask: optional bool tensor broadcastable to ``(..., T_q, T_k)``; ``True``
            marks a score to *hide* (set to ``-inf`` before the softmax). Note this is
            the opposite of ``torch.nn.functional.scaled_dot_product_attention``'s
            ``attn_mask``, where ``True`` means *keep*.
        dropout_p: probability of zeroing each attention weight (survivors are
            scaled by ``1 / (1 - dropout_p)``); only applied when ``training``.
        training: whether dropout is active (modules pass ``self.training``).
        fully_masked_rows: what to do when ``mask`` hides *every* key of some query,
            whose softmax would be ``0 / 0 = nan``. ``"raise"`` (the default) raises a
            ``ValueError``: such a mask is usually a mistake, e.g. a mask written with
            PyTorch's ``True`` = keep convention. ``"zero"`` is for padded batches, where
            such rows are expected (padded queries, or left padding under a causal
            mask): those rows get all-zero weights, hence all-zero context vectors and
            zero (not ``nan``) gradients, as ``torch.nn.functional.scaled_dot_product_attention``
            returns on the CPU.

    Returns:
        ``(context_vecs, attn_weights)`` of shapes ``(..., T_q, d_v)`` and
        ``(..., T_q, T_k)``. The weights returned are those after dropout, i.e. the
        ones that actually multiplied the values. Each row sums to 1 (before dropout),
        except the all-zero rows that ``fully_masked_rows="zero"`` produces.
    """
    _check_pair(queries, keys)
    check_float_tensor("values", values)
    check_probability("dropout_p", dropout_p)
    if queries.dim() < 2 or keys.dim() < 2 or values.dim() < 2:
        raise ValueError(
            "queries, keys and values must each have shape (..., num_tokens, features), got "
            f"{tuple(queries.shape)}, {tuple(keys.shape)}, {tuple(values.shape)}"
        )
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError(
            "keys and values must have the same number of tokens, got "
            f"keys {tuple(keys.shape)} and values {tuple(values.shape)}"
        )
    d_k = keys.shape[-1]
    if fully_masked_rows not in ("raise", "zero"):
        raise ValueError(f"fully_masked_rows must be 'raise' or 'zero', got {fully_masked_rows!r}")
    attn_scores = queries @ keys.transpose(-2, -1)  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
    any_hidden_row = False
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError("mask must be a bool torch.Tensor (True = hide that score)")
        try:
            torch.broadcast_shapes(mask.shape, attn_scores.shape)
        except RuntimeError:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
                f"{tuple(attn_scores.shape)} (..., num_queries, num_keys)"
            ) from None
        hidden_rows = mask.all(dim=-1, keepdim=True)  # (..., T_q, 1): True where a query may see no key
        any_hidden_row = bool(hidden_rows.any())
        if any_hidden_row:
            if fully_masked_rows == "raise":
                raise ValueError(
                    "mask hides every key for some query; that row of weights would be nan. "
                    "Check the convention (True = hide), or pass fully_masked_rows='zero' "
                    "for padded batches"
                )
            # Filling a whole row with -inf would make a nan (0 / 0) that the zeroing below hides
            # in the result but not in between (anomaly checks, the backward pass). So those rows
            # stay unmasked for the softmax and get their zero weights afterwards.
            mask = mask & ~hidden_rows
        attn_scores = attn_scores.masked_fill(mask, float("-inf"))
    # Scaling keeps the scores' variance near 1 whatever d_k is, so softmax does not saturate.
    attn_weights = torch.softmax(attn_scores / math.sqrt(d_k), dim=-1)  # (..., T_q, T_k), rows sum to 1
    if any_hidden_row:
        attn_weights = attn_weights.masked_fill(hidden_rows, 0.0)  # rows that may see nothing weigh nothing
    if training and dropout_p > 0.0:
        attn_weights = torch.nn.functional.dropout(attn_weights, p=dropout_p, training=True)
    context_vecs = attn_weights @ values  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return context_vecs, attn_weights
