"""Causal masks: which scores a token may not see (the tokens after it)."""

from __future__ import annotations

import torch

from ._checks import check_float_tensor, check_positive_int

__all__ = ["causal_mask", "mask_by_renormalising"]


def causal_mask(num_tokens: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Bool mask of shape ``(T, T)`` that is ``True`` strictly above the diagonal.

    ``True`` marks the scores to hide: query ``i`` may look at keys ``0..i`` only.
    """
    check_positive_int("num_tokens", num_tokens)
    ones = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=1)  # (T, T)


def mask_by_renormalising(attn_weights: torch.Tensor) -> torch.Tensor:
    """The long way round: zero the weights above the diagonal, then rescale each row to sum to 1.

    Shapes: ``attn_weights`` ``(..., T, T)`` (rows already softmax-normalised);
    returns the same shape. Equals masking the scores with ``-inf`` *before* the
    softmax, because softmax's denominator cancels when a row is renormalised.
    """
    check_float_tensor("attn_weights", attn_weights)
    if attn_weights.dim() < 2 or attn_weights.shape[-1] != attn_weights.shape[-2]:
        raise ValueError(
            f"attn_weights must have shape (..., num_tokens, num_tokens), got {tuple(attn_weights.shape)}"
        )
    keep = ~causal_mask(attn_weights.shape[-1], device=attn_weights.device)
    masked = attn_weights * keep  # (..., T, T), zeros above the diagonal
    return masked / masked.sum(dim=-1, keepdim=True)
