"""Notebook 10's exercises: right answers in any reasonable form pass, plausible wrong ones are named, and no hint
gives the answer away."""

import pytest
import torch

from helpers.exercises import lesson10
from helpers.masks import causal_mask


def test_the_buggy_code_does_not_name_its_bug():
    import inspect
    source = inspect.getsource(lesson10.padded_heads.buggy)
    assert "broadcast" not in source and "None, None" not in source


def test_exports():
    assert lesson10.__all__ == ["decoder_masks", "padded_heads"]


# --- 1. the decoder's two masks -----------------------------------------------------------------------------------
def _masks_with_broadcast_to(target_pad, source_pad):
    batch_size, num_queries = target_pad.shape
    num_keys = source_pad.shape[1]
    encoder_mask = source_pad.unsqueeze(1).repeat(1, num_keys, 1)
    self_mask = torch.broadcast_to(causal_mask(num_queries), (batch_size, num_queries, num_queries)) \
        | target_pad.unsqueeze(1)
    cross_mask = source_pad.unsqueeze(1).repeat(1, num_queries, 1)
    return encoder_mask, self_mask, cross_mask


def _masks_by_comparison(target_pad, source_pad):
    num_queries, num_keys = target_pad.shape[1], source_pad.shape[1]
    rows = torch.arange(num_queries)
    future = rows[None, :] > rows[:, None]                              # key after query
    encoder_mask = source_pad[:, None, :] & torch.ones(1, num_keys, num_keys, dtype=torch.bool)
    self_mask = future[None] | target_pad[:, None, :]
    cross_mask = source_pad[:, None, :] & torch.ones(1, num_queries, num_keys, dtype=torch.bool)
    return encoder_mask, self_mask, cross_mask


@pytest.mark.parametrize("answer", [_masks_with_broadcast_to, _masks_by_comparison])
def test_decoder_masks_accepts_every_right_form(answer):
    assert lesson10.decoder_masks.check(answer).passed


def test_decoder_masks_rejects_broadcastable_but_unexpanded_masks():
    feedback = lesson10.decoder_masks.check(lambda t, s: (s[:, None, :], causal_mask(t.shape[1]) | t[:, None, :],
                                                          s[:, None, :]))
    assert feedback.status == "wrong" and "Expand each over its queries" in feedback.message, feedback.message
    assert "multiply, sum or keep" not in feedback.message                  # the advice for products does not fit


def test_a_second_returned_value_is_named_counting_from_zero():
    feedback = lesson10.decoder_masks.check(lambda t, s: (*lesson10.decoder_masks._solution(t, s)[:1],
                                                          ~lesson10.decoder_masks._solution(t, s)[1],
                                                          lesson10.decoder_masks._solution(t, s)[2]))
    assert feedback.status == "wrong" and "returned value 1 (counting from 0)" in feedback.message, feedback.message


def test_decoder_masks_rejects_swapped_outputs():
    feedback = lesson10.decoder_masks.check(lambda t, s: tuple(reversed(lesson10.decoder_masks.reference(t, s))))
    assert feedback.status == "wrong"


def test_decoder_masks_cases_separate_every_mistake():
    """Each known mistake differs from the answer on some case, and the first (square) case names the query axis."""
    cases = lesson10.decoder_masks.cases(torch.Generator().manual_seed(lesson10.decoder_masks.seed))
    first = cases[0].args
    assert first[0].shape[1] == first[1].shape[1], "the query-axis mistake needs a square case to be caught"
    assert any(case.args[0].shape[1] != case.args[1].shape[1] for case in cases), "cross-attention is not square"
    for mistake in lesson10.decoder_masks.mistakes:
        feedback = lesson10.decoder_masks.check(mistake.function)
        assert feedback.status == "wrong" and mistake.message in feedback.message


def test_decoder_masks_names_the_causal_threshold_on_both_sides():
    # "no word may read what has not been written yet": the threshold j = i is on every case's diagonal.
    def hides_itself(t, s):
        encoder_mask, self_mask, cross_mask = lesson10.decoder_masks.reference(t, s)
        return encoder_mask, self_mask | torch.eye(t.shape[1], dtype=torch.bool), cross_mask

    def one_word_ahead(t, s):
        encoder_mask, _, cross_mask = lesson10.decoder_masks.reference(t, s)
        return encoder_mask, torch.ones(t.shape[1], t.shape[1], dtype=torch.bool).triu(2) | t[:, None, :], cross_mask
    assert "own key" in lesson10.decoder_masks.check(hides_itself).message
    assert "words after it" in lesson10.decoder_masks.check(one_word_ahead).message


def test_decoder_masks_names_a_causal_only_self_mask_by_the_task_s_own_rule():
    # Padding sits at the end, so a causal self_mask alone is right for every real word; the padded words still
    # read padding keys, which the task forbids ("no query reads padding"). The feedback says that, and does not
    # contradict the task by appealing to padding elsewhere.
    def causal_only(t, s):
        encoder_mask, _, cross_mask = lesson10.decoder_masks.reference(t, s)
        future = torch.ones(t.shape[1], t.shape[1], dtype=torch.bool).triu(1)
        return encoder_mask, future.expand(t.shape[0], -1, -1).clone(), cross_mask
    feedback = lesson10.decoder_masks.check(causal_only)
    assert feedback.status == "wrong" and "a padded word still reads padding keys" in feedback.message
    assert "wherever the padding sits" not in feedback.message


def test_decoder_masks_asks_for_a_mask_no_cell_of_the_lesson_builds():
    # The cross mask is section 2's line; the encoder's mask is new work (padding keys, square, no causal part).
    assert "encoder_mask (B, T_k, T_k)" in lesson10.decoder_masks.task
    feedback = lesson10.decoder_masks.check(lambda t, s: (lesson10.decoder_masks.reference(t, s)[0]
                                                          | causal_mask(s.shape[1]),)
                                            + lesson10.decoder_masks.reference(t, s)[1:])
    assert feedback.status == "wrong" and "encoder_mask is causal" in feedback.message, feedback.message


# --- 2. spot the bug: the padding mask meets several heads ---------------------------------------------------------
def _scores(queries, keys):
    return queries @ keys.transpose(-2, -1) / queries.shape[-1] ** 0.5


def test_spot_the_bug_names_the_broadcast_onto_the_heads():
    feedback = lesson10.padded_heads.check(lesson10.padded_heads.buggy)
    assert feedback.status == "wrong" and "heads" in feedback.message and "(B, 1, 1, T_k)" in feedback.message


def test_spot_the_bug_accepts_right_answers_in_several_styles():
    def with_unsqueeze(queries, keys, values, source_padding_mask):
        mask = source_padding_mask.unsqueeze(1).unsqueeze(2)
        return torch.softmax(_scores(queries, keys).masked_fill(mask, float("-inf")), dim=-1) @ values

    def with_torch(queries, keys, values, source_padding_mask):   # PyTorch's convention: True = take part
        return torch.nn.functional.scaled_dot_product_attention(
            queries, keys, values, attn_mask=~source_padding_mask[:, None, None, :])

    def with_view(queries, keys, values, source_padding_mask):
        batch_size, num_keys = source_padding_mask.shape
        mask = source_padding_mask.view(batch_size, 1, 1, num_keys)
        return torch.softmax(_scores(queries, keys).masked_fill(mask, -1e9), dim=-1) @ values   # a large negative

    def with_helper(queries, keys, values, source_padding_mask):
        from helpers.attention import scaled_dot_product_attention
        return scaled_dot_product_attention(queries, keys, values, mask=source_padding_mask[:, None, None])[0]

    for answer in (with_unsqueeze, with_torch, with_view, with_helper):
        assert lesson10.padded_heads.check(answer).passed, answer.__name__


def test_spot_the_bug_names_plausible_wrong_fixes():
    def zeroed_after_softmax(queries, keys, values, source_padding_mask):
        weights = torch.softmax(_scores(queries, keys), dim=-1)
        return weights.masked_fill(source_padding_mask[:, None, None, :], 0.0) @ values

    def inverted(queries, keys, values, source_padding_mask):
        hide = ~source_padding_mask[:, None, None, :]
        return torch.softmax(_scores(queries, keys).masked_fill(hide, float("-inf")), dim=-1) @ values

    def mask_on_the_queries(queries, keys, values, source_padding_mask):   # rows instead of columns: only T_q = T_k
        num_queries, num_keys = queries.shape[2], keys.shape[2]
        mask = source_padding_mask[:, None, :num_queries, None].expand(-1, -1, -1, num_keys)
        return torch.softmax(_scores(queries, keys).masked_fill(mask, float("-inf")), dim=-1) @ values

    for answer, words in ((zeroed_after_softmax, "after the softmax"), (inverted, "hides the real"),
                          (mask_on_the_queries, None)):
        feedback = lesson10.padded_heads.check(answer)
        assert feedback.status == "wrong", answer.__name__
        assert words is None or words in feedback.message, feedback.message


def test_spot_the_bug_catches_a_softmax_without_the_maximum():
    def naive(queries, keys, values, source_padding_mask):
        exps = _scores(queries, keys).exp().masked_fill(source_padding_mask[:, None, None, :], 0.0)
        return exps / exps.sum(dim=-1, keepdim=True) @ values           # overflows on large scores
    feedback = lesson10.padded_heads.check(naive)
    assert feedback.status == "wrong" and "nan" in feedback.message


def test_the_buggy_code_is_silent_when_batch_equals_heads_and_wrong():
    import helpers.exercises.lesson10 as module
    case = module._heads_cases(torch.Generator().manual_seed(0))[0]
    (queries, keys, values, pad), _ = case.fresh_args()
    assert queries.shape[0] == queries.shape[1] == 2
    buggy = lesson10.padded_heads.buggy(queries, keys, values, pad)
    assert buggy.shape == queries.shape and not torch.allclose(buggy, module._reference_heads(queries, keys, values, pad))


def test_every_checker_survives_inf_and_nan_answers():
    for value in (float("nan"), float("inf"), float("-inf")):
        def flat(queries, keys, values, source_padding_mask, value=value):
            return torch.full_like(queries, value)

        def flat_masks(target_padding_mask, source_padding_mask, value=value):
            batch_size, num_queries = target_padding_mask.shape
            num_keys = source_padding_mask.shape[1]
            return (torch.full((batch_size, num_keys, num_keys), value),
                    torch.full((batch_size, num_queries, num_queries), value),
                    torch.full((batch_size, num_queries, num_keys), value))
        assert lesson10.padded_heads.check(flat).status == "wrong"
        assert lesson10.decoder_masks.check(flat_masks).status == "wrong"


@pytest.mark.parametrize("exercise", [lesson10.decoder_masks, lesson10.padded_heads])
def test_hints_do_not_give_the_answer_away(exercise):
    for hint in exercise._hints:
        for giveaway in ("[:, None, :]", "last axis", "triu", "None, None"):
            assert giveaway not in hint


def test_decoder_masks_task_says_where_the_padding_sits():
    # Causal plus padding can hide a whole row (nan) only if padding could come first: the task rules that out.
    assert "end of each sequence" in lesson10.decoder_masks.task
