"""Where tokens are: learned position embeddings, sinusoidal encodings and rotary position embedding (RoPE).

Notation (the course's card): ``P`` ``(T, d_in)`` holds one position vector per position, ``P_i`` its row ``i``;
``omega_r = base ** (-2 r / d)`` is the angular frequency of dimension pair ``r`` (counting from 0) of a width
``d`` (``d_in`` for sinusoidal encodings, ``head_dim`` for RoPE); ``R_i`` is the RoPE rotation of position ``i``,
which turns pair ``r`` by the angle ``i * omega_r``.

Pairs. This module pairs *adjacent* dimensions, ``(0, 1), (2, 3), ...``, as Su et al. (2021) write RoPE. Code in
the GPT-NeoX family pairs dimension ``r`` with ``r + head_dim / 2`` ("rotate half"): ``apply_rope(...,
pairs="halves")``. The two are the same rotation up to a fixed permutation of the dimensions.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn

from ._checks import check_float_tensor, check_positive_int

__all__ = ["angular_frequencies", "sinusoidal_positions", "LearnedPositions", "rope_angles", "apply_rope",
           "halves_to_adjacent"]

PAIRINGS = ("adjacent", "halves")


def _check_base(base) -> None:
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not base > 1:
        raise ValueError(f"base must be a number above 1 (10000 in the papers), got {base!r}")


def _check_even(name: str, value: int, what: str) -> None:
    check_positive_int(name, value)
    if value % 2:
        raise ValueError(f"{name} must be even: {what} works on pairs of dimensions, got {name}={value}")


def angular_frequencies(dim: int, base: float = 10000.0) -> torch.Tensor:
    """``omega_r = base ** (-2 r / dim)`` for the ``dim / 2`` dimension pairs ``r = 0, 1, ...``: shape ``(dim / 2,)``.

    Pair 0 turns by 1 radian per position; the last pair turns slowest, almost ``1 / base``.
    """
    _check_even("dim", dim, "a position encoding")
    _check_base(base)
    r = torch.arange(dim // 2, dtype=torch.float64)
    return (base ** (-2 * r / dim)).float()  # (dim / 2,)


def _check_positions(positions, name: str = "positions") -> torch.Tensor:
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of position indices, got {type(positions).__name__}")
    if positions.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise TypeError(f"{name} must hold integer positions (e.g. torch.arange(num_tokens)), got {positions.dtype}")
    if positions.dim() != 1:
        raise ValueError(f"{name} must have shape (num_tokens,), got {tuple(positions.shape)}")
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"{name} must be 0 or more, got {int(positions.min())}")
    return positions


def sinusoidal_positions(num_tokens: int, d_in: int, base: float = 10000.0) -> torch.Tensor:
    """The fixed encodings of Vaswani et al. (2017): ``P`` of shape ``(T, d_in)``.

    ``P[i, 2r] = sin(i * omega_r)`` and ``P[i, 2r + 1] = cos(i * omega_r)``: each pair of columns is a point
    going round a circle at its own speed ``omega_r``. Defined for every ``num_tokens``: nothing is learned.
    """
    check_positive_int("num_tokens", num_tokens)
    omega = angular_frequencies(d_in, base)                                      # (d_in / 2,)
    angles = torch.arange(num_tokens, dtype=torch.float32)[:, None] * omega      # (T, 1) * (d_in / 2,) -> (T, d_in / 2)
    # Interleave: column 2r holds sin, column 2r + 1 holds cos of the same angle.
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)       # (T, d_in / 2, 2) -> (T, d_in)


class LearnedPositions(nn.Module):
    """A table of learned position vectors, one row per position, as in GPT-2 (``wpe``): ``(num_positions, d_in)``.

    ``forward(num_tokens)`` returns the first ``num_tokens`` rows, ``(T, d_in)``, to add to the token embeddings.
    The table knows only the positions it was built for: asking for more raises a ``ValueError``. Rows start
    small (normal, standard deviation ``init_std``) and are trained with the rest of the model.
    """

    def __init__(self, num_positions: int, d_in: int, init_std: float = 0.1):
        super().__init__()
        check_positive_int("num_positions", num_positions)
        check_positive_int("d_in", d_in)
        self.num_positions, self.d_in = num_positions, d_in
        self.weight = nn.Parameter(torch.randn(num_positions, d_in) * init_std)

    def forward(self, num_tokens: int) -> torch.Tensor:
        check_positive_int("num_tokens", num_tokens)
        if num_tokens > self.num_positions:
            raise ValueError(f"num_tokens={num_tokens} is beyond the table's length: it holds vectors for positions "
                             f"0 to {self.num_positions - 1} only, and a learned table has nothing for the others")
        return self.weight[:num_tokens]  # (T, d_in)

    def extra_repr(self) -> str:
        return f"num_positions={self.num_positions}, d_in={self.d_in}"


def rope_angles(positions: torch.Tensor, head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """The RoPE angles ``i * omega_r``: ``positions`` ``(T,)`` ints -> ``(T, head_dim / 2)`` floats."""
    positions = _check_positions(positions)
    omega = angular_frequencies(head_dim, base)                     # (D / 2,)
    return positions.to(torch.float32)[:, None] * omega             # (T, 1) * (D / 2,) -> (T, D / 2)


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0,
               pairs: str = "adjacent") -> torch.Tensor:
    """Rotate every pair of dimensions of ``x`` by its position's angle: ``R_i x_i``, shape unchanged.

    Args:
        x: queries or keys, ``(..., T, head_dim)`` (e.g. ``(B, H, T, D)``), ``head_dim`` even. Never the values.
        positions: ``(T,)`` integer position of each row; default ``0, 1, ..., T - 1``.
        base: sets the frequencies ``omega_r = base ** (-2 r / head_dim)``.
        pairs: ``"adjacent"`` rotates dimensions ``(2r, 2r + 1)`` (Su et al. 2021); ``"halves"`` rotates
            ``(r, r + head_dim / 2)`` (the "rotate half" layout of GPT-NeoX-style code).

    Pair ``(a, b)`` turned by the angle ``gamma`` becomes ``(a cos gamma - b sin gamma, a sin gamma + b cos gamma)``.
    """
    check_float_tensor("x", x)
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., num_tokens, head_dim), got shape {tuple(x.shape)}")
    num_tokens, head_dim = x.shape[-2], x.shape[-1]
    _check_even("head_dim", head_dim, "RoPE")
    if pairs not in PAIRINGS:
        raise ValueError(f"pairs must be one of {PAIRINGS}, got {pairs!r}")
    if positions is None:
        positions = torch.arange(num_tokens)
    elif _check_positions(positions).shape[0] != num_tokens:
        raise ValueError(f"positions must have one entry per token, shape ({num_tokens},), "
                         f"got {tuple(positions.shape)}")
    angles = rope_angles(positions, head_dim, base).to(x.device)                # (T, D / 2): i * omega_r
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)               # (T, D / 2) each
    if pairs == "halves":                                                       # pair r: dimensions r, r + D / 2
        a, b = x[..., : head_dim // 2], x[..., head_dim // 2:]
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)        # (..., T, D)
    a, b = x[..., 0::2], x[..., 1::2]                                           # (..., T, D / 2) each
    turned_a, turned_b = a * cos - b * sin, a * sin + b * cos                   # a 2-D rotation per pair
    return torch.stack((turned_a, turned_b), dim=-1).flatten(-2)               # (..., T, D / 2, 2) -> (..., T, D)


def halves_to_adjacent(head_dim: int) -> torch.Tensor:
    """The permutation that reorders a "halves" vector into "adjacent" order: ``(head_dim,)`` long.

    ``x_adjacent = x_halves[..., perm]`` puts dimension ``r`` next to ``r + head_dim / 2``, so that
    ``apply_rope(x_halves, pairs="halves")[..., perm] == apply_rope(x_halves[..., perm], pairs="adjacent")``.
    """
    _check_even("head_dim", head_dim, "RoPE")
    half = head_dim // 2
    return torch.stack((torch.arange(half), torch.arange(half) + half), dim=-1).flatten()  # 0, h, 1, h+1, ...
