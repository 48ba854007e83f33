"""Notebook 03's exercises: right answers in any reasonable form pass, plausible wrong ones are named."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from helpers.exercises import lesson03

EXERCISES = [lesson03.shapes, lesson03.query_key_matrix, lesson03.cross_attention]


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
    for answer in ("transpose(-2, -1)", "transpose(-1, -2)", "inputs @ W", "x_kv @ W_value", "(num_tokens, num_tokens)",
                   "mT", "keys.shape[-1]", "W_key.T", "W_k^T", "W_kᵀ", "W_q W_k", "@ W_key", "x_q @ W_value"):
        assert answer not in hints


# --- 1. shapes (cross-attention over a batch) --------------------------------------------------------
def test_shapes_accepts_torch_size_and_names_a_list():
    def with_sizes(*sizes):
        return tuple(torch.Size(s) for s in lesson03._solution_shapes(*sizes))
    assert lesson03.shapes.check(with_sizes).passed

    def as_lists(*sizes):
        return list(lesson03._solution_shapes(*sizes))
    feedback = lesson03.shapes.check(as_lists)
    assert not feedback and "tuple" in feedback.message


def _shapes(q, k, v, s, a, z):
    """A wrong answer built from size names: B, Tq, Tkv, d_in, d_k, d_v."""
    def answer(b, tq, tkv, d_in, d_k, d_v):
        sizes = {"B": b, "Tq": tq, "Tkv": tkv, "d_in": d_in, "d_k": d_k, "d_v": d_v}
        return tuple(tuple(sizes[n] for n in dims.split()) for dims in (q, k, v, s, a, z))
    return answer


@pytest.mark.parametrize("wrong, words", [
    (_shapes("B Tq d_k", "B Tkv d_k", "B Tkv d_v", "B Tq Tq", "B Tq Tq", "B Tq d_v"), "with each other"),
    (_shapes("B Tq d_k", "B Tkv d_k", "B Tkv d_v", "B Tkv Tq", "B Tkv Tq", "B Tq d_v"), "transposed"),
    (_shapes("B Tq d_k", "B Tq d_k", "B Tq d_v", "B Tq Tq", "B Tq Tq", "B Tq d_v"), "looked up"),
    (_shapes("B Tq d_k", "B Tkv d_k", "B Tkv d_v", "B Tq Tkv", "B Tq Tkv", "B Tkv d_v"), "who receives"),
    (_shapes("B Tq d_k", "B Tkv d_k", "B Tkv d_v", "B Tq Tkv", "B Tq Tkv", "B Tq d_k"), "width of the keys"),
    (_shapes("B Tq d_k", "B Tkv d_k", "B Tkv d_k", "B Tq Tkv", "B Tq Tkv", "B Tq d_k"), "own width"),
    (_shapes("Tq d_k", "Tkv d_k", "Tkv d_v", "Tq Tkv", "Tq Tkv", "Tq d_v"), "batch dimension"),
    (_shapes("d_in d_k", "d_in d_k", "d_in d_v", "B Tq Tkv", "B Tq Tkv", "B Tq d_v"), "weight matrix"),
])
def test_shapes_names_the_plausible_mistakes(wrong, words):
    feedback = lesson03.shapes.check(wrong)
    assert not feedback and words in feedback.message.lower(), feedback.message


def test_shapes_catches_swaps_that_only_show_when_sizes_differ():
    for wrong in (_shapes("B Tq d_k", "B Tkv d_v", "B Tkv d_v", "B Tq Tkv", "B Tq Tkv", "B Tq d_v"),
                  _shapes("B Tq d_k", "B Tkv d_k", "B Tkv d_v", "B Tq Tkv", "B Tq Tkv", "B Tq d_in"),
                  _shapes("Tq B d_k", "Tkv B d_k", "Tkv B d_v", "B Tq Tkv", "B Tq Tkv", "B Tq d_v")):
        assert not lesson03.shapes.check(wrong)


# --- 2. one matrix behind the scores ----------------------------------------------------------------------
def test_query_key_matrix_gives_the_lesson_scores():
    """W_qk from the model answer reproduces S / sqrt(d_k) of the lesson's journey example, and is not symmetric."""
    import helpers
    _, inputs = helpers.your_journey()
    torch.manual_seed(123)
    W_query, W_key = torch.rand(3, 2), torch.rand(3, 2)
    W_qk = lesson03._solution_query_key_matrix(W_query, W_key)
    assert W_qk.shape == (3, 3) and not torch.allclose(W_qk, W_qk.T)
    torch.testing.assert_close(inputs @ W_qk @ inputs.T, (inputs @ W_query) @ (inputs @ W_key).T / math.sqrt(2))


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


# --- 3. cross-attention
# (reading a notebook global is tested once, in tests/test_exercises.py)


def test_cross_attention_text_does_not_point_at_the_bug():
    task = lesson03.cross_attention.task
    for giveaway in ("same length", "lengths differ", "different length", "x_q @ W_value", "values"):
        assert giveaway not in task.replace("keys and values", ""), giveaway


def test_cross_attention_bug_is_named():
    feedback = lesson03.cross_attention.check(lesson03.buggy_cross_attention)
    assert not feedback and "different lengths" in feedback.message


@pytest.mark.parametrize("wrong, words", [
    (lambda xq, xkv, wq, wk, wv: lesson03._reference_cross(xq, xq, wq, wk, wv), "values"),
    (lambda xq, xkv, wq, wk, wv: lesson03._reference_cross(xkv, xkv, wq, wk, wv), "self-attention over x_kv"),
    (lambda xq, xkv, wq, wk, wv: lesson03._reference_cross(xq, xkv, wq, wk, wk), "shape"),
])
def test_cross_attention_rejects_self_attention_in_disguise(wrong, words):
    feedback = lesson03.cross_attention.check(wrong)
    assert not feedback
    assert words in feedback.message or "values are not" in feedback.message, feedback.message


def test_the_notebook_cell_holds_the_same_buggy_code():
    """Exercise 3 gives the buggy code in an editable cell: it must be the bug the checker knows."""
    import inspect
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).parents[1] / "notebooks" / "03_trainable_qkv.ipynb").read_text())
    cell = next("".join(c["source"]) for c in nb["cells"]
                if c["cell_type"] == "code" and "lesson03.cross_attention.check(" in "".join(c["source"]))
    body = [line.strip() for line in cell.splitlines()[1:] if line.startswith("    ") and "raise" not in line]
    buggy = [line.strip() for line in inspect.getsource(lesson03.buggy_cross_attention).splitlines()[1:]]
    assert body == buggy
