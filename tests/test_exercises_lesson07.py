"""Lesson 07's exercises: the instructions they state are checked, and plausible wrong answers are named."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.efficient import iter_tile_steps
from helpers.exercises import lesson07

ROOT = Path(__file__).resolve().parents[1]


def test_hints_do_not_give_the_answer():
    for exercise in (lesson07.merge_states, lesson07.normalised_tiles_bug):
        for hint in exercise._hints:
            assert "exp(m_a - m)" not in hint and "keys.shape[-1]" not in hint and "torch.where" not in hint, hint
    for hint in lesson07.normalised_tiles_bug._hints:  # the missing factor must not be named
        assert "running_sum * correction" not in hint and "/ new_sum" not in hint, hint
        assert "old sum" not in hint.lower() and "new sum" not in hint.lower(), hint


def test_titles_and_names_do_not_give_the_bug_away():
    bug = lesson07.normalised_tiles_bug
    for text in (bug.title, bug.task, "normalised_tiles_bug"):
        for word in ("correction", "re-base", "rescal", "new_sum", "old sum", "denominator"):
            assert word not in text.lower(), (word, text)


# --- merge two partial states ---------------------------------------------------------------------------------
def _state_of(scores, values):
    m = scores.amax(-1)
    e = torch.exp(scores - m[..., None])
    return m, e.sum(-1), e @ values


def test_merging_two_halves_gives_the_state_of_all_the_keys():
    g = torch.Generator().manual_seed(3)
    scores, values = torch.randn(5, 9, generator=g) * 3, torch.randn(9, 4, generator=g)
    merged = lesson07._solution_merge_states(*_state_of(scores[:, :4], values[:4]),
                                             *_state_of(scores[:, 4:], values[4:]))
    for got, want in zip(merged, _state_of(scores, values)):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(merged[2] / merged[1][:, None], torch.softmax(scores, -1) @ values)


def test_merge_equals_iter_tile_steps_split_in_two():
    g = torch.Generator().manual_seed(4)
    q, k, v = torch.randn(6, 4, generator=g), torch.randn(8, 4, generator=g), torch.randn(8, 3, generator=g)
    steps = list(iter_tile_steps(q, k, v, tile_size=6))  # one block of query rows, two tiles of keys (6 + 2)
    first, last = steps[0], steps[-1]
    second = list(iter_tile_steps(q, k[6:], v[6:], tile_size=6))[0]
    # iter_tile_steps scales the queries by 1/sqrt(d_k) of its own keys: the same d_k here
    merged = lesson07.merge_states.reference(first.running_max, first.running_sum, first.accumulator,
                                             second.running_max, second.running_sum, second.accumulator)
    for got, want in zip(merged, (last.running_max, last.running_sum, last.accumulator)):
        torch.testing.assert_close(got, want)


def test_merge_accepts_other_right_answers():
    def with_where(ma, la, aa, mb, lb, ab):
        m = torch.maximum(ma, mb)
        ca = torch.where(ma == -math.inf, torch.zeros_like(ma), torch.exp(ma - m))
        cb = torch.where(mb == -math.inf, torch.zeros_like(mb), torch.exp(mb - m))
        return m, la * ca + lb * cb, aa * ca.unsqueeze(-1) + ab * cb.unsqueeze(-1)

    def with_nan_to_num(ma, la, aa, mb, lb, ab):
        m = torch.maximum(ma, mb)
        ca, cb = torch.nan_to_num(torch.exp(ma - m)), torch.nan_to_num(torch.exp(mb - m))
        return m, la * ca + lb * cb, aa * ca[..., None] + ab * cb[..., None]

    for right in (with_where, with_nan_to_num):
        assert lesson07.merge_states.check(right).passed, lesson07.merge_states.check(right).message


def test_merge_names_the_nan_of_two_empty_parts():
    feedback = lesson07.merge_states.check(lesson07._merge_without_guard)
    assert feedback.status == "wrong" and "exp(-inf - (-inf))" in feedback.message


def test_merge_rejects_a_list_and_a_two_value_answer():
    assert "tuple" in lesson07.merge_states.check(lambda *a: list(lesson07._reference_merge(*a))).message
    feedback = lesson07.merge_states.check(lambda *a: lesson07._reference_merge(*a)[:2])
    assert feedback.status == "wrong"


def test_merge_survives_and_names_answers_that_overflow():
    feedback = lesson07.merge_states.check(lesson07._merge_through_exp_of_the_maxima)
    assert feedback.status == "wrong" and "overflows" in feedback.message, feedback.message


@pytest.mark.parametrize("broken", ["finite", "zero", "nan", "inf_sum"])
def test_merge_checker_survives_inf_and_nan_in_an_answer(broken):
    """A finite value where -inf is expected, nan, or inf in an answer: a message, never a crash."""
    def answer(*parts):
        new_max, new_sum, new_acc = lesson07._reference_merge(*parts)
        if broken == "finite":
            new_max = new_max.clamp(min=-1e30)
        elif broken == "zero":
            new_max = torch.nan_to_num(new_max, neginf=0.0)
        elif broken == "nan":
            new_acc = new_acc + float("nan")
        else:
            new_sum = new_sum + float("inf")
        return new_max, new_sum, new_acc

    feedback = lesson07.merge_states.check(answer)
    assert feedback.status == "wrong" and "on " in feedback.message, feedback.message


# --- spot the bug: the output kept normalised ---------------------------------------------------------------
def _unnormalised(q, k, v, tile):
    """Section 2's form: keep acc unnormalised, divide once at the end (a right answer in another style)."""
    m, total, acc = torch.tensor(-math.inf), torch.tensor(0.0), torch.zeros(v.shape[-1])
    for start in range(0, k.shape[0], tile):
        s = k[start:start + tile] @ q / math.sqrt(k.shape[-1])
        new = torch.maximum(m, s.max())
        e = torch.exp(s - new)
        total, acc, m = total * torch.exp(m - new) + e.sum(), acc * torch.exp(m - new) + e @ v[start:start + tile], new
    return acc / total


def _split_and_transposed(q, k, v, tile):
    m, total, out = torch.tensor(-math.inf), torch.tensor(0.0), torch.zeros(v.shape[-1])
    for k_t, v_tile in zip(k.T.split(tile, dim=1), v.split(tile)):      # (d_k, tile) views of the keys
        s = (q @ k_t) * k.shape[-1] ** -0.5
        new = torch.maximum(m, s.max())
        c, e = torch.exp(m - new), torch.exp(s - new)
        new_total = total * c + e.sum()
        out, m, total = out * (total * c / new_total) + (e @ v_tile) / new_total, new, new_total
    return out


def test_the_bug_is_named_and_right_answers_in_several_styles_pass():
    bug = lesson07.normalised_tiles_bug
    feedback = bug.check(lesson07.buggy_normalised_tiles)
    assert feedback.status == "wrong" and "new sum" in feedback.message, feedback.message
    for right in (lesson07._solution_normalised_tiles, _unnormalised, _split_and_transposed):
        assert bug.check(right).passed, bug.check(right).message


def test_the_buggy_code_is_right_with_one_tile_only():
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(4, generator=g), torch.randn(7, 4, generator=g), torch.randn(7, 3, generator=g)
    want = torch.softmax(k @ q / 2.0, dim=0) @ v
    torch.testing.assert_close(lesson07.buggy_normalised_tiles(q, k, v, 8), want)
    assert not torch.allclose(lesson07.buggy_normalised_tiles(q, k, v, 2), want, atol=1e-3)


def test_an_online_softmax_without_a_running_maximum_fails_on_large_and_very_negative_scores():
    feedback = lesson07.normalised_tiles_bug.check(lesson07._without_running_max)
    assert feedback.status == "wrong" and "running maximum" in feedback.message, feedback.message
    cases = lesson07._one_query_cases(torch.Generator().manual_seed(0))
    for words, sign in (("large scores", 1), ("very negative", -1)):
        case = next(c for c in cases if words in c.description)
        q, k, v, tile = case.args
        scores = k @ q / math.sqrt(k.shape[-1])
        assert bool((sign * scores > 110).all()), (words, scores)
        assert torch.isnan(lesson07._without_running_max(q, k, v, tile)).any()


def test_tile_by_tile_is_enforced():
    """A softmax over all keys at once, or a first pass for the global maximum, is refused even when right."""
    def all_at_once(q, k, v, tile):
        s = k @ q / math.sqrt(k.shape[-1])
        e = torch.exp(s - s.max())
        return e @ v / e.sum()

    def first_pass_for_the_maximum(q, k, v, tile):
        scale = 1 / math.sqrt(k.shape[-1])
        m = max(float((k[s:s + tile] @ q).max()) for s in range(0, k.shape[0], tile)) * scale
        total, acc = torch.tensor(0.0), torch.zeros(v.shape[-1])
        for s in range(0, k.shape[0], tile):
            e = torch.exp(k[s:s + tile] @ q * scale - m)
            total, acc = total + e.sum(), acc + e @ v[s:s + tile]
        return acc / total

    def with_softmax(q, k, v, tile):
        return torch.softmax(k @ q / math.sqrt(k.shape[-1]), dim=0) @ v

    for wrong, words in ((all_at_once, "at once"), (first_pass_for_the_maximum, "first pass"),
                         (with_softmax, "softmax")):
        feedback = lesson07.normalised_tiles_bug.check(wrong)
        assert feedback.status == "wrong" and words in feedback.message, (wrong.__name__, feedback.message)


def test_the_named_half_fixes():
    for mistake in lesson07.normalised_tiles_bug.mistakes[1:]:
        feedback = lesson07.normalised_tiles_bug.check(mistake.function)
        assert feedback.status == "wrong" and mistake.message in feedback.message


def test_the_task_states_every_rule_the_checker_enforces():
    task = lesson07.normalised_tiles_bug.task
    for words in ("tile by tile", "first pass", "torch.softmax", "scaled_dot_product_attention", "tiled_attention",
                  "iter_tile_steps", "+450"):
        assert words in task, words
    assert "+500" in lesson07.merge_states.task


def _exp_of_the_maxima_written_plainly(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    """A learner's way of writing the overflowing merge: no guard for empty parts, exp of each maximum."""
    new_max = torch.max(max_a, max_b)
    ea, eb, e = max_a.exp(), max_b.exp(), new_max.exp()
    return new_max, (sum_a * ea + sum_b * eb) / e, (acc_a * ea[..., None] + acc_b * eb[..., None]) / e[..., None]


def _exp_of_the_maxima_unguarded(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
    new_max = torch.maximum(max_a, max_b)
    ca, cb = torch.exp(max_a) / torch.exp(new_max), torch.exp(max_b) / torch.exp(new_max)
    return new_max, sum_a * ca + sum_b * cb, acc_a * ca[..., None] + acc_b * cb[..., None]


@pytest.mark.parametrize("wrong", [_exp_of_the_maxima_unguarded, _exp_of_the_maxima_written_plainly])
def test_merge_names_exp_of_a_maximum_even_without_the_empty_guard(wrong):
    """Such an answer also fails on two empty parts, but its real mistake is exp of a maximum on its own: the
    message must say so, not that it is right whenever one part has seen a key."""
    feedback = lesson07.merge_states.check(wrong)
    assert feedback.status == "wrong" and "exp of a maximum on its own" in feedback.message, feedback.message
    assert "whenever one part has seen a key" not in feedback.message


def test_merge_names_a_stand_in_returned_as_the_maximum():
    """Hint 2 suggests subtracting a finite stand-in where both parts are empty: returning that stand-in as the
    merged maximum is the wrong answer it invites, and the checker names it."""
    def stand_in_returned(max_a, sum_a, acc_a, max_b, sum_b, acc_b):
        new_max = torch.maximum(max_a, max_b)
        safe = torch.where(torch.isneginf(new_max), torch.zeros_like(new_max), new_max)
        ca, cb = torch.exp(max_a - safe), torch.exp(max_b - safe)
        return safe, sum_a * ca + sum_b * cb, acc_a * ca[..., None] + acc_b * cb[..., None]

    feedback = lesson07.merge_states.check(stand_in_returned)
    assert feedback.status == "wrong" and "stand-in" in feedback.message and "-inf" in feedback.message, feedback.message
    assert "stays -inf" in lesson07.merge_states._hints[1]


def test_the_merge_task_leaves_the_way_round_the_empty_parts_to_the_hints():
    nb = json.loads((ROOT / "notebooks" / "07_efficient_attention.ipynb").read_text(encoding="utf-8"))
    task = next("".join(c["source"]) for c in nb["cells"]
                if "".join(c["source"]).startswith("### Exercise 1: Merge two partial states"))
    assert "never `nan`" in task and "torch.where" not in task and "safe maximum" not in task
