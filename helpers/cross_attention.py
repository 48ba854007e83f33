"""Cross-attention: queries from one sequence, keys and values from another."""

from __future__ import annotations

__all__: list[str] = []
