"""Notebook 10's exercises: right answers in any reasonable form pass, plausible wrong ones are named, and no hint
gives the answer away."""

import pytest
import torch

from helpers.exercises import lesson10
from helpers.masks import causal_mask
from helpers.modules import MultiHeadAttention


def test_the_buggy_code_does_not_name_its_bug():
    import inspect
    source = inspect.getsource(lesson10.cross_from_parts.buggy)
    assert "causal" not in source and "keep" not in source and "hide" not in source


def test_exports():
    assert lesson10.__all__ == ["decoder_masks", "cross_from_parts"]


# --- 1. the decoder's two masks -----------------------------------------------------------------------------------
def _masks_with_broadcast_to(target_pad, source_pad):
    batch_size, num_queries = target_pad.shape
    num_keys = source_pad.shape[1]
    self_mask = torch.broadcast_to(causal_mask(num_queries), (batch_size, num_queries, num_queries)) \
        | target_pad.unsqueeze(1)
    cross_mask = source_pad.unsqueeze(1).repeat(1, num_queries, 1)
    return self_mask, cross_mask


def _masks_by_comparison(target_pad, source_pad):
    num_queries, num_keys = target_pad.shape[1], source_pad.shape[1]
    rows = torch.arange(num_queries)
    future = rows[None, :] > rows[:, None]                              # key after query
    self_mask = future[None] | target_pad[:, None, :]
    cross_mask = source_pad[:, None, :] & torch.ones(1, num_queries, num_keys, dtype=torch.bool)
    return self_mask, cross_mask


@pytest.mark.parametrize("answer", [_masks_with_broadcast_to, _masks_by_comparison])
def test_decoder_masks_accepts_every_right_form(answer):
    assert lesson10.decoder_masks.check(answer).passed


def test_decoder_masks_rejects_broadcastable_but_unexpanded_masks():
    feedback = lesson10.decoder_masks.check(lambda t, s: (causal_mask(t.shape[1]) | t[:, None, :], s[:, None, :]))
    assert feedback.status == "wrong" and "shape" in feedback.message, feedback.message


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


# --- 2. spot the bug: a padding mask in PyTorch's True = take part convention ------------------------------------------------------------
def _cross_with_sdpa(module, x, source, source_padding_mask):
    import torch.nn.functional as F
    batch_size, num_queries, _ = x.shape

    def split(t):
        return t.unflatten(-1, (module.num_heads, module.head_dim)).transpose(1, 2)

    q, k, v = split(module.W_query(x)), split(module.W_key(source)), split(module.W_value(source))
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=~source_padding_mask[:, None, None, :])
    return module.out_proj(context.transpose(1, 2).flatten(2))


def test_spot_the_bug_accepts_another_right_form():
    assert lesson10.cross_from_parts.check(_cross_with_sdpa).passed


def test_spot_the_bug_names_the_bug_and_forbids_calling_a_cross_attention_module():
    from helpers.cross_attention import CrossAttention
    feedback = lesson10.cross_from_parts.check(lesson10.cross_from_parts.buggy)
    assert feedback.status == "wrong" and "take part" in feedback.message and "padding" in feedback.message

    def through_the_module(module, x, source, source_padding_mask):
        cross = CrossAttention(module.d_in, module.d_out, 0.0, module.num_heads)
        cross.load_state_dict(module.state_dict(), strict=False)
        return cross(x, source, source_padding_mask)
    feedback = lesson10.cross_from_parts.check(through_the_module)
    assert feedback.status == "wrong" and "from the module's parts" in feedback.message, feedback.message


def test_the_buggy_code_inverts_the_padding_mask():
    """The bug is PyTorch's True = take part convention passed to the course's True = hide function."""
    import inspect
    source = inspect.getsource(lesson10.cross_from_parts.buggy)
    assert "~source_padding_mask" in source and "module.mask" not in source


def test_spot_the_bug_names_a_causal_mask_carried_over():
    from helpers.attention import scaled_dot_product_attention

    def causal_kept(module, x, source, source_padding_mask):
        split = lambda t: t.unflatten(-1, (module.num_heads, module.head_dim)).transpose(1, 2)
        mask = module.mask[:x.shape[1], :source.shape[1]].bool() | source_padding_mask[:, None, None, :]
        context, _ = scaled_dot_product_attention(split(module.W_query(x)), split(module.W_key(source)),
                                                  split(module.W_value(source)), mask=mask)
        return module.out_proj(context.transpose(1, 2).flatten(2))
    feedback = lesson10.cross_from_parts.check(causal_kept)
    assert feedback.status == "wrong" and "causal" in feedback.message, feedback.message


def test_spot_the_bug_rejects_queries_from_the_source():
    def swapped(module, x, source, source_padding_mask):
        return _cross_with_sdpa(module, source, x, source_padding_mask)
    assert lesson10.cross_from_parts.check(swapped).status == "wrong"


def test_the_bug_matters_on_the_lessons_task():
    """With the inverted mask, the number-words model reads only padding: almost every word comes out wrong."""
    from helpers.number_words import NumberWordsTask, train_number_words
    task = NumberWordsTask()
    test_ids, _ = task.sample(200, torch.Generator().manual_seed(2), held_out=True)
    test_ids = test_ids[task.source_padding_mask(test_ids).any(dim=-1)]     # sources with some padding
    model = train_number_words(task, test_ids=test_ids, num_steps=150, seed=0).model
    source = model.digit_embedding(test_ids) + model.source_position.weight
    x = model.output_position.weight.expand(len(test_ids), -1, -1)
    pad = task.source_padding_mask(test_ids)
    layer = MultiHeadAttention(32, 32, task.num_keys, 0.0, 2)          # notebook 06's layer, the trained weights
    layer.load_state_dict(model.cross_attention.state_dict(), strict=False)
    with torch.no_grad():
        right = model.unembed(lesson10.cross_from_parts._solution(layer, x, source, pad))
        buggy = model.unembed(lesson10.cross_from_parts.buggy(layer, x, source, pad))
    targets = task.targets(test_ids)
    real = targets != task.ignore_id
    assert (right.argmax(-1) == targets)[real].float().mean() == 1.0
    assert (buggy.argmax(-1) == targets)[real].float().mean() < 0.2


@pytest.mark.parametrize("exercise", [lesson10.decoder_masks, lesson10.cross_from_parts])
def test_hints_do_not_give_the_answer_away(exercise):
    for hint in exercise._hints:
        for giveaway in ("[:, None, :]", "last axis", "triu", "None, None"):
            assert giveaway not in hint
