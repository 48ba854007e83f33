"""The live pictures of notebook 09: positions."""

from __future__ import annotations

__all__: list[str] = []
