"""Exercises for notebook 09: positions.

1. ALiBi (Press et al. 2021), a relative position the lesson names but does not build: causal weights with a
   per-head penalty on i - j, how far key j lies behind query i (minus the offset j - i);
2. spot the bug: RoPE attention with a hand-written turn, applied alike to queries and keys, whose quarter turn
   takes the pair (a, b) to (-b, -a), a reflection, instead of (-b, a). Every line looks like RoPE; the shift
   test (every position + 10) exposes it, as the scores then depend on i + j. Turned values, mixed pair layouts,
   the turn the wrong way round and the other half-fixes are named wrong answers; apply_rope in either layout,
   used for both, is RoPE and passes.
"""

from __future__ import annotations

import torch

from ..attention import scaled_dot_product_attention
from ..positions import apply_rope
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["alibi_weights", "rope_attention"]


# --- 1. ALiBi: positions as a penalty on the scores -------------------------------------------------------------
def _alibi_cases(g: torch.Generator) -> list[Case]:
    def case(description, num_heads, num_tokens, slopes, scale=1.0, shift=0.0):
        scores = randn(g, num_heads, num_tokens, num_tokens, scale=scale) + shift
        return Case(description, (scores, torch.tensor(slopes)))
    # The square case comes first: slopes broadcast on the query axis only run (silently wrong) when H == T.
    return [case("3 heads, 3 tokens, slopes 1, 0.5 and 0.25", 3, 3, [1.0, 0.5, 0.25]),
            case("2 heads, 5 tokens, slopes 0.5 and 0.25", 2, 5, [0.5, 0.25]),
            case("1 head, 1 token", 1, 1, [1.0]),
            case("4 heads, 7 tokens, slopes 1/2, 1/4, 1/8, 1/16, large scores (times 30)", 4, 7,
                 [0.5, 0.25, 0.125, 0.0625], scale=30.0),
            case("3 heads, 6 tokens, slopes 2, 0.3, 0 (no penalty), sharply peaked scores (times 100)", 3, 6,
                 [2.0, 0.3, 0.0], scale=100.0),
            case("2 heads, 9 tokens, slopes 0.7 and 0.05, scores all very negative (minus 1000)", 2, 9, [0.7, 0.05],
                 shift=-1000.0)]


def _steps_back(num_tokens: int) -> torch.Tensor:
    positions = torch.arange(num_tokens)
    return positions[:, None] - positions[None, :]                  # (T, T): i - j, how far key j lies behind i


def _reference_alibi(scaled_scores, slopes):
    num_tokens = scaled_scores.shape[-1]
    steps_back = _steps_back(num_tokens).to(scaled_scores.dtype)
    biased = scaled_scores - slopes[:, None, None] * steps_back       # (H, T, T)
    return torch.softmax(biased.masked_fill(steps_back < 0, float("-inf")), dim=-1)


def _solution_alibi(scaled_scores, slopes):
    num_tokens = scaled_scores.shape[-1]
    positions = torch.arange(num_tokens)
    steps_back = positions[:, None] - positions[None, :]            # (T, T): i - j, minus the offset j - i
    biased = scaled_scores - slopes[:, None, None] * steps_back       # (H, T, T): farther back, lower
    future = steps_back < 0                                         # key j after query i
    return torch.softmax(biased.masked_fill(future, float("-inf")), dim=-1)


def _alibi_sign_flipped(scaled_scores, slopes):
    steps_back = _steps_back(scaled_scores.shape[-1]).to(scaled_scores.dtype)
    biased = scaled_scores + slopes[:, None, None] * steps_back
    return torch.softmax(biased.masked_fill(steps_back < 0, float("-inf")), dim=-1)


def _alibi_no_mask(scaled_scores, slopes):
    steps_back = _steps_back(scaled_scores.shape[-1]).to(scaled_scores.dtype)
    return torch.softmax(scaled_scores - slopes[:, None, None] * steps_back.abs(), dim=-1)


def _alibi_slopes_on_the_wrong_axis(scaled_scores, slopes):
    steps_back = _steps_back(scaled_scores.shape[-1]).to(scaled_scores.dtype)
    biased = scaled_scores - slopes[:, None] * steps_back             # slope per query row, not per head
    return torch.softmax(biased.masked_fill(steps_back < 0, float("-inf")), dim=-1)


def _alibi_hides_its_own_key(scaled_scores, slopes):
    steps_back = _steps_back(scaled_scores.shape[-1]).to(scaled_scores.dtype)
    biased = scaled_scores - slopes[:, None, None] * steps_back
    return torch.softmax(biased.masked_fill(steps_back <= 0, float("-inf")), dim=-1)


def _alibi_one_future_key(scaled_scores, slopes):
    steps_back = _steps_back(scaled_scores.shape[-1]).to(scaled_scores.dtype)
    biased = scaled_scores - slopes[:, None, None] * steps_back
    return torch.softmax(biased.masked_fill(steps_back < -1, float("-inf")), dim=-1)


def _alibi_no_bias(scaled_scores, slopes):
    steps_back = _steps_back(scaled_scores.shape[-1])
    return torch.softmax(scaled_scores.masked_fill(steps_back < 0, float("-inf")), dim=-1)


alibi_weights = FunctionExercise(
    "ALiBi: positions as a penalty on the scores",
    "write alibi_weights(scaled_scores, slopes): scaled_scores (H, T, T), the scores already divided by "
    "sqrt(d_head), and slopes (H,), one slope "
    "lambda_h per head. Return the causal attention weights (H, T, T) of ALiBi (Press et al. 2021): "
    "softmax over j of scaled_scores[h, i, j] - lambda_h (i - j), with i - j minus the offset j - i, where key j "
    "may not come after query i. No position vectors, no rotation: the penalty grows with how far key j lies "
    "behind query i. Any PyTorch call is allowed.",
    reference=_reference_alibi,
    cases=_alibi_cases,
    hint=["Build the (T, T) table of i - j once, with broadcasting, then give it a head axis for the slopes.",
          "Which entries of that table belong to keys in the future of the query, and what must the softmax give "
          "them?"],
    solution=_solution_alibi,
    mistakes=[
        Mistake(_alibi_sign_flipped, "your penalty has the wrong sign: keys far behind the query get a bonus. ALiBi "
                                     "subtracts lambda_h (i - j), so the score falls the farther back key j lies."),
        Mistake(_alibi_no_mask, "every query also reads the keys after it: ALiBi here is causal (Press et al. "
                                "apply it to a causal language model). Hide the keys with j > i before the softmax."),
        Mistake(_alibi_slopes_on_the_wrong_axis, "the slopes meet the query axis, not the head axis: slopes has "
                                                 "shape (H,), the scores (H, T, T); give the slopes two trailing "
                                                 "axes, (H, 1, 1), so each head gets its own."),
        Mistake(_alibi_hides_its_own_key, "your mask also hides each query's own key (j = i): ALiBi's causal mask "
                                          "hides only the keys after the query, j > i. Query 0 then has no key "
                                          "left at all."),
        Mistake(_alibi_one_future_key, "each query also reads the key just after it (j = i + 1): hide every key "
                                       "with j > i."),
        Mistake(_alibi_no_bias, "your weights are causal but carry no penalty: subtract lambda_h (i - j) from each "
                                "score first."),
    ],
)


# --- 2. spot the bug: a hand-written turn whose quarter turn is a reflection (the buggy code) --------------------
def _qkv_cases(g: torch.Generator) -> list[Case]:
    def case(description, *shape):
        return Case(description, (randn(g, *shape), randn(g, *shape), randn(g, *shape)))
    return [case("one head, 6 tokens, head_dim 4", 1, 6, 4), case("2 sequences, 2 heads, 8 tokens, head_dim 8",
                                                                   2, 2, 8, 8),
            case("3 tokens, head_dim 2", 3, 2)]


def _reference_rope_attention(queries, keys, values):
    return scaled_dot_product_attention(apply_rope(queries), apply_rope(keys), values)[0]


def buggy_rope_attention(queries, keys, values):
    # queries, keys, values (..., T, head_dim) -> context vectors (..., T, head_dim), no mask
    def turn(x, positions):
        # R_i x_i: every pair (a, b) = (x_2r, x_2r+1) of row i turned by the angle positions[i] * omega_r
        head_dim = x.shape[-1]
        omega = 10000.0 ** (-torch.arange(0, head_dim, 2) / head_dim)            # (D / 2,): omega_r
        angles = (positions[:, None] * omega).repeat_interleave(2, dim=-1)       # (T, D): each angle twice
        a, b = x[..., 0::2], x[..., 1::2]                                        # (..., T, D / 2) each
        quarter_turn = torch.stack((-b, -a), dim=-1).flatten(-2)                 # (..., T, D): pairs a quarter on
        return x * angles.cos() + quarter_turn * angles.sin()                   # (..., T, D)

    positions = torch.arange(queries.shape[-2])                                  # (T,): 0, 1, ..., T - 1
    queries, keys = turn(queries, positions), turn(keys, positions)              # the values are not turned
    attn_scores = queries @ keys.transpose(-2, -1)                  # (..., T, D) @ (..., D, T) -> (..., T, T)
    attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ values                                    # (..., T, T) @ (..., T, D) -> (..., T, D)


def _solution_rope_attention(queries, keys, values):
    # The shift check on the printed code's turn (copied out of the function); its two rows differ:
    #     q, k, p = torch.randn(6, 8), torch.randn(6, 8), torch.arange(6)
    #     for shift in (0, 10):
    #         print((turn(q, p + shift) @ turn(k, p + shift).T)[0, :3])
    # (-b, -a) is a reflection of (a, b), not a quarter turn: section 4's formula at 90 degrees gives (-b, a).
    # apply_rope(queries), apply_rope(keys) in place of the two turns is the same answer.
    def turn(x, positions):
        head_dim = x.shape[-1]
        omega = 10000.0 ** (-torch.arange(0, head_dim, 2) / head_dim)            # (D / 2,): omega_r
        angles = (positions[:, None] * omega).repeat_interleave(2, dim=-1)       # (T, D): each angle twice
        a, b = x[..., 0::2], x[..., 1::2]                                        # (..., T, D / 2) each
        quarter_turn = torch.stack((-b, a), dim=-1).flatten(-2)                  # (a, b) -> (-b, a): 90 degrees
        return x * angles.cos() + quarter_turn * angles.sin()                   # (..., T, D)

    positions = torch.arange(queries.shape[-2])                                  # (T,)
    queries, keys = turn(queries, positions), turn(keys, positions)
    attn_scores = queries @ keys.transpose(-2, -1)                  # (..., T, D) @ (..., D, T) -> (..., T, T)
    attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ values                                    # (..., T, T) @ (..., T, D) -> (..., T, D)


def _rope_turned_backwards(queries, keys, values):
    # the quarter turn (b, -a): a rotation, but by -i omega_r, so the scores are those of position -i
    def turn(x):
        flipped = x.clone()
        flipped[..., 1::2] = -x[..., 1::2]                          # (a, b) -> (a, -b): the same as turning by -gamma
        turned = apply_rope(flipped)
        turned[..., 1::2] = -turned[..., 1::2]
        return turned
    queries, keys = turn(queries), turn(keys)
    return torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1) @ values


def _rope_mixed_layouts(queries, keys, values):
    queries, keys = apply_rope(queries), apply_rope(keys, pairs="halves")
    return torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1) @ values


def _rope_on_queries_only(queries, keys, values):
    attn_scores = apply_rope(queries) @ keys.transpose(-2, -1)
    return torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1) @ values


def _either_layout(got, case, function) -> str | None:
    """Values compared with RoPE in either pair layout, used the same way for queries and keys: both are RoPE
    (their scores depend on j - i only), so the task states no layout and the rotate-half one passes too."""
    (queries, keys, values), _ = case.fresh_args()
    got = got.detach().to("cpu", torch.float64)
    answers = [scaled_dot_product_attention(apply_rope(queries, pairs=pairs), apply_rope(keys, pairs=pairs),
                                            values)[0].to(torch.float64) for pairs in ("adjacent", "halves")]
    if any(torch.allclose(got, right, rtol=1e-4, atol=1e-5) for right in answers):
        return None
    far = ~torch.isclose(got, answers[0], rtol=1e-4, atol=1e-5, equal_nan=True)   # inf-safe, unlike |a - r| > tol
    index = tuple(int(i) for i in far.nonzero()[0]) if bool(far.any()) else (0,) * got.dim()
    return (f"the shape is right but the values are not: at index {list(index)} you have {got[index].item():.4f}, "
            f"the answer is {answers[0][index].item():.4f}. Try the task's check: shift every position by 10.")


def _rope_layouts_swapped(queries, keys, values):
    queries, keys = apply_rope(queries, pairs="halves"), apply_rope(keys)
    return torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1) @ values


_MIXED_LAYOUTS = ("the {first} are turned with adjacent pairs (2r, 2r + 1) and the {second} with rotate-half pairs "
                  "(r, r + head_dim / 2). Each is a rotation, but pair r of the query and pair r of the key are "
                  "different dimensions, so the two turns no longer combine into one turn by j - i, and the scores "
                  "depend on where the tokens stand. Turn both with the same layout.")


def _rope_values_turned(queries, keys, values):
    queries, keys, values = (apply_rope(x) for x in (queries, keys, values))
    return torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1) @ values


def _rope_on_keys_only(queries, keys, values):
    attn_scores = queries @ apply_rope(keys).transpose(-2, -1)
    return torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1) @ values


def _rope_after_scaling(queries, keys, values):
    attn_weights = torch.softmax(queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1)
    return attn_weights @ values


_REFLECTION = ("the quarter turn is wrong: (a, b) -> (-b, -a) is a reflection, not a turn by 90 degrees, so "
               "x cos + quarter_turn sin is no rotation (it turns the pair (1, 0) to (cos, -sin) but (0, 1) to "
               "(-sin, cos)). Two such maps do not combine into one turn by j - i, and the scores depend on where "
               "the tokens stand. Section 4's formula at 90 degrees takes (a, b) to (-b, a).")

_VALUES_TURNED = ("the values are turned too. RoPE belongs in the scores: (R_i q_i) . (R_j k_j) depends on j - i "
                  "only, but a turned value R_j v_j carries token j's absolute position into the output, so moving "
                  "the whole sentence changes the context vectors. Turn the queries and keys only.")

rope_attention = SpotTheBug(
    "Spot the bug: attention with RoPE",
    "rope_attention(queries, keys, values) should compute attention without a mask, with RoPE on the queries "
    "and keys making the scores depend on the offset j - i only (section 4; the values are not turned): inputs "
    "(..., T, head_dim), scores divided by sqrt(head_dim), output the context vectors z_i = sum_j a_ij v_j "
    "(..., T, head_dim). The code below runs, yet its answer is wrong. First write a check that needs no answer: "
    "right RoPE scores depend on j - i only, so moving every position by the same constant leaves them as they "
    "were. Copy turn out of the printed function (it is nested inside it), turn random queries and keys with it at "
    "positions 0..5 and again at 10..15 (its positions argument), and compare a row of scores. Then find the bug "
    "and fix it.",
    reference=_reference_rope_attention,
    cases=_qkv_cases,
    hint=["turn(x, positions) turns row n of x by positions[n]. Turn the same random q and k with it, once at "
          "torch.arange(6) and once at torch.arange(6) + 10, and compare row 0 of their scores, q @ k.T. Do the "
          "two rows agree?",
          "Scores that move with the sentence mean that turn is no rotation. Take head_dim = 2 and one angle "
          "gamma: which 2 x 2 matrix does turn apply to (a, b)? Compare it with section 4's formula.",
          "Section 4's formula at gamma = 90 degrees says where a quarter turn takes (a, b). Does the printed "
          "quarter_turn put it there?"],
    solution=_solution_rope_attention,
    buggy=buggy_rope_attention,
    bug_message=_REFLECTION,
    mistakes=[
        Mistake(_rope_turned_backwards, "you turn every pair the wrong way round, by -i omega_r: (a, b) -> (b, -a) is "
                                        "a quarter turn clockwise. The scores still depend on j - i only, but they "
                                        "are those of position -i. Section 4 turns by +i omega_r: a quarter turn "
                                        "takes (a, b) to (-b, a)."),
        Mistake(_rope_mixed_layouts, _MIXED_LAYOUTS.format(first="queries", second="keys")),
        Mistake(_rope_layouts_swapped, _MIXED_LAYOUTS.format(first="keys", second="queries")),
        Mistake(_rope_values_turned, _VALUES_TURNED),
        Mistake(_rope_on_queries_only, "you rotated the queries only. Then the score R_i q_i . k_j depends on "
                                       "where the query is, not on the offset j - i: rotate the keys as well."),
        Mistake(_rope_on_keys_only, "you rotated the keys only. Then the score q_i . R_j k_j depends on where the "
                                    "key is, not on the offset j - i: rotate the queries as well."),
        Mistake(_rope_after_scaling, "your attention uses no positions at all: rotate the queries and keys with "
                                     "apply_rope before the scores."),
    ],
    properties=_either_layout,   # no rules: any way of computing it is accepted (F.scaled_dot_product_attention too)
)
