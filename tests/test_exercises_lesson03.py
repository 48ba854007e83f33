"""Notebook 03's exercises: right answers in any reasonable form pass, plausible wrong ones are named."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from helpers.exercises import lesson03

EXERCISES = [lesson03.query_key_matrix, lesson03.gpt2_weights]


def placeholder(*args):
    raise NotImplementedError


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.title)
def test_model_answer_passes_and_placeholder_is_not_done(exercise):
    assert exercise.check(exercise._solution).passed
    feedback = exercise.check(placeholder)
    assert feedback.status == "not done" and "not done yet" in feedback.message


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.title)
def test_hints_do_not_hold_the_answer(exercise):
    hints = " ".join(exercise._hints)
    for answer in ("transpose(", "inputs @ W", ".mT", "keys.shape[-1]", "W_key.T", "W_k^T", "W_kᵀ", "W_q W_k",
                   "@ W_key", ".T)", ".T\n", ".t()", "permute", "copy_(W_query.", "split(d_out"):
        assert answer not in hints


# --- 1. one matrix behind the scores ----------------------------------------------------------------------
def test_query_key_matrix_gives_the_lesson_scores():
    """W_QK from the model answer reproduces S / sqrt(d_k) of the lesson's journey example, and is not symmetric."""
    import helpers
    _, inputs = helpers.your_journey()
    torch.manual_seed(123)
    W_query, W_key = torch.rand(3, 2), torch.rand(3, 2)
    W_QK = lesson03._solution_query_key_matrix(W_query, W_key)
    assert W_QK.shape == (3, 3) and not torch.allclose(W_QK, W_QK.T)
    torch.testing.assert_close(inputs @ W_QK @ inputs.T, (inputs @ W_query) @ (inputs @ W_key).T / math.sqrt(2))


def test_query_key_matrix_accepts_other_right_forms():
    forms = [
        lambda W_query, W_key: torch.mm(W_query, W_key.t()) / W_key.shape[1] ** 0.5,
        lambda W_query, W_key: torch.einsum("ik,jk->ij", W_query, W_key) / math.sqrt(W_key.size(-1)),
        lambda W_query, W_key: (W_query / math.sqrt(W_query.shape[-1])) @ W_key.mT,
        lambda W_query, W_key: (W_key @ W_query.T).T * W_key.shape[1] ** -0.5,
    ]
    for form in forms:
        assert lesson03.query_key_matrix.check(form).passed


@pytest.mark.parametrize("wrong, words", [
    (lambda wq, wk: wq @ wk.T, "scaled scores"),
    (lambda wq, wk: wk @ wq.T / math.sqrt(wk.shape[1]), "transpose"),
    (lambda wq, wk: wq.T @ wk / math.sqrt(wk.shape[1]), "(d_k, d_k)"),
    (lambda wq, wk: wq @ wk.T / math.sqrt(wq.shape[0]), "sqrt(d_in)"),
    (lambda wq, wk: wq @ wk.T / wk.shape[1], "square root"),
    (lambda wq, wk: wq @ wq.T / math.sqrt(wk.shape[1]), None),  # queries compared with queries: wrong values
    (lambda wq, wk: torch.eye(wq.shape[0]), None),
])
def test_query_key_matrix_rejects_plausible_wrong_answers(wrong, words):
    feedback = lesson03.query_key_matrix.check(wrong)
    assert not feedback
    if words:
        assert words in feedback.message, feedback.message


def test_query_key_matrix_names_a_matmul_that_cannot_run():
    feedback = lesson03.query_key_matrix.check(lambda W_query, W_key: W_query @ W_key)
    assert not feedback and "raised" in feedback.message


# --- 2. spot the bug: loading GPT-2's weights ----------------------------------------------------------------
import helpers  # noqa: E402
from torch import nn  # noqa: E402

GPT2 = lesson03.gpt2_weights


def _sizes(c_attn_weight):
    return c_attn_weight.shape[0], c_attn_weight.shape[1] // 3


def _transpose_first(x, c_attn_weight):
    """Right: transpose the whole matrix once, then cut its rows into three (d_out, d_in) weights."""
    d_in, d_out = _sizes(c_attn_weight)
    attention = lesson03.SelfAttention_v2(d_in, d_out)
    with torch.no_grad():
        for layer, block in zip((attention.W_query, attention.W_key, attention.W_value),
                                c_attn_weight.T.split(d_out, dim=0)):
            layer.weight.copy_(block)
    return attention(x).detach()


def _assign_parameters(x, c_attn_weight):
    """Right: Raschka's chapter-5 style, new nn.Parameter objects from chunks of the last dimension."""
    d_in, d_out = _sizes(c_attn_weight)
    attention = lesson03.SelfAttention_v2(d_in, d_out)
    q_w, k_w, v_w = torch.chunk(c_attn_weight, 3, dim=-1)
    attention.W_query.weight = nn.Parameter(q_w.t().contiguous())
    attention.W_key.weight = nn.Parameter(k_w.t().contiguous())
    attention.W_value.weight = nn.Parameter(v_w.t().contiguous())
    return attention(x)


def _no_module(x, c_attn_weight):
    """Right: no module at all, the course's function on the three projections."""
    queries, keys, values = (x @ c_attn_weight).chunk(3, dim=-1)
    return helpers.scaled_dot_product_attention(queries, keys, values)[0]


def _own_stable_softmax(x, c_attn_weight):
    """Right: everything by hand, with a softmax that subtracts the row maximum."""
    d_out = c_attn_weight.shape[1] // 3
    queries, keys, values = (x @ c_attn_weight[:, i * d_out:(i + 1) * d_out] for i in range(3))
    scores = queries @ keys.T / math.sqrt(d_out)
    exps = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
    return exps / exps.sum(dim=-1, keepdim=True) @ values


def _functional_linear(x, c_attn_weight):
    """Right: F.linear takes a (d_out, d_in) weight, as nn.Linear stores it."""
    W_query, W_key, W_value = c_attn_weight.split(c_attn_weight.shape[1] // 3, dim=1)
    project = [torch.nn.functional.linear(x, w.mT) for w in (W_query, W_key, W_value)]
    return torch.nn.functional.scaled_dot_product_attention(*(p.unsqueeze(0) for p in project))[0]


@pytest.mark.parametrize("right", [lesson03._solution_gpt2_self_attention, _transpose_first, _assign_parameters,
                                   _no_module, _own_stable_softmax, _functional_linear])
def test_gpt2_weights_accepts_right_answers_in_several_styles(right):
    feedback = GPT2.check(right)
    assert feedback.passed, feedback.message


def _reshaped_not_transposed(x, c_attn_weight):
    d_in, d_out = _sizes(c_attn_weight)
    attention = lesson03.SelfAttention_v2(d_in, d_out)
    with torch.no_grad():
        for layer, block in zip((attention.W_query, attention.W_key, attention.W_value),
                                c_attn_weight.split(d_out, dim=1)):
            layer.weight.copy_(block.reshape(d_out, d_in))
        return attention(x)


def _transposed_twice(x, c_attn_weight):
    d_in, d_out = _sizes(c_attn_weight)
    attention = lesson03.SelfAttention_v2(d_in, d_out)
    with torch.no_grad():
        for layer, block in zip((attention.W_query, attention.W_key, attention.W_value),
                                c_attn_weight.T.split(d_out, dim=0)):
            layer.weight.copy_(block.T)
        return attention(x)


def _swapped_query_key(x, c_attn_weight):
    W_key, W_query, W_value = c_attn_weight.split(c_attn_weight.shape[1] // 3, dim=1)
    return helpers.scaled_dot_product_attention(x @ W_query, x @ W_key, x @ W_value)[0]


def _cut_rows(x, c_attn_weight):
    d_in, d_out = _sizes(c_attn_weight)
    W_query, W_key, W_value = c_attn_weight.view(3, d_in, d_out)
    return helpers.scaled_dot_product_attention(x @ W_query, x @ W_key, x @ W_value)[0]


def _keys_from_query_block(x, c_attn_weight):
    W_query, _, W_value = c_attn_weight.split(c_attn_weight.shape[1] // 3, dim=1)
    return helpers.scaled_dot_product_attention(x @ W_query, x @ W_query, x @ W_value)[0]


def _naive_softmax(x, c_attn_weight):
    queries, keys, values = (x @ c_attn_weight).chunk(3, dim=-1)
    exps = torch.exp(queries @ keys.T / math.sqrt(keys.shape[-1]))  # overflows once the scores are large
    return exps / exps.sum(dim=-1, keepdim=True) @ values


def _softmax_over_queries(x, c_attn_weight):
    queries, keys, values = (x @ c_attn_weight).chunk(3, dim=-1)
    return torch.softmax(queries @ keys.T / math.sqrt(keys.shape[-1]), dim=0) @ values


def _unscaled(x, c_attn_weight):
    queries, keys, values = (x @ c_attn_weight).chunk(3, dim=-1)
    return torch.softmax(queries @ keys.T, dim=-1) @ values


def _causal_like_gpt2(x, c_attn_weight):
    """Wrong here: GPT-2 masks the future, but the task asks for one SelfAttention_v2, which does not."""
    queries, keys, values = (x @ c_attn_weight).chunk(3, dim=-1)
    num_tokens = x.shape[0]
    mask = torch.triu(torch.ones(num_tokens, num_tokens), diagonal=1).bool()
    scores = (queries @ keys.T / math.sqrt(keys.shape[-1])).masked_fill(mask, -torch.inf)
    return torch.softmax(scores, dim=-1) @ values


def _wrong_split_axis(x, c_attn_weight):
    W_query, W_key, W_value = c_attn_weight.chunk(3, dim=0)
    return helpers.scaled_dot_product_attention(x @ W_query, x @ W_key, x @ W_value)[0]


@pytest.mark.parametrize("wrong, words", [
    (lesson03.buggy_gpt2_self_attention, "still has the bug"),
    (_reshaped_not_transposed, "reshape or view of a square block"),
    (_transposed_twice, "still has the bug"),
    (_swapped_query_key, "swapped"),
    (_cut_rows, "reading order"),
    (_keys_from_query_block, "keys are made with W_q"),
    (_naive_softmax, "nan"),
    (_softmax_over_queries, "values are not"),
    (_unscaled, "values are not"),
    (_causal_like_gpt2, "causal attention"),
    (_wrong_split_axis, "raised"),
])
def test_gpt2_weights_names_each_wrong_answer(wrong, words):
    feedback = GPT2.check(wrong)
    assert not feedback and words in feedback.message, feedback.message


def test_gpt2_weights_has_a_square_case_first_and_a_sharply_peaked_one():
    cases = GPT2.cases(torch.Generator().manual_seed(GPT2.seed))
    x, c_attn_weight = cases[0].args
    assert c_attn_weight.shape[0] == c_attn_weight.shape[1] // 3  # the buggy code runs only where d_in = d_out
    assert any(c.args[1].shape[0] != c.args[1].shape[1] // 3 for c in cases)
    peaked = [lesson03._reference_gpt2(*c.args) for c in cases]
    largest = max(torch.softmax((c.args[0] @ c.args[1]).chunk(3, -1)[0] @ (c.args[0] @ c.args[1]).chunk(3, -1)[1].T
                                / math.sqrt(c.args[1].shape[1] // 3), dim=-1).max(dim=-1).values.min().item()
                  for c in cases)
    assert largest > 0.999 and all(torch.isfinite(p).all() for p in peaked)


def test_the_exercise_texts_use_the_card_names():
    """The notation card calls W_q W_kᵀ / sqrt(d_k) W_QK; exercise 2 says its weights only share GPT-2's layout."""
    assert "W_QK" in lesson03.query_key_matrix.task and "W_qk" not in lesson03.query_key_matrix.task
    assert all("W_qk" not in m.message for m in lesson03.query_key_matrix.mistakes)
    assert "small random weights" in GPT2.task and "attn.c_attn.weight" in GPT2.task


def test_gpt2_weights_task_does_not_point_at_the_bug():
    for giveaway in ("transpose", ".T", "(d_out, d_in)", "wrong way round", "nn.Linear keeps"):
        assert giveaway not in GPT2.task, giveaway


def test_the_notebook_cell_holds_the_same_buggy_code():
    """Exercise 2 gives the buggy code in an editable cell: it must be the bug the checker knows."""
    import inspect
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).parents[1] / "notebooks" / "03_trainable_qkv.ipynb").read_text())
    cell = next("".join(c["source"]) for c in nb["cells"]
                if c["cell_type"] == "code" and "lesson03.gpt2_weights.check(" in "".join(c["source"]))
    body = [line.strip() for line in cell.splitlines()[1:] if line.startswith("    ") and "raise" not in line]
    buggy = [line.strip() for line in inspect.getsource(lesson03.buggy_gpt2_self_attention).splitlines()[1:]]
    assert body == buggy


# --- both exercises: answers holding inf or nan are explained, never crash the checker -------------------------
@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.title)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_an_answer_full_of_inf_or_nan_gets_feedback(exercise, bad):
    def answer(*args):
        right = exercise._solution(*args)
        return torch.full_like(right, bad)
    feedback = exercise.check(answer)
    assert feedback.status == "wrong" and feedback.message


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.title)
def test_an_answer_with_one_inf_gets_feedback(exercise):
    def answer(*args):
        right = exercise._solution(*args).clone()
        right.view(-1)[0] = float("inf")
        return right
    feedback = exercise.check(answer)
    assert feedback.status == "wrong" and feedback.message
