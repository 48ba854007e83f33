"""Exercises for notebook 07: efficient attention (the online softmax behind flash attention)."""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ..efficient import iter_tile_steps, peak_tensor_bytes
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, Rule, SpotTheBug, forbids

__all__ = ["online_update", "one_query_tiled", "causal_tiles_computed", "value_width_scale"]


# --- 1. fold one tile of scores into the running max and sum ------------------------------------------
def _update_cases(g: torch.Generator) -> list[Case]:
    first = (torch.full((3,), float("-inf")), torch.zeros(3), randn(g, 3, 4))
    return [
        Case("the first tile (running max -inf, running sum 0), 3 rows x 4 keys", first),
        Case("a tile whose scores beat the running max", (torch.tensor([0.5, 1.0]), torch.tensor([2.0, 1.5]),
                                                          torch.tensor([[3.0, 0.0], [4.0, -1.0]]))),
        Case("a tile below the running max", (torch.tensor([5.0, 6.0]), torch.tensor([1.2, 2.0]),
                                              randn(g, 2, 3))),
        Case("a batch of 2 x 4 rows, tile of 8 keys", (randn(g, 2, 4), torch.rand(2, 4, generator=g) + 1.0,
                                                       randn(g, 2, 4, 8, scale=2.0))),
    ]


def _reference_update(running_max, running_sum, scores):
    new_max = torch.maximum(running_max, scores.amax(dim=-1))
    rebased = running_sum * torch.exp(running_max - new_max)
    return new_max, rebased + torch.exp(scores - new_max.unsqueeze(-1)).sum(dim=-1)


def _solution_online_update(running_max, running_sum, scores):
    new_max = torch.maximum(running_max, scores.max(dim=-1).values)        # (...,)
    correction = torch.exp(running_max - new_max)                            # old terms were exp(s - old max)
    new_sum = running_sum * correction + torch.exp(scores - new_max[..., None]).sum(dim=-1)
    return new_max, new_sum


online_update = FunctionExercise(
    "Online softmax update",
    "write online_update(running_max, running_sum, scores): fold a tile of `scores` (..., tile) into each row's "
    "running maximum m_i (`running_max`, shape (...)) and running sum ℓ_i = Σ_j exp(s_ij - m_i) over the keys seen "
    "so far (`running_sum`, shape (...)); return the pair (new_max, new_sum).",
    reference=_reference_update,
    cases=_update_cases,
    hint=["Start with the maximum: which numbers can it be, once this tile has been seen?",
          "Every term of the old running sum has the form exp(s - old max). What must each of them become so "
          "that it can be added to the tile's terms, and what single factor does that for all of them at once?"],
    solution=_solution_online_update,
    mistakes=[
        Mistake(lambda m, s, x: (torch.maximum(m, x.amax(-1)),
                                 s + torch.exp(x - torch.maximum(m, x.amax(-1))[..., None]).sum(-1)),
                "the new max is right, but the old running sum was added as it was. Its terms were measured "
                "against the old max, the tile's against the new one: they cannot be added until they share one."),
        Mistake(lambda m, s, x: (torch.maximum(m, x.amax(-1)), s * torch.exp(m - torch.maximum(m, x.amax(-1)))
                                 + torch.exp(x - m[..., None]).sum(-1)),
                "the tile's terms use the OLD max. Everything in the sum must be relative to the new max."),
        Mistake(lambda m, s, x: (x.amax(-1), s * torch.exp(m - x.amax(-1)) + torch.exp(x - x.amax(-1)[..., None]).sum(-1)),
                "your new max is the tile's max only; it must be the larger of the running max and the tile's max."),
    ],
)


# --- 2. one query, tile by tile --------------------------------------------------------------------------
class _OneTileAtATime(Rule):
    """Rule: on ``num_keys`` keys, the tensors the function creates never hold as many numbers as there are keys.

    Measured with :func:`helpers.efficient.peak_tensor_bytes` (the largest total of tensors alive at once); a
    tile-by-tile answer stays near a few tiles, whereas all T scores or weights of float32 take 4 * T bytes.
    """

    def __init__(self, num_keys: int, tile_size: int):
        self.num_keys, self.tile_size = num_keys, tile_size

    def before(self, function) -> str | None:
        g = torch.Generator().manual_seed(1)
        args = (randn(g, 8), randn(g, self.num_keys, 8), randn(g, self.num_keys, 4), self.tile_size)
        try:
            with torch.no_grad():
                _, peak = peak_tensor_bytes(function, *args)
        except Exception:  # errors are reported, with their inputs, by the value check
            return None
        limit = self.num_keys * 4  # one float32 number per key
        if peak >= limit:
            return (f"on {self.num_keys:,} keys in tiles of {self.tile_size}, the tensors your function creates "
                    f"reach {peak:,} bytes at once: as much as one float32 score or weight for every key "
                    f"({limit:,} bytes) or more. The task asks for one tile at a time: compute the scores of a tile "
                    f"inside the loop, fold them in, and let them go.")
        return None

    def __repr__(self) -> str:
        return f"one_tile_at_a_time(num_keys={self.num_keys})"


def _one_query_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("10 keys, d_k=4, d_v=3, tiles of 4 (the last tile is short)", (randn(g, 4), randn(g, 10, 4),
                                                                            randn(g, 10, 3), 4)),
        Case("8 keys with large scores, tiles of 2", (randn(g, 6, scale=4.0), randn(g, 8, 6, scale=4.0),
                                                      randn(g, 8, 2), 2)),
        Case("5 keys, one tile holding them all", (randn(g, 3), randn(g, 5, 3), randn(g, 5, 5), 8)),
    ]


def _solution_one_query_tiled(query, keys, values, tile_size):
    scale = 1 / math.sqrt(keys.shape[-1])
    running_max = torch.tensor(float("-inf"))
    running_sum = torch.tensor(0.0)
    accumulator = torch.zeros(values.shape[-1])
    for start in range(0, keys.shape[0], tile_size):
        scores = keys[start:start + tile_size] @ query * scale     # (tile,)
        new_max = torch.maximum(running_max, scores.max())
        correction = torch.exp(running_max - new_max)               # rebase what was summed so far
        weights = torch.exp(scores - new_max)                       # (tile,), unnormalised
        running_sum = running_sum * correction + weights.sum()
        accumulator = accumulator * correction + weights @ values[start:start + tile_size]
        running_max = new_max
    return accumulator / running_sum                                # (d_v,)


def _per_tile_softmax_mean(query, keys, values, tile_size):
    scale = 1 / math.sqrt(keys.shape[-1])
    parts = [torch.softmax(keys[s:s + tile_size] @ query * scale, dim=-1) @ values[s:s + tile_size]
             for s in range(0, keys.shape[0], tile_size)]
    return torch.stack(parts).mean(dim=0)


one_query_tiled = FunctionExercise(
    "One query, tile by tile",
    "write one_query_tiled(query, keys, values, tile_size): the context vector softmax(q Kᵀ / sqrt(d_k)) V of one "
    "query (d_k,), visiting the keys (T, d_k) and values (T, d_v) tile_size rows at a time with a running max, "
    "running sum and running weighted sum. Never hold a score or a weight for every key at once: at most one "
    "tile's worth (the checker measures the tensors your function creates on 4,096 keys).",
    reference=lambda q, k, v, tile: scaled_dot_product_attention(q[None], k, v)[0][0],
    cases=_one_query_cases,
    hint=["Exercise 1 already folds a tile into m and ℓ. What else must be carried from tile to tile to end with "
          "a weighted sum of value vectors?",
          "Whatever you carry was summed against the old maximum, just like ℓ. When is it safe to divide by ℓ?"],
    solution=_solution_one_query_tiled,
    rules=[_OneTileAtATime(num_keys=4096, tile_size=64)],
    mistakes=[
        Mistake(_per_tile_softmax_mean,
                "you took a softmax inside every tile and averaged the tiles. Tiles are not equally important: "
                "a tile's share depends on its scores relative to ALL keys. Carry a running max and sum instead."),
    ],
    atol=1e-5,
)


# --- 3. predict: how many tiles does causal tiled attention compute? ------------------------------------
def _tile_count_cases(g: torch.Generator) -> list[Case]:
    return [
        Case("T = 8 tokens, tiles of 2 (the slider of the lesson)", (8, 2)),
        Case("T = 10, tiles of 4 (the last tile is short)", (10, 4)),
        Case("T = 37, tiles of 8", (37, 8)),
        Case("T = 5, one tile larger than the sequence", (5, 8)),
        Case("T = 1024, tiles of 128", (1024, 128)),
        Case("T = 1, tiles of 1", (1, 1)),
    ]


def _reference_tile_count(num_tokens, tile_size):
    # count the tiles that iter_tile_steps really visits
    queries = torch.zeros(num_tokens, 1)
    return sum(1 for _ in iter_tile_steps(queries, queries, queries, is_causal=True, tile_size=tile_size))


def _solution_causal_tiles_computed(num_tokens, tile_size):
    num_blocks = math.ceil(num_tokens / tile_size)       # blocks of rows = blocks of columns; the last may be short
    return num_blocks * (num_blocks + 1) // 2            # block row i computes key blocks 0..i


causal_tiles_computed = FunctionExercise(
    "Predict the number of tiles",
    "write causal_tiles_computed(num_tokens, tile_size): how many (tile_size, tile_size) tiles of the score "
    "matrix causal tiled attention computes for num_tokens tokens (tiles wholly in the future are skipped; the "
    "last row and column of tiles may be shorter). Return an int, worked out from the two numbers: do not run "
    "iter_tile_steps or tiled_attention to count them.",
    reference=_reference_tile_count,
    cases=_tile_count_cases,
    hint=["Draw the (T, T) score matrix of the slider (8 tokens, tiles of 2) cut into tiles, and shade the ones that "
          "were computed. How many tiles does each block of query rows compute?",
          "First count the blocks along one side; 10 tokens in tiles of 4 make more than two of them."],
    solution=_solution_causal_tiles_computed,
    rules=[forbids("helpers.efficient.iter_tile_steps", "helpers.efficient.tiled_attention",
                   why="Predict the count from T and the tile size.")],
    mistakes=[
        Mistake(lambda t, b: math.ceil(t / b) ** 2,
                "you counted every tile of the square. Causal attention never computes a tile that lies wholly "
                "above the diagonal: those keys are all in the future of those queries."),
        Mistake(lambda t, b: (t // b) * (t // b + 1) // 2,
                "your count of blocks per side rounds down, so a short last block (10 tokens in tiles of 4) or a "
                "tile larger than the sequence is lost. A short block is still a block."),
        Mistake(lambda t, b: math.ceil(t / b) * (math.ceil(t / b) - 1) // 2,
                "you left out the tiles on the diagonal. They straddle it: part of each is in the past, so they "
                "are computed (and masked inside)."),
        Mistake(lambda t, b: math.ceil(t / b) ** 2 / 2,
                "half of the square is close, but not exact: the diagonal tiles are computed in full."),
    ],
)


# --- 4. spot the bug: scaling by the wrong width ------------------------------------------------------------
def _wide_value_cases(g: torch.Generator) -> list[Case]:
    return [Case("9 keys, d_k=4, d_v=4, tiles of 3", (randn(g, 4), randn(g, 9, 4), randn(g, 9, 4), 3)),
            Case("9 keys, d_k=4, d_v=16, tiles of 3", (randn(g, 4), randn(g, 9, 4), randn(g, 9, 16), 3))]


def buggy_one_query_tiled(query, keys, values, tile_size):
    scale = 1 / math.sqrt(values.shape[-1])
    running_max, running_sum = torch.tensor(float("-inf")), torch.tensor(0.0)
    accumulator = torch.zeros(values.shape[-1])
    for start in range(0, keys.shape[0], tile_size):
        scores = keys[start:start + tile_size] @ query * scale
        new_max = torch.maximum(running_max, scores.max())
        correction = torch.exp(running_max - new_max)
        weights = torch.exp(scores - new_max)
        running_sum = running_sum * correction + weights.sum()
        accumulator = accumulator * correction + weights @ values[start:start + tile_size]
        running_max = new_max
    return accumulator / running_sum


value_width_scale = SpotTheBug(
    "Spot the bug: the scale of the scores",
    "this tiled attention for one query agrees with the formula when keys and values are equally wide, and not "
    "otherwise. Fix it.",
    reference=lambda q, k, v, tile: scaled_dot_product_attention(q[None], k, v)[0][0],
    cases=_wide_value_cases,
    hint=["Run the buggy function and the formula on keys 4 wide and values 16 wide: which single number differs "
          "between the two computations?",
          "In softmax(q Kᵀ / sqrt(d_k)), d_k is the width of the vectors whose dot product makes a score."],
    solution=_solution_one_query_tiled,
    buggy=buggy_one_query_tiled,
    bug_message="the scores are scaled by 1/sqrt(d_v), the width of the VALUES. The dot products run over the "
                "keys' features: scale by 1/sqrt(keys.shape[-1]).",
)
