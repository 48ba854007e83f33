"""Lesson 07's exercises: the instructions they state are checked, and plausible wrong answers are named."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.efficient import iter_tile_steps
from helpers.exercises import lesson07


def test_hints_do_not_give_the_answer():
    for exercise in (lesson07.merge_states, lesson07.padded_causal_sdpa, lesson07.one_query_tiled_bug):
        for hint in exercise._hints:
            assert "exp(m_a - m)" not in hint and "keys.shape[-1]" not in hint and "d_v" not in hint, hint
            assert "attn_mask=" not in hint and "tril" not in hint and "torch.where" not in hint, hint
    for hint in lesson07.one_query_tiled_bug._hints:  # the bug is the order of two lines: no hint may say so
        assert "running_max = new_max" not in hint and "order" not in hint.lower(), hint
        assert "overwrit" not in hint and "before" not in hint and "old maximum" not in hint, hint


def test_titles_and_names_do_not_give_the_bug_away():
    bug = lesson07.one_query_tiled_bug
    for text in (bug.title, bug.task, "one_query_tiled_bug"):
        for word in ("order", "correction", "overwrit", "re-base", "rescal", "before"):
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


# --- SDPA on a padded batch -------------------------------------------------------------------------------------
def test_padded_sdpa_requires_sdpa():
    feedback = lesson07.padded_causal_sdpa.check(lesson07._reference_padded)
    assert feedback.status == "wrong" and "scaled_dot_product_attention" in feedback.message


def test_padded_sdpa_accepts_other_right_answers():
    def float_mask(q, k, v, lengths):
        t = q.shape[-2]
        hide = lesson07._hide(t, lengths)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(hide.shape).masked_fill(hide, -math.inf))

    def broadcast_by_hand(q, k, v, lengths):
        t = q.shape[-2]
        keep = ~lesson07._hide(t, lengths)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep.expand(-1, q.shape[1], -1, -1))

    for right in (float_mask, broadcast_by_hand):
        assert lesson07.padded_causal_sdpa.check(right).passed, lesson07.padded_causal_sdpa.check(right).message


def test_padded_sdpa_a_padding_mask_with_is_causal_is_reported():
    def padding_mask_and_is_causal(q, k, v, lengths):  # some of SDPA's paths refuse the pair
        real = torch.arange(q.shape[-2])[None, :] < lengths[:, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=real[:, None, None, :], is_causal=True)

    feedback = lesson07.padded_causal_sdpa.check(padding_mask_and_is_causal)
    assert feedback.status == "wrong" and "is_causal" in feedback.message


def test_padded_sdpa_padding_hides_keys_not_queries():
    lengths = torch.tensor([2, 4])
    hide = lesson07._hide(4, lengths)
    assert hide.shape == (2, 1, 4, 4)
    assert hide[0, 0, 3].tolist() == [False, False, True, True]  # a padding query still sees the real keys
    assert not bool(hide.all(-1).any()), "no query may lose every key"


# --- spot the bug: the online softmax's update order ------------------------------------------------------------
def _cases():
    bug = lesson07.one_query_tiled_bug
    return bug.cases(torch.Generator().manual_seed(bug.seed))


def test_the_bug_is_in_the_online_softmax_right_only_when_the_maximum_comes_first():
    bug = lesson07.one_query_tiled_bug
    right = []
    for case in _cases():
        query, keys, values, tile_size = case.args
        expected = torch.softmax(keys @ query / math.sqrt(keys.shape[-1]), dim=-1) @ values
        torch.testing.assert_close(lesson07._solution_one_query_tiled(*case.args), expected)
        max_in_first_tile = int((keys @ query).argmax()) < tile_size
        got = bug.buggy(*case.args)
        right.append(bool(torch.allclose(got, expected, atol=1e-5)))
        assert right[-1] == max_in_first_tile, case.description  # exact iff no later tile raises the maximum
    assert right[0] and not all(right), "the task says: right for some inputs, wrong for others"


def test_spot_the_bug_is_named_and_fixed():
    bug = lesson07.one_query_tiled_bug
    feedback = bug.check(bug.buggy)
    assert feedback.status == "wrong" and "exp(0) = 1" in feedback.message
    assert bug.check(lesson07._solution_one_query_tiled).passed


@pytest.mark.parametrize("rescale_sum, rescale_acc, upside_down, words", [
    (True, False, False, "accumulator is not"),
    (False, True, False, "running sum is not"),
    (True, True, True, "upside down"),
])
def test_half_fixes_are_named(rescale_sum, rescale_acc, upside_down, words):
    wrong = lesson07._one_query_with(rescale_sum, rescale_acc, upside_down)
    feedback = lesson07.one_query_tiled_bug.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


def test_spot_the_bug_refuses_a_whole_row_softmax_and_accepts_other_right_fixes():
    bug = lesson07.one_query_tiled_bug

    def whole_row(query, keys, values, tile_size):
        return F.softmax(keys @ query / math.sqrt(keys.shape[-1]), dim=-1) @ values

    def via_sdpa(query, keys, values, tile_size):
        return F.scaled_dot_product_attention(query[None, None], keys[None], values[None])[0, 0]

    for wrong in (whole_row, via_sdpa):
        feedback = bug.check(wrong)
        assert feedback.status == "wrong" and "online softmax" in feedback.message, feedback.message

    def correction_computed_first(query, keys, values, tile_size):  # another right order of the same updates
        m, total, acc = torch.tensor(-math.inf), torch.tensor(0.0), torch.zeros(values.shape[-1])
        for start in range(0, len(keys), tile_size):
            s = keys[start:start + tile_size] @ query / math.sqrt(keys.shape[-1])
            m_new = torch.maximum(m, s.max())
            c, m = torch.exp(m - m_new), m_new
            p = torch.exp(s - m)
            total, acc = total * c + p.sum(), acc * c + p @ values[start:start + tile_size]
        return acc / total

    def ending_with_logsumexp(query, keys, values, tile_size):  # the state as (m + log l), also exact
        lse, acc, m = torch.tensor(-math.inf), torch.zeros(values.shape[-1]), torch.tensor(-math.inf)
        for start in range(0, len(keys), tile_size):
            s = keys[start:start + tile_size] @ query / math.sqrt(keys.shape[-1])
            m_new = torch.maximum(m, s.max())
            acc = acc * torch.exp(m - m_new) + torch.exp(s - m_new) @ values[start:start + tile_size]
            lse, m = torch.logaddexp(lse, torch.logsumexp(s, dim=0)), m_new
        return acc / torch.exp(lse - m)

    for right in (correction_computed_first, ending_with_logsumexp):
        assert bug.check(right).passed, bug.check(right).message
