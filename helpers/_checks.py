"""Argument checks shared by the attention functions and modules.

Every check raises a ``TypeError`` or ``ValueError`` whose message names the
argument and says what was expected, so a learner never has to decode a deep
PyTorch shape error.
"""

from __future__ import annotations

import numbers

import torch

__all__ = [
    "check_float_tensor",
    "check_ndim",
    "check_last_dim",
    "check_positive_int",
    "check_probability",
]


def check_float_tensor(name: str, value) -> None:
    """Raise unless ``value`` is a floating-point ``torch.Tensor``."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(
            f"{name} must hold floating-point numbers (e.g. torch.float32), got {value.dtype}; "
            f"token ids must go through an nn.Embedding first, or call {name}.float()"
        )


def check_ndim(name: str, value: torch.Tensor, allowed: tuple[int, ...], shape_hint: str) -> None:
    """Raise unless ``value`` has one of the ``allowed`` numbers of dimensions."""
    if value.dim() not in allowed:
        raise ValueError(
            f"{name} must have shape {shape_hint} ({' or '.join(map(str, allowed))} dims), "
            f"got shape {tuple(value.shape)} ({value.dim()} dims)"
        )


def check_last_dim(name: str, value: torch.Tensor, expected: int, what: str) -> None:
    """Raise unless the last dimension of ``value`` equals ``expected``."""
    if value.shape[-1] != expected:
        raise ValueError(
            f"{name} must have last dimension {what}={expected}, got shape {tuple(value.shape)}"
        )


def check_positive_int(name: str, value) -> None:
    """Raise unless ``value`` is an ``int`` of at least 1 (``bool`` is refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")


def check_probability(name: str, value) -> None:
    """Raise unless ``value`` is a number in [0, 1) (a dropout rate)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
