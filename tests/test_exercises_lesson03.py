"""Notebook 03's exercises: right answers in any reasonable form pass, plausible wrong ones are named."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from helpers.exercises import lesson03

EXERCISES = [lesson03.shapes, lesson03.self_attention, lesson03.cross_attention]


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
                   "mT", "keys.shape[-1]"):
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


def test_self_attention_rejects_a_loop_over_tokens_even_with_right_values():
    def looped(inputs, W_query, W_key, W_value):
        rows = [lesson03._solution_self_attention(x.unsqueeze(-2), W_query, W_key, W_value) for x in inputs]
        return lesson03._solution_self_attention(inputs, W_query, W_key, W_value) if rows else None
    feedback = lesson03.self_attention.check(looped)
    assert not feedback and "loop" in feedback.message


# --- 3. self-attention ----------------------------------------------------------------------------------
def test_self_attention_dot_T_is_not_enough_for_a_batch():
    def dot_t(inputs, W_query, W_key, W_value):
        queries, keys, values = inputs @ W_query, inputs @ W_key, inputs @ W_value
        return torch.softmax(queries @ keys.T / math.sqrt(keys.shape[-1]), dim=-1) @ values
    with warnings.catch_warnings():  # `.T` on a 3-d tensor warns in some torch versions
        warnings.simplefilter("ignore")
        feedback = lesson03.self_attention.check(dot_t)
    assert not feedback and "batch" in feedback.message


def test_self_attention_accepts_other_right_forms():
    def with_mT(inputs, W_query, W_key, W_value):
        queries, keys, values = inputs @ W_query, inputs @ W_key, inputs @ W_value
        attn_weights = (queries @ keys.mT / keys.shape[-1] ** 0.5).softmax(dim=-1)
        return attn_weights @ values
    assert lesson03.self_attention.check(with_mT).passed

    def with_einsum(inputs, W_query, W_key, W_value):
        queries, keys, values = inputs @ W_query, inputs @ W_key, inputs @ W_value
        attn_scores = torch.einsum("...qd,...kd->...qk", queries, keys)
        return torch.nn.functional.softmax(attn_scores / math.sqrt(keys.shape[-1]), dim=-1) @ values
    assert lesson03.self_attention.check(with_einsum).passed


def test_self_attention_forbids_ready_made_attention():
    def ready_made(inputs, W_query, W_key, W_value):
        return torch.nn.functional.scaled_dot_product_attention(inputs @ W_query, inputs @ W_key, inputs @ W_value)
    feedback = lesson03.self_attention.check(ready_made)
    assert not feedback and "scaled_dot_product_attention" in feedback.message

    import helpers

    def course_version(inputs, W_query, W_key, W_value):
        return helpers.scaled_dot_product_attention(inputs @ W_query, inputs @ W_key, inputs @ W_value)[0]
    feedback = lesson03.self_attention.check(course_version)
    assert not feedback and "scaled_dot_product_attention" in feedback.message


def test_self_attention_rejects_a_loop_over_the_batch():
    def per_sequence(inputs, W_query, W_key, W_value):
        if inputs.dim() == 2:
            return lesson03._solution_self_attention(inputs, W_query, W_key, W_value)
        return torch.stack([lesson03._solution_self_attention(x, W_query, W_key, W_value) for x in inputs])
    feedback = lesson03.self_attention.check(per_sequence)
    assert not feedback and "loop" in feedback.message


def test_self_attention_names_softmax_over_queries_in_a_batch():
    def over_dim_1(inputs, W_query, W_key, W_value):
        queries, keys, values = inputs @ W_query, inputs @ W_key, inputs @ W_value
        return torch.softmax(queries @ keys.transpose(-2, -1) / math.sqrt(keys.shape[-1]), dim=1) @ values
    feedback = lesson03.self_attention.check(over_dim_1)
    assert not feedback and "dim=1" in feedback.message and "batch" in feedback.message


leftover = torch.ones(6, 6) / 6  # a global a learner's function might read by accident


def test_reading_a_notebook_global_is_named():
    def reads_global(inputs, W_query, W_key, W_value):
        values = inputs @ W_value
        return leftover @ values
    feedback = lesson03.self_attention.check(reads_global)
    assert "`leftover`" in feedback.message and "global" in feedback.message


# --- 4. cross-attention -------------------------------------------------------------------------------
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
