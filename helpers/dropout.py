"""Dropout on attention weights, written out so that every draw can be inspected and repeated.

``torch.nn.functional.dropout`` hides its random mask. :func:`attention_dropout`
returns the mask as well, and takes an explicit ``torch.Generator`` so that a
seed (e.g. from a slider) picks one draw without touching PyTorch's global
random state. On the CPU, with the generator in the same state, it drops exactly
the weights ``torch.nn.functional.dropout`` drops.

Which weights a given seed drops depends on the random-number generator behind
it: the GPU's differs from the CPU's, and PyTorch does not promise the same
numbers across releases or platforms (older releases drew ``bernoulli_(p)`` with
Intel MKL's own generator on Intel processors; pytorch/pytorch issues #121595 and
#132395). Print properties of a draw, never the draw itself.
:func:`dropout_row_sums` compares uniform numbers from the generator with ``p``,
which needs no ``bernoulli_`` at all.
"""

from __future__ import annotations

import torch

from ._checks import check_float_tensor, check_positive_int, check_probability

__all__ = ["attention_dropout", "dropout_row_sums", "nearest_attainable_sum", "row_sum_std"]


def _check_generator(generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def attention_dropout(
    attn_weights: torch.Tensor, p: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero each weight with probability ``p`` and scale the survivors by ``1 / (1 - p)``.

    ``dropped[..., i, j] = attn_weights[..., i, j] * keep[..., i, j] / (1 - p)`` with
    ``keep ~ Bernoulli(1 - p)`` drawn independently for every entry, so that
    ``E[dropped] = attn_weights`` and each row still sums to 1 *on average*.

    Args:
        attn_weights: ``(..., T_q, T_k)`` (any shape works).
        p: drop probability in ``[0, 1)``.
        generator: the random stream to draw from; ``None`` uses PyTorch's default
            CPU generator (the one ``torch.manual_seed`` seeds). The mask is drawn on
            the generator's device and then moved to ``attn_weights``' device, so a
            CPU generator gives the same mask whatever device the weights live on.

    Returns:
        ``(dropped, keep)``: the dropped-out weights (same shape and dtype as
        ``attn_weights``) and the bool mask of survivors (same shape).
    """
    check_float_tensor("attn_weights", attn_weights)
    check_probability("p", p)
    _check_generator(generator)
    draw_device = generator.device if generator is not None else torch.device("cpu")
    # Same steps as torch.nn.functional.dropout on the CPU: a 0/1 mask, divided by 1 - p, then multiplied in.
    scale = torch.empty(attn_weights.shape, dtype=attn_weights.dtype, device=draw_device)
    scale.bernoulli_(1.0 - p, generator=generator)  # the keep-mask, same shape as attn_weights: 1 keeps, 0 drops
    scale = scale.to(attn_weights.device)
    keep = scale.bool()
    scale.div_(1.0 - p)  # keep / (1 - p): survivors' factor, dropped stay 0
    return attn_weights * scale, keep


def dropout_row_sums(
    attn_weights: torch.Tensor, p: float, num_draws: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Row sums of ``num_draws`` independent dropout draws of the same weights (a Monte-Carlo sample).

    Shapes: ``attn_weights`` ``(..., T_q, T_k)``; returns ``(num_draws, ..., T_q)``.
    Their mean over the first dimension tends to the original row sums (1 for softmax rows). The masks come
    from uniform numbers (``torch.rand``) drawn on the generator's device.
    """
    check_float_tensor("attn_weights", attn_weights)
    check_positive_int("num_draws", num_draws)
    if attn_weights.dim() < 2:
        raise ValueError(f"attn_weights must have shape (..., T_q, T_k), got {tuple(attn_weights.shape)}")
    check_probability("p", p)
    _check_generator(generator)
    copies = attn_weights.expand(num_draws, *attn_weights.shape)  # (N, ..., T_q, T_k), no copy
    # One uniform number per weight, kept if >= p (probability 1 - p): torch.rand on a CPU generator, whatever
    # path bernoulli_ takes on this machine or release.
    draw_device = generator.device if generator is not None else torch.device("cpu")
    uniform = torch.rand(copies.shape, generator=generator, device=draw_device).to(attn_weights.device)
    dropped = copies * ((uniform >= p) / (1.0 - p))  # same recipe as attention_dropout: A * (keep / (1 - p))
    return dropped.sum(dim=-1)  # (N, ..., T_q, T_k) -> (N, ..., T_q)


def row_sum_std(attn_weights: torch.Tensor, p: float) -> torch.Tensor:
    """Standard deviation of a row sum after dropout: ``sqrt(p / (1 - p) * sum_j a_ij**2)``.

    Each entry is ``a_ij / (1 - p)`` with probability ``1 - p`` and 0 otherwise, so its
    variance is ``a_ij**2 * p / (1 - p)``; the entries of a row are independent, so the
    variances add up.

    Shapes: ``attn_weights`` ``(..., T_q, T_k)``; returns ``(..., T_q)``.
    """
    check_float_tensor("attn_weights", attn_weights)
    check_probability("p", p)
    if attn_weights.dim() < 2:
        raise ValueError(f"attn_weights must have shape (..., T_q, T_k), got {tuple(attn_weights.shape)}")
    return torch.sqrt(p / (1.0 - p) * attn_weights.pow(2).sum(dim=-1))  # (..., T_q, T_k) -> (..., T_q)



def nearest_attainable_sum(attn_weights: torch.Tensor, p: float, target: float = 1.0) -> torch.Tensor:
    """Of all sums one dropout draw can give a row, the one nearest ``target`` (ties: the smaller).

    A draw keeps some subset of a row's non-zero weights and multiplies them by ``1 / (1 - p)``; this tries
    every subset (``2**n`` for ``n`` non-zero weights, at most 20 a row), in float64.
    Shapes: ``attn_weights`` ``(..., T_q, T_k)``; returns ``(..., T_q)``, float64.
    """
    check_float_tensor("attn_weights", attn_weights)
    if attn_weights.dim() < 2:
        raise ValueError(f"attn_weights must have shape (..., T_q, T_k), got {tuple(attn_weights.shape)}")
    check_probability("p", p)
    rows = attn_weights.detach().cpu().double().reshape(-1, attn_weights.shape[-1])
    nearest = []
    for row in rows:
        weights = row[row != 0]
        if len(weights) > 20:
            raise ValueError(f"a row may hold at most 20 non-zero weights here, got {len(weights)}")
        subsets = (torch.arange(2 ** len(weights)).unsqueeze(1) >> torch.arange(len(weights))) & 1  # (2^n, n)
        sums = torch.unique(subsets.double() @ weights / (1.0 - p))  # sorted, so the first minimum is the smaller
        nearest.append(sums[(sums - target).abs().argmin()])
    return torch.stack(nearest).reshape(attn_weights.shape[:-1])
