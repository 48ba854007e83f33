"""The live pictures of notebook 10: cross-attention."""

from __future__ import annotations

__all__: list[str] = []
