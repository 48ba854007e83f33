"""Masks: which scores a query may not see.

Every mask here is a bool tensor where ``True`` means *hide* (the score becomes
``-inf`` before the softmax), the convention of
:func:`helpers.attention.scaled_dot_product_attention`. PyTorch's
``torch.nn.functional.scaled_dot_product_attention`` uses the opposite one
(``True`` = keep): pass it ``~mask``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._checks import check_float_tensor, check_positive_int

__all__ = ["causal_mask", "is_causal_mask", "mask_by_renormalising", "padding_mask", "sliding_window_mask"]


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


def padding_mask(lengths, num_tokens: int | None = None, padding_side: str = "right") -> torch.Tensor:
    """Bool mask of shape ``(B, T)`` that is ``True`` at the padding positions of each sequence.

    Args:
        lengths: the number of real tokens of each of the ``B`` sequences (1-d int
            tensor or list of ints, each in ``0..T``).
        num_tokens: the padded length ``T``; defaults to ``max(lengths)``.
        padding_side: ``"right"`` when the padding follows the real tokens
            (``[Your, journey, <pad>]``), ``"left"`` when it comes first
            (``[<pad>, Your, journey]``).

    Returns:
        ``(B, T)`` bool, ``True`` = a padding token. To hide padded *keys* from every
        query, index it as ``mask[:, None, :]`` (shape ``(B, 1, T)``, broadcast over the
        queries) and combine with a causal mask by ``|``.
    """
    if isinstance(lengths, torch.Tensor):
        if lengths.dtype in (torch.bool,) or lengths.is_floating_point() or lengths.is_complex():
            raise TypeError(f"lengths must hold integers, got {lengths.dtype}")
        lengths = lengths.detach().to("cpu", torch.long)
    else:
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in lengths):
            raise TypeError(f"lengths must be a 1-d int tensor or a list of ints, got {lengths!r}")
        lengths = torch.tensor(list(lengths), dtype=torch.long)
    if lengths.dim() != 1 or len(lengths) == 0:
        raise ValueError(f"lengths must be 1-d with one entry per sequence, got shape {tuple(lengths.shape)}")
    if (lengths < 0).any():
        raise ValueError(f"lengths must not be negative, got {lengths.tolist()}")
    if num_tokens is None:
        num_tokens = int(lengths.max())
    check_positive_int("num_tokens", num_tokens)
    if (lengths > num_tokens).any():
        raise ValueError(f"lengths must be at most num_tokens={num_tokens}, got {lengths.tolist()}")
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
    positions = torch.arange(num_tokens)  # (T,)
    if padding_side == "right":
        return positions[None, :] >= lengths[:, None]  # (1, T) >= (B, 1) -> (B, T)
    return positions[None, :] < (num_tokens - lengths)[:, None]  # (1, T) < (B, 1) -> (B, T)


def sliding_window_mask(num_tokens: int, window_size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Bool mask of shape ``(T, T)``: query ``i`` may see keys ``j`` with ``i - window_size < j <= i``.

    ``True`` marks the scores to hide. Each query sees itself and the ``window_size - 1`` tokens before
    it: ``window_size=1`` leaves only the diagonal, ``window_size >= T`` gives :func:`causal_mask`.
    """
    check_positive_int("num_tokens", num_tokens)
    check_positive_int("window_size", window_size)
    ones = torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=device)
    too_old = torch.tril(ones, diagonal=-window_size)  # (T, T): True where j <= i - window_size
    return torch.triu(ones, diagonal=1) | too_old  # the future, or too far in the past


def is_causal_mask(num_queries: int, num_keys: int) -> torch.Tensor:
    """Bool mask of shape ``(T_q, T_k)``, measured: the scores PyTorch's
    ``F.scaled_dot_product_attention(..., is_causal=True)`` hides (True = hide, as every mask here).

    Every score is equal (zero queries and keys) and value ``j`` is the one-hot vector ``e_j``, so a query's
    output is nonzero exactly at the keys it sees.
    """
    check_positive_int("num_queries", num_queries)
    check_positive_int("num_keys", num_keys)
    values = torch.eye(num_keys).view(1, 1, num_keys, num_keys)  # v_j = e_j
    context = F.scaled_dot_product_attention(torch.zeros(1, 1, num_queries, 8), torch.zeros(1, 1, num_keys, 8),
                                             values, is_causal=True)  # (1, 1, T_q, T_k)
    return context[0, 0] == 0  # no weight on key j: hidden
