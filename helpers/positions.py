"""Where tokens are: learned position embeddings, sinusoidal encodings and rotary position embedding (RoPE)."""

from __future__ import annotations

__all__: list[str] = []
