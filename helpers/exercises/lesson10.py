"""Exercises for notebook 10: cross-attention."""

from __future__ import annotations

__all__: list[str] = []
