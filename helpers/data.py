"""The worked examples of the course: small sentences with hand-picked 3-d embeddings.

"Hello shiny sun!" is a small made-up example (three tokens, numbers small enough to multiply by hand).
"Your journey starts with one step" and its embeddings are the worked example of Sebastian Raschka,
*Build a Large Language Model (From Scratch)*, Manning, 2024, chapter 3 (code: github.com/rasbt/LLMs-from-scratch),
so a learner can set the lessons' numbers beside the book's. Each function returns fresh tensors (safe to modify).
"""

from __future__ import annotations

import torch

__all__ = ["HELLO_SHINY_SUN", "YOUR_JOURNEY", "hello_shiny_sun", "your_journey"]

#: "Hello shiny sun!": three tokens with made-up 3-d embeddings.
HELLO_SHINY_SUN = {
    "Hello": (0.34, 0.22, 0.54),
    "shiny": (0.53, 0.34, 0.98),
    "sun!": (0.29, 0.54, 0.93),
}

#: "Your journey starts with one step": six tokens with the 3-d embeddings of Raschka (2024), chapter 3.
YOUR_JOURNEY = {
    "Your": (0.43, 0.15, 0.89),
    "journey": (0.55, 0.87, 0.66),
    "starts": (0.57, 0.85, 0.64),
    "with": (0.22, 0.58, 0.33),
    "one": (0.77, 0.25, 0.10),
    "step": (0.05, 0.80, 0.55),
}


def _as_tensor(table: dict[str, tuple[float, ...]]) -> tuple[list[str], torch.Tensor]:
    return list(table), torch.tensor(list(table.values()), dtype=torch.float32)


def hello_shiny_sun() -> tuple[list[str], torch.Tensor]:
    """Return ``(tokens, embeddings)``: 3 token strings and a ``(3, 3)`` float32 tensor."""
    return _as_tensor(HELLO_SHINY_SUN)


def your_journey() -> tuple[list[str], torch.Tensor]:
    """Return ``(tokens, embeddings)``: 6 token strings and a ``(6, 3)`` float32 tensor."""
    return _as_tensor(YOUR_JOURNEY)
