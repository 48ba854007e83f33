"""Attention at generation time: the KV cache, grouped-query attention and sliding windows."""

from __future__ import annotations

__all__: list[str] = []
