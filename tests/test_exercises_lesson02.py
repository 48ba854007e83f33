"""Notebook 02's exercises: stated instructions are checked, hints do not give the answer, right answers in any
reasonable form pass, and the notebook's pre-filled buggy code is the exercise's own."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import helpers
from helpers.exercises import SpotTheBug, lesson02

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_softmax_and_context_vectors.ipynb"


def test_the_notebook_offers_an_exercise_to_write_and_a_spot_the_bug():
    assert lesson02.__all__ == ["stable_softmax", "attention_any_shape"]
    assert not isinstance(lesson02.stable_softmax, SpotTheBug)
    assert isinstance(lesson02.attention_any_shape, SpotTheBug)


@pytest.mark.parametrize("call", [
    lambda s: torch.softmax(s, dim=-1),
    lambda s: F.softmax(s, dim=-1),
    lambda s: s.softmax(dim=-1),
    lambda s: torch.special.softmax(s, dim=-1),
    lambda s: helpers.softmax_stable(s),
    lambda s: helpers.attention.softmax_stable(s),
])
def test_stable_softmax_rejects_every_softmax_call(call):
    feedback = lesson02.stable_softmax.check(call)
    assert not feedback and "no built-in softmax" in feedback.message


@pytest.mark.parametrize("call", [
    lambda s: torch.log_softmax(s, dim=-1).exp(),                              # issue 34: a log-softmax, undone
    lambda s: s.log_softmax(dim=-1).exp(),
    lambda s: F.log_softmax(s, dim=-1).exp(),
    lambda s: torch.special.log_softmax(s, dim=-1).exp(),
    lambda s: torch.exp(s - torch.logsumexp(s, dim=-1, keepdim=True)),          # the normaliser, shift built in
    lambda s: (s - s.logsumexp(dim=-1, keepdim=True)).exp(),
    lambda s: F.softmin(-s, dim=-1),
    lambda s: torch.nn.Softmax(dim=-1)(s),
    lambda s: torch._safe_softmax(s, -1),
])
def test_stable_softmax_rejects_every_function_of_the_softmax_family(call):
    """Issue 34: "without any built-in softmax" is a class, not a list: log_softmax, softmin, logsumexp and a
    module wrapping them are all the built-in doing the work."""
    feedback = lesson02.stable_softmax.check(call)
    assert not feedback and "no built-in softmax" in feedback.message, feedback.message


def _row_max_guarded(scores):
    row_max = scores.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).min)  # -inf -> finite
    exps = (scores - row_max).exp()
    return exps / exps.sum(dim=-1, keepdim=True).clamp_min(1e-30)


def _nan_to_zero_afterwards(scores):
    exps = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
    return torch.nan_to_num(exps / exps.sum(dim=-1, keepdim=True), nan=0.0)


def test_stable_softmax_accepts_other_ways_to_shift_and_to_guard_a_hidden_row():
    for right in (lesson02._solution_stable_softmax, _row_max_guarded, _nan_to_zero_afterwards):
        feedback = lesson02.stable_softmax.check(right)
        assert feedback, feedback.message


def test_stable_softmax_needs_something_the_lesson_did_not_show_and_names_it():
    """Issue 34: the exercise copied section 2. A row with every key hidden is new: the plain shift gives nan."""
    hidden = [c.args[0] for c in lesson02.stable_softmax.cases(torch.Generator().manual_seed(0))
              if bool(torch.isneginf(c.args[0]).all(dim=-1).any())]
    assert hidden, "a case with a row of -inf"
    torch.testing.assert_close(lesson02._reference_softmax(hidden[0]), torch._safe_softmax(hidden[0], -1))
    assert torch.isnan(torch.softmax(hidden[0], dim=-1)).any()
    feedback = lesson02.stable_softmax.check(lesson02._shift_without_guard)
    assert not feedback and "all -inf" in feedback.message and "nan" in feedback.message


def test_the_reference_softmax_is_pytorchs_where_a_key_is_visible():
    g = torch.Generator().manual_seed(3)
    for case in lesson02.stable_softmax.cases(g):
        scores = case.args[0]
        visible = ~torch.isneginf(scores).all(dim=-1)
        torch.testing.assert_close(lesson02._reference_softmax(scores)[visible], torch.softmax(scores, -1)[visible])
        torch.testing.assert_close(lesson02._reference_softmax(scores), torch._safe_softmax(scores, -1))


def test_stable_softmax_cannot_be_copied_from_a_printed_source():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    printed = "".join("".join(o.get("text", "")) for c in cells if c["cell_type"] == "code" for o in c["outputs"])
    code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "def softmax_stable" not in printed and "show_source" not in code and "getsource" not in code
    for shift in ("max(dim=-1, keepdim=True)", "amax(dim=-1, keepdim=True)"):
        assert shift not in code, "the lesson's cells would show exercise 1's row-wise shift"


@pytest.mark.parametrize("shift, why", [
    (lambda s: s.mean(dim=-1, keepdim=True), "mean"),
    (lambda s: s.min(dim=-1, keepdim=True).values, "smaller than the row's maximum"),
    (lambda s: s[..., :1], "smaller than the row's maximum"),
    (lambda s: s.median(dim=-1, keepdim=True).values, "overflow"),  # not a named mistake: caught as nan
])
def test_stable_softmax_rejects_a_shift_by_anything_but_the_maximum(shift, why):
    """Issue 20: a softmax shifted by the row mean (or another number below the maximum) must not pass."""
    def shifted(scores):
        exps = torch.exp(scores - shift(scores))
        return exps / exps.sum(dim=-1, keepdim=True)

    feedback = lesson02.stable_softmax.check(shifted)
    assert not feedback and feedback.status == "wrong"
    assert why in feedback.message or "nan" in feedback.message


def test_stable_softmax_tries_large_very_negative_and_peaked_rows():
    rows = [c.args[0] for c in lesson02.stable_softmax.cases(torch.Generator().manual_seed(0))]
    assert any(bool((r > 500).any()) for r in rows)
    assert any(bool((r.amax(dim=-1) < -500).any()) for r in rows), "a row whose every score is very negative"
    assert any(bool(((r.amax(dim=-1) - r.mean(dim=-1)) > 90).any()) for r in rows if r.isfinite().all()), "peaked"

    def without_shift(scores):
        return torch.exp(scores) / torch.exp(scores).sum(dim=-1, keepdim=True)

    def mean_shift_in_float64(scores):  # float64 postpones the overflow; a hidden (-inf) entry still gives nan
        exps = torch.exp(scores.double() - scores.double().mean(dim=-1, keepdim=True))
        return (exps / exps.sum(dim=-1, keepdim=True)).float()

    for wrong in (without_shift, mean_shift_in_float64):
        assert lesson02.stable_softmax.check(wrong).status == "wrong"


def _right_attention(q, k, v):
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1]), dim=-1)
    return weights @ v, weights


def test_attention_buggy_code_is_right_while_the_queries_are_the_keys():
    """What the task claims: on sections 1-4's inputs (Q = K = V = X) the buggy code gives the right answer."""
    tokens, inputs = helpers.your_journey()
    for got, want in zip(lesson02.buggy_attention(inputs, inputs, inputs), _right_attention(inputs, inputs, inputs)):
        torch.testing.assert_close(got, want)
    queries, keys = torch.randn(2, 5), torch.randn(3, 5)
    with pytest.raises(RuntimeError):
        lesson02.buggy_attention(queries, keys, torch.randn(3, 1))


def test_attention_buggy_code_fails_silently_with_as_many_queries_as_keys():
    """What the task now asks for: inputs on which the code runs, its rows sum to 1, and its weights are wrong."""
    torch.manual_seed(0)
    queries, keys, values = torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 1)
    context, weights = lesson02.buggy_attention(queries, keys, values)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2))
    right_context, right_weights = _right_attention(queries, keys, values)
    assert weights.shape == right_weights.shape and not torch.allclose(weights, right_weights)
    assert not torch.allclose(context, right_context)


def _markdown(cells, start, stop=None):
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return text[text.index(start):text.index(stop) if stop else None]


def test_exercise_2_leaves_the_cause_and_the_exposing_inputs_to_the_hints(capsys, monkeypatch):
    """Fresh read 5: the task named both the cause (Q = K) and the input that exposes it (T_q != T_k), which the
    hints give; and with T_q != T_k the code crashes, so the silent case is the one to find."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    statement = _markdown(cells, "## Exercises", "### Exercise 1") + _markdown(cells, "### Exercise 2",
                                                                                "## Deep dives")
    for giveaway in ("Q = K", "T_q \\ne T_k", "T_q \\neq T_k", "same vectors"):
        assert giveaway not in statement, giveaway
    assert "on which it runs and still\ngives wrong weights" in statement
    assert "on which it runs and still gives wrong weights" in lesson02.attention_any_shape.task
    monkeypatch.setattr(lesson02.attention_any_shape, "_hints_shown", 0)
    for _ in range(2):
        lesson02.attention_any_shape.hint()
    hints = capsys.readouterr().out
    assert "the same vectors" in hints and "2 queries and 3 keys" in hints and "2 queries and 2 keys" in hints


def test_exercise_1_shows_the_nan_it_asks_to_avoid_and_section_2_does_not():
    """Fresh read 5: the all -inf row is printed where it is needed, by the exercise cell's first line."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    cell = next(c for c in cells if c["cell_type"] == "code"
                and "lesson02.stable_softmax.check(" in "".join(c["source"]))
    first = "".join(cell["source"]).splitlines()[0]
    assert first.startswith("print(") and "torch.softmax(torch.full((3,), -math.inf)" in first
    printed = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    assert printed == "torch.softmax, every key hidden: tensor([nan, nan, nan])\n"
    section_2 = next(c for c in cells if c["cell_type"] == "code" and "largest_float" in "".join(c["source"]))
    assert "-math.inf" not in "".join(section_2["source"])
    assert "the cell's first line" in _markdown(cells, "### Exercise 1", "### Exercise 2")


def test_attention_accepts_right_answers_in_several_styles():
    def with_einsum(q, k, v):
        weights = torch.einsum("...id,...jd->...ij", q, k).div(math.sqrt(k.shape[-1])).softmax(dim=-1)
        return torch.einsum("...ij,...jd->...id", weights, v), weights

    def with_mT_and_rsqrt(q, k, v):
        weights = torch.softmax(q @ k.mT * k.shape[-1] ** -0.5, dim=-1)
        return (weights @ v, weights)

    def kept_k_q_then_turned(q, k, v):  # K Qᵀ, softmax over the keys (dim=-2), then turned round
        weights = torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-2).transpose(-2, -1)
        return weights @ v, weights

    for right in (with_einsum, with_mT_and_rsqrt, kept_k_q_then_turned):
        assert lesson02.attention_any_shape.check(right).passed, right.__name__


def test_attention_names_the_plausible_wrong_answers():
    def k_q_turned_after_a_softmax_over_queries(q, k, v):
        weights = torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1).transpose(-2, -1)
        return weights @ v, weights

    def mixes_keys(q, k, v):
        weights = _right_attention(q, k, v)[1]
        return weights @ k, weights

    def scaled_by_d_v(q, k, v):
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1]), dim=-1)
        return weights @ v, weights

    def plain_transpose(q, k, v):  # right for one sequence, an error for a batch
        weights = torch.softmax(q @ k.transpose(0, 1) / math.sqrt(k.shape[-1]), dim=-1)
        return weights @ v, weights

    def turned_only_for_the_product(q, k, v):  # mends the T_q != T_k crash, keeps the silent bug
        weights = torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        return weights.transpose(-2, -1) @ v, weights

    for wrong, says in ((lesson02.buggy_attention, "K Qᵀ"), (k_q_turned_after_a_softmax_over_queries, "each column"),
                        (mixes_keys, "mixed the keys"), (scaled_by_d_v, "d_v"), (plain_transpose, "raised"),
                        (turned_only_for_the_product, "makes the shapes fit"),
                        (lambda q, k, v: _right_attention(q, k, v)[0], "only the context vectors"),
                        (lambda q, k, v: list(_right_attention(q, k, v)), "tuple")):
        feedback = lesson02.attention_any_shape.check(wrong)
        assert not feedback and says in feedback.message, (says, feedback.message)


@pytest.mark.parametrize("library", [
    lambda q, k, v: (F.scaled_dot_product_attention(q, k, v), _right_attention(q, k, v)[1]),
    lambda q, k, v: helpers.scaled_dot_product_attention(q, k, v),
    lambda q, k, v: helpers.attention.scaled_dot_product_attention(q, k, v),
])
def test_attention_forbids_library_attention(library):
    feedback = lesson02.attention_any_shape.check(library)
    assert not feedback and "not to call" in feedback.message and "scaled_dot_product_attention" in feedback.message


def test_attention_tries_other_shapes_than_the_lesson():
    cases = lesson02.attention_any_shape.cases(torch.Generator().manual_seed(0))
    assert any(q.shape[-2] != k.shape[-2] for q, k, _ in (c.args for c in cases))
    assert any(v.shape[-1] != k.shape[-1] for _, k, v in (c.args for c in cases))
    assert any(q.dim() == 4 for q, _, _ in (c.args for c in cases))
    q, k, _ = cases[0].args
    assert q.shape == k.shape and not torch.equal(q, k), "the first case shows the bug by its values, not a crash"


def test_the_notebook_pre_fills_the_exercises_own_buggy_code():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    cell = next("".join(c["source"]) for c in cells
                if c["cell_type"] == "code" and "lesson02.attention_any_shape.check(" in "".join(c["source"]))
    body = [line for line in cell.splitlines()[2:] if line.strip() and "check(" not in line]
    buggy = inspect.getsource(lesson02.buggy_attention).splitlines()[1:]
    assert body == buggy


def test_hints_are_nudges_not_answers(capsys):
    for name in lesson02.__all__:
        for _ in range(3):
            getattr(lesson02, name).hint()
    shown = capsys.readouterr().out
    for answer in ("max(dim=-1, keepdim=True)", "keepdim=True", "queries @ keys", "keys.transpose(-2, -1)",
                   "attn_weights @", "sqrt(keys.shape[-1])", "Q Kᵀ", "cancels"):
        assert answer not in shown, answer


def test_the_notebook_states_only_what_is_checked():
    """Exercise texts state every rule (no built-in softmax, no library attention; the hard inputs) and not the fix."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "without any built-in softmax" in text and "without any library attention function" in text
    exercise_1 = text[text.index("### Exercise 1"):text.index("### Exercise 2")]
    assert "large" in exercise_1 and "very negative" in exercise_1 and "peaked" in exercise_1
    assert "watches" not in text and "the checker rejects" not in text
    assert "every score is `-inf`" in exercise_1 and "log_softmax" in exercise_1 and "logsumexp" in exercise_1
    rules = {name: getattr(lesson02, name).rules for name in lesson02.__all__}
    assert "helpers.softmax_stable" in rules["stable_softmax"][0].watch
    assert "torch.log_softmax" in rules["stable_softmax"][0].watch
    assert "torch.nn.functional.scaled_dot_product_attention" in rules["attention_any_shape"][0].watch
    exercise_2 = text[text.index("### Exercise 2"):]
    assert "T_q" in exercise_2 and "d_v" in exercise_2 and "?" in exercise_2


def test_attention_names_a_fixed_scale_from_the_notebook_not_a_wrong_formula():
    """Issue 34: dividing by a notebook global (section 5's scale = 4) is right where d_k = 16 and equals
    "divided by d_k" where d_k = 4; the message must name the global, not a formula the answer does not use."""
    namespace = {"torch": torch, "scale": 4.0}
    exec("def fixed_attention(queries, keys, values):\n"
         "    attn_weights = torch.softmax(queries @ keys.transpose(-2, -1) / scale, dim=-1)\n"
         "    return attn_weights @ values, attn_weights\n", namespace)
    feedback = lesson02.attention_any_shape.check(namespace["fixed_attention"])
    assert not feedback and "`scale`" in feedback.message, feedback.message
    assert "instead of its square root" not in feedback.message

    def divides_by_d_k(q, k, v):  # the mistake the message names: still named
        weights = torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1], dim=-1)
        return weights @ v, weights

    feedback = lesson02.attention_any_shape.check(divides_by_d_k)
    assert not feedback and "instead of its square root" in feedback.message
