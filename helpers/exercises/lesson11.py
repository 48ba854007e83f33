"""Exercises for notebook 11: generation: the KV cache, grouped-query attention, sliding windows."""

from __future__ import annotations

__all__: list[str] = []
