"""Exercises for notebook 07: efficient attention (the online softmax behind flash attention).

1. merge two partial online-softmax states (two blocks of keys processed apart);
2. spot the bug: an online softmax that keeps its output normalised after every tile.
"""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids

__all__ = ["merge_states", "normalised_tiles_bug"]

_NEG_INF = float("-inf")


# --- 1. merge two partial online-softmax states ------------------------------------------------------------
def _state(scores: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(running_max, running_sum, accumulator) of rows ``scores`` (..., n) over ``values`` (n, d_v), in one go."""
    running_max = scores.amax(dim=-1)
    exp_scores = torch.exp(scores - running_max.unsqueeze(-1))
    return running_max, exp_scores.sum(dim=-1), exp_scores @ values


def _empty(rows: tuple[int, ...], d_v: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.full(rows, _NEG_INF), torch.zeros(rows), torch.zeros(*rows, d_v)


def _merge_cases(g: torch.Generator) -> list[Case]:
    def two_parts(rows, keys_a, keys_b, d_v, shift_a=0.0, shift_b=0.0, scale=2.0):
        values_a, values_b = randn(g, keys_a, d_v), randn(g, keys_b, d_v)
        part_a = _state(randn(g, *rows, keys_a, scale=scale) + shift_a, values_a)
        part_b = _state(randn(g, *rows, keys_b, scale=scale) + shift_b, values_b)
        return (*part_a, *part_b)

    mixed = two_parts((4,), 3, 3, 2)
    one_empty_row = list(two_parts((3,), 4, 4, 3))
    one_empty_row[0][1], one_empty_row[1][1], one_empty_row[2][1] = _NEG_INF, 0.0, 0.0   # row 1 of part a: empty
    return [
        Case("3 rows, d_v = 4, part b holds the larger maxima", two_parts((3,), 5, 4, 4, shift_b=3.0)),
        Case("3 rows, d_v = 4, part a holds the larger maxima", two_parts((3,), 4, 6, 4, shift_a=3.0)),
        Case("4 rows, d_v = 2, the larger maximum sometimes in a, sometimes in b", mixed),
        # Before the empty parts: an answer that takes exp of a maximum on its own must meet these first, so that
        # its message names that mistake and not the missing guard for two empty parts.
        Case("3 rows, large scores (maxima near 500): exp of a maximum overflows",
             two_parts((3,), 4, 5, 3, shift_a=500.0, shift_b=480.0)),
        Case("3 rows, very negative scores (maxima near -500): exp of a maximum is 0",
             two_parts((3,), 5, 4, 3, shift_a=-500.0, shift_b=-520.0)),
        Case("2 rows, part b has seen no keys yet: (-inf, 0, 0)",
             (*_state(randn(g, 2, 3), randn(g, 3, 3)), *_empty((2,), 3))),
        Case("2 rows, part a has seen no keys yet: (-inf, 0, 0)",
             (*_empty((2,), 3), *_state(randn(g, 2, 3), randn(g, 3, 3)))),
        Case("2 rows, neither part has seen a key (every key hidden so far)", (*_empty((2,), 3), *_empty((2,), 3))),
        Case("3 rows, only row 1 of part a has seen no key", tuple(one_empty_row)),
        Case("2 rows, sharply peaked: the maxima of a and b 60 apart", two_parts((2,), 3, 3, 4, shift_b=60.0)),
        Case("a batch of 2 x 3 rows, d_v = 5", two_parts((2, 3), 4, 7, 5, shift_a=1.0)),
    ]


def _reference_merge(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max = torch.maximum(max_a, max_b)
    # Where both parts are empty the new max is -inf too: rescale against 0 there, so exp(-inf - 0) = 0, not nan.
    finite_max = torch.where(torch.isneginf(new_max), torch.zeros_like(new_max), new_max)
    scale_a, scale_b = torch.exp(max_a - finite_max), torch.exp(max_b - finite_max)
    return (new_max, sum_a * scale_a + sum_b * scale_b,
            acc_a * scale_a.unsqueeze(-1) + acc_b * scale_b.unsqueeze(-1))


def _solution_merge_states(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max = torch.maximum(max_a, max_b)                       # (...,)
    safe_max = new_max.masked_fill(new_max == float("-inf"), 0.0)  # both parts empty: avoid -inf - (-inf)
    correction_a = torch.exp(max_a - safe_max)                 # bring part a onto the common maximum
    correction_b = torch.exp(max_b - safe_max)
    new_sum = sum_a * correction_a + sum_b * correction_b
    new_acc = acc_a * correction_a[..., None] + acc_b * correction_b[..., None]   # (..., d_v)
    return new_max, new_sum, new_acc


def _merge_without_guard(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max = torch.maximum(max_a, max_b)
    ca, cb = torch.exp(max_a - new_max), torch.exp(max_b - new_max)
    return new_max, sum_a * ca + sum_b * cb, acc_a * ca[..., None] + acc_b * cb[..., None]


def _merge_upside_down(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max = torch.maximum(max_a, max_b)
    ca, cb = torch.exp(new_max - max_a), torch.exp(new_max - max_b)
    return new_max, sum_a * ca + sum_b * cb, acc_a * ca[..., None] + acc_b * cb[..., None]


def _merge_through_exp_of_the_maxima(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max = torch.maximum(max_a, max_b)
    safe_max = new_max.masked_fill(new_max == float("-inf"), 0.0)      # empty parts handled, exp(m) is not
    ca, cb = torch.exp(max_a) / torch.exp(safe_max), torch.exp(max_b) / torch.exp(safe_max)
    return new_max, sum_a * ca + sum_b * cb, acc_a * ca[..., None] + acc_b * cb[..., None]


def _merge_returns_the_stand_in(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max = torch.maximum(max_a, max_b)
    safe_max = new_max.masked_fill(new_max == float("-inf"), 0.0)
    ca, cb = torch.exp(max_a - safe_max), torch.exp(max_b - safe_max)
    return safe_max, sum_a * ca + sum_b * cb, acc_a * ca[..., None] + acc_b * cb[..., None]


def _merge_sums_only(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max, new_sum, _ = _reference_merge(max_a, sum_a, acc_a, max_b, sum_b, acc_b)
    return new_max, new_sum, acc_a + acc_b


merge_states = FunctionExercise(
    "Merge two partial states",
    "write merge_states(max_a, sum_a, acc_a, max_b, sum_b, acc_b): two online softmaxes ran over two different "
    "blocks of keys for the same query rows; part a ended with running max m (`max_a`, shape (...)), running sum ℓ "
    "(`sum_a`, shape (...)) and accumulator acc (`acc_a`, shape (..., d_v)), part b likewise. Return the state "
    "(new_max, new_sum, new_acc) after all the keys of both parts. A part that has seen no keys is (-inf, 0, 0): "
    "merging it must give the other part back, and two empty parts give (-inf, 0, 0), never nan. The checker also "
    "uses scores near +500 and -500, where exp of a score on its own overflows or vanishes.",
    reference=_reference_merge,
    cases=_merge_cases,
    hint=["Each part's sum and accumulator are measured against its own maximum. Which maximum should the merged "
          "state use, and what must happen to each part before the two can be added?",
          "Try your function on two empty parts and look for exp(-inf - (-inf)). Where the merged maximum is "
          "-inf, which finite number could you subtract instead, so that each exp comes out 0? The maximum you "
          "return stays -inf."],
    solution=_solution_merge_states,
    mistakes=[
        Mistake(lambda ma, la, aa, mb, lb, ab: (torch.maximum(ma, mb), la + lb, aa + ab),
                "you added the two parts as they were. Part a's terms are exp(s - m_a), part b's exp(s - m_b): "
                "they can only be added once both are measured against the same maximum."),
        Mistake(_merge_sums_only,
                "the maximum and the running sum are right, but the accumulators were added as they were. They were "
                "summed against each part's own maximum, exactly like the sums."),
        Mistake(_merge_without_guard,
                "right whenever one part has seen a key, but two empty parts give nan: their maxima are both -inf, "
                "and exp(-inf - (-inf)) is nan. An empty merged state must stay (-inf, 0, 0)."),
        Mistake(_merge_returns_the_stand_in,
                "the sums and accumulators are right, but where both parts are empty you returned the finite "
                "stand-in you subtracted as the maximum. A state that has seen no key is (-inf, 0, 0): use the "
                "stand-in only inside exp, and return the true maximum, -inf."),
        Mistake(_merge_through_exp_of_the_maxima,
                "right on ordinary scores, but you take exp of a maximum on its own (exp(m_a), exp(m_b)). "
                "That overflows to inf for scores above about 88 and underflows to 0 below about -104, and inf/inf "
                "or 0/0 is nan. Only ever take exp of a difference that is at most 0."),
        Mistake(_merge_upside_down,
                "your correction factors are upside down: they grow the part with the smaller maximum. A term "
                "exp(s - m_a) becomes exp(s - m) by multiplying it with exp(m_a - m), which is at most 1."),
    ],
)


# --- 2. spot the bug: the output kept normalised, tile by tile ----------------------------------------------
class _TileSpy:
    """Calls the learner's function under a dispatch hook that notes any tensor it computes over too many keys.

    "Tile by tile" means that no tensor the function computes covers more than ``tile_size`` keys at once: a
    softmax or a maximum over all the scores, or a first pass for the global maximum, computes a tensor with one
    entry per key. Views of the inputs (slices, transposes) compute nothing and are not counted. The cases give
    the number of keys a size that no other dimension has, so a dimension of that size means "all the keys".
    Behaves like the learner's function for the checker (same code, same globals).
    """

    def __init__(self, function):
        self.function, self.problem = function, None
        self.__code__ = getattr(function, "__code__", None)
        self.__globals__ = getattr(function, "__globals__", {})

    def __call__(self, query, keys, values, tile_size):
        from ..efficient import OpRecorder  # a TorchDispatchMode; we only need its hook

        num_keys, spy, last_start = keys.shape[0], self, [-1]
        inputs = [t for t in (query, keys, values) if isinstance(t, torch.Tensor)]

        def rows_of_keys(tensor):
            """The first key row a view of ``keys`` starts at, or None if it is not a view of ``keys``."""
            if not (isinstance(tensor, torch.Tensor) and _same_memory(tensor, keys)) or keys.dim() != 2:
                return None
            return (tensor.storage_offset() - keys.storage_offset()) // max(keys.stride(0), 1)

        def too_wide(func, tensor):
            return (f"your function computes `{func.overloadpacket.__name__}` over all {num_keys} keys at once (a "
                    f"result of shape {tuple(tensor.shape)}), and the task asks for tile by tile: no tensor may "
                    f"cover more than tile_size keys.")

        went_back = ("your function reads the keys of a tile again after reading later ones: a first pass over "
                     "every key (for the maximum, say) and then a second. The task asks for one pass, tile by tile.")

        class _Watch(OpRecorder):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                results = out if isinstance(out, (tuple, list)) else (out,)
                is_view = any(isinstance(r, torch.Tensor) and any(_same_memory(r, t) for t in inputs)
                              for r in results)
                if num_keys > tile_size and spy.problem is None and not is_view:
                    for tensor in results:
                        if isinstance(tensor, torch.Tensor) and num_keys in tensor.shape:
                            spy.problem = too_wide(func, tensor)
                    for arg in args:
                        start = rows_of_keys(arg)
                        if start is not None and spy.problem is None:
                            if start < last_start[0]:
                                spy.problem = went_back
                            last_start[0] = max(last_start[0], start)
                return out

        with _Watch():
            return self.function(query, keys, values, tile_size)


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return False


class _TileByTile(SpotTheBug):
    """A spot-the-bug whose fix must stay tile by tile (checked by :class:`_TileSpy` on every case)."""

    def _check(self, function):
        if not callable(function) or self._is_placeholder(function):
            return super()._check(function)
        spy = _TileSpy(function)
        feedback = super()._check(spy)
        if feedback.passed and spy.problem:
            return self._wrong(f"the values are right, but {spy.problem}")
        return feedback


def _one_query_cases(g: torch.Generator) -> list[Case]:
    def case(description, num_keys, d_k, d_v, tile_size, scale=1.0, peak=None):
        query, keys, values = randn(g, d_k), randn(g, num_keys, d_k), randn(g, num_keys, d_v)
        query = query / query.norm()
        if scale != 1.0:                                            # every key leans the query's way, so that
            keys = keys + 3.0 * query                               # every scaled score is about 3 * scale
        query = query * scale * math.sqrt(d_k)                      # scaled score of key j: scale * (k_j . q/|q|)
        if peak is not None:
            keys[peak] = keys[peak] + 40.0 * query / query.norm()  # one key far ahead of the rest
        return Case(description, (query, keys, values, tile_size))
    ramp = case("11 keys in tiles of 3, d_k = 4, d_v = 2, the largest score in the last tile", 11, 4, 2, 3)
    ramp.args[1][9] = 3.0 * ramp.args[0]                           # key 9 points the query's way
    return [case("13 keys in tiles of 4, d_k = 6, d_v = 3", 13, 6, 3, 4),
            ramp,
            case("17 keys in tiles of 5, d_k = 4, d_v = 7, the largest score in the first tile", 17, 4, 7, 5,
                 peak=0),
            case("9 keys in tiles of 2 (the last tile holds 1 key), d_k = 5, d_v = 3", 9, 5, 3, 2),
            case("19 keys in tiles of 6, large scores (about 450): exp of a score on its own overflows",
                 19, 4, 3, 6, scale=150.0),
            case("15 keys in tiles of 4, every score very negative (about -450)", 15, 6, 2, 4, scale=-150.0),
            case("14 keys in tiles of 3, sharply peaked: one score far above the others", 14, 4, 5, 3, peak=8),
            case("5 keys, d_k = 3, d_v = 2, one tile of 8 (all keys at once)", 5, 3, 2, 8)]


def buggy_normalised_tiles(query, keys, values, tile_size):
    # `output` is the context vector of the keys seen so far, already divided by their running sum.
    scale = 1 / math.sqrt(keys.shape[-1])
    running_max, running_sum = torch.tensor(float("-inf")), torch.tensor(0.0)
    output = torch.zeros(values.shape[-1])                              # (d_v,)
    for start in range(0, keys.shape[0], tile_size):
        scaled_scores = keys[start:start + tile_size] @ query * scale   # (tile,) of this tile
        new_max = torch.maximum(running_max, scaled_scores.max())
        correction = torch.exp(running_max - new_max)
        exp_scores = torch.exp(scaled_scores - new_max)                 # (tile,)
        new_sum = running_sum * correction + exp_scores.sum()
        output = output * correction + exp_scores @ values[start:start + tile_size] / new_sum
        running_max, running_sum = new_max, new_sum
    return output                                                       # (d_v,)


def _solution_normalised_tiles(query, keys, values, tile_size):
    scale = 1 / math.sqrt(keys.shape[-1])
    running_max, running_sum = torch.tensor(float("-inf")), torch.tensor(0.0)
    output = torch.zeros(values.shape[-1])
    for start in range(0, keys.shape[0], tile_size):
        scaled_scores = keys[start:start + tile_size] @ query * scale
        new_max = torch.maximum(running_max, scaled_scores.max())
        correction = torch.exp(running_max - new_max)
        exp_scores = torch.exp(scaled_scores - new_max)
        new_sum = running_sum * correction + exp_scores.sum()
        # output * running_sum is the unnormalised acc; re-base it, add this tile, divide by the NEW sum
        output = (output * running_sum * correction + exp_scores @ values[start:start + tile_size]) / new_sum
        running_max, running_sum = new_max, new_sum
    return output


def _normalised_with(update):
    def tiled(query, keys, values, tile_size):
        running_max, running_sum = torch.tensor(float("-inf")), torch.tensor(0.0)
        output = torch.zeros(values.shape[-1])
        for start in range(0, keys.shape[0], tile_size):
            scaled_scores = keys[start:start + tile_size] @ query / math.sqrt(keys.shape[-1])
            new_max = torch.maximum(running_max, scaled_scores.max())
            correction = torch.exp(running_max - new_max)
            exp_scores = torch.exp(scaled_scores - new_max)
            new_sum = running_sum * correction + exp_scores.sum()
            output = update(output, running_sum, new_sum, correction, exp_scores @ values[start:start + tile_size])
            running_max, running_sum = new_max, new_sum
        return output
    return tiled


def _without_running_max(query, keys, values, tile_size):
    running_sum, output = torch.tensor(0.0), torch.zeros(values.shape[-1])
    for start in range(0, keys.shape[0], tile_size):
        exp_scores = torch.exp(keys[start:start + tile_size] @ query / math.sqrt(keys.shape[-1]))
        new_sum = running_sum + exp_scores.sum()
        output = (output * running_sum + exp_scores @ values[start:start + tile_size]) / new_sum
        running_sum = new_sum
    return output


def _reference_one_query(query, keys, values, tile_size):
    return scaled_dot_product_attention(query[None], keys, values)[0][0]


normalised_tiles_bug = _TileByTile(
    "Spot the bug: the output kept normalised",
    "this online softmax for one query (d_k,) over keys (T, d_k) and values (T, d_v) keeps its output normalised "
    "after every tile, as FlashAttention's first algorithm does (Dao et al., 2022): `output` is always the "
    "context vector of the keys seen so far. It returns the right context vector for some inputs and a wrong one "
    "for others. Find the bug and write the fixed function. Rules the checker enforces: still tile by tile (no "
    "tensor may cover more than tile_size keys at once: no softmax or maximum over all the scores, no first pass "
    "over all the keys), and no call of torch.softmax, torch.nn.functional.softmax, Tensor.softmax, "
    "torch.nn.functional.scaled_dot_product_attention, or the course's tiled_attention and iter_tile_steps (the "
    "loop behind tiled_attention and the slider). The checker also uses scores near +450 and -450 and sharply "
    "peaked rows.",
    reference=_reference_one_query,
    cases=_one_query_cases,
    hint=["For which inputs is it right? Try a tile_size at least as large as the number of keys, then a smaller "
          "one.",
          "Write what `output` must equal after a tile in terms of section 2's acc and running sum, then ask what "
          "the old `output` has to be multiplied by to get there."],
    solution=_solution_normalised_tiles,
    buggy=buggy_normalised_tiles,
    bug_message="only the first tile's values come out right: the old output was divided by the OLD running sum, "
                "and the update re-bases it onto the new maximum (correction) but never onto the new sum. Multiply "
                "it by running_sum * correction / new_sum, the share of the weight its keys keep.",
    mistakes=[
        Mistake(_normalised_with(lambda out, old, new, corr, tile: out * old / new + tile / new),
                "the old output is re-weighted by running_sum / new_sum, but not re-based onto the new maximum: "
                "multiply by the correction too."),
        Mistake(_normalised_with(lambda out, old, new, corr, tile: (out * old * corr + tile) / old.clamp(min=1e-30)),
                "you divide by the old running sum: after this tile the output's denominator is the new one."),
        Mistake(_without_running_max,
                "right on ordinary scores, but without a running maximum exp of a score overflows to inf above "
                "about 88 (inf / inf = nan) and every exp is 0 on very negative scores (0 / 0 = nan). Keep "
                "subtracting the running maximum."),
    ],
    rules=[forbids("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax",
                   "torch.nn.functional.scaled_dot_product_attention", "helpers.efficient.tiled_attention",
                   "helpers.efficient.iter_tile_steps",
                   why="The fix keeps the online softmax, one tile at a time.")],
)
