"""Inputs the checkers draw: seeded random tensors and the course's worked examples."""

from __future__ import annotations

import torch

from ..data import your_journey

__all__ = ["randn", "journey_inputs"]


def randn(generator: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    """A float32 tensor of standard-normal numbers (times ``scale``) from ``generator``."""
    return torch.randn(*shape, generator=generator) * scale


def journey_inputs() -> torch.Tensor:
    """The ``(6, 3)`` embeddings of "Your journey starts with one step"."""
    return your_journey()[1]
