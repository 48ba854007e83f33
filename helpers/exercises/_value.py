"""Self-check exercises: check an answer, ask for a hint, reveal the solution on request.

The expected answer is computed by a function (from the canonical helpers), never
typed in as numbers, so an exercise cannot drift from the course's maths.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["Exercise", "CheckResult"]


class CheckResult:
    """Outcome of :meth:`Exercise.check`: truthy when correct, with a message for the learner."""

    def __init__(self, passed: bool, message: str):
        self.passed, self.message = passed, message

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return self.message


class Exercise:
    """One exercise.

    Args:
        title: short name shown in every message.
        expected: zero-argument function returning the correct tensor.
        hint: a nudge, shown by :meth:`hint`.
        solution: a line of code that solves it, shown by :meth:`solution`.
        atol, rtol: tolerances of the comparison.
    """

    def __init__(self, title: str, expected: Callable[[], torch.Tensor], hint: str, solution: str,
                 atol: float = 1e-4, rtol: float = 1e-4):
        if not callable(expected):
            raise TypeError("expected must be a function returning the correct tensor")
        self.title, self.expected, self._hint, self._solution = title, expected, hint, solution
        self.atol, self.rtol = atol, rtol

    def check(self, answer) -> CheckResult:
        """Compare ``answer`` with the expected tensor; say what is wrong if it is not right."""
        if answer is None:
            return CheckResult(False, f"[{self.title}] not attempted yet: replace None with your answer.")
        if not isinstance(answer, torch.Tensor):
            return CheckResult(False, f"[{self.title}] expected a torch.Tensor, got {type(answer).__name__}.")
        expected = self.expected()
        if answer.shape != expected.shape:
            return CheckResult(False, f"[{self.title}] shape {tuple(answer.shape)} is not the expected "
                                      f"{tuple(expected.shape)}.")
        answer = answer.detach().to(expected.device, expected.dtype)
        if not torch.allclose(answer, expected, atol=self.atol, rtol=self.rtol):
            worst = (answer - expected).abs().max().item()
            return CheckResult(False, f"[{self.title}] right shape, wrong values (largest difference "
                                      f"{worst:.3g}). Try .hint().")
        return CheckResult(True, f"[{self.title}] correct!")

    def hint(self) -> str:
        """A nudge towards the answer (printed, so it reads well in a notebook)."""
        print(f"Hint for {self.title}: {self._hint}")
        return self._hint

    def solution(self) -> str:
        """The answer, revealed only when asked for."""
        print(f"Solution for {self.title}:\n    {self._solution}")
        return self._solution
