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


def test_the_notebook_offers_two_exercises_to_write_and_a_spot_the_bug():
    assert lesson02.__all__ == ["stable_softmax", "scaled_attention", "weights_at_temperature"]
    assert not isinstance(lesson02.stable_softmax, SpotTheBug)
    assert not isinstance(lesson02.scaled_attention, SpotTheBug)
    assert isinstance(lesson02.weights_at_temperature, SpotTheBug)


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
    assert not feedback and "not to call" in feedback.message


def test_stable_softmax_accepts_other_ways_to_shift():
    def with_logsumexp(scores):
        return torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))

    def with_amax(scores):
        exps = (scores - scores.amax(dim=-1, keepdim=True)).exp()
        return exps / exps.sum(dim=-1, keepdim=True)

    assert lesson02.stable_softmax.check(with_logsumexp).passed
    assert lesson02.stable_softmax.check(with_amax).passed


def test_stable_softmax_cannot_be_copied_from_a_printed_source():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    printed = "".join("".join(o.get("text", "")) for c in cells if c["cell_type"] == "code" for o in c["outputs"])
    code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "def softmax_stable" not in printed and "show_source" not in code and "getsource" not in code
    for shift in ("max(dim=-1, keepdim=True)", "amax(dim=-1, keepdim=True)"):
        assert shift not in code, "the lesson's cells would show exercise 1's row-wise shift"


def _weights(q, k):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1]), dim=-1)


def test_scaled_attention_accepts_batched_forms_written_by_hand():
    def with_einsum(q, k, v):
        weights = torch.einsum("...id,...jd->...ij", q, k).div(math.sqrt(k.shape[-1])).softmax(dim=-1)
        return torch.einsum("...ij,...jd->...id", weights, v), weights

    def with_mT_and_rsqrt(q, k, v):
        weights = torch.softmax(q @ k.mT * k.shape[-1] ** -0.5, dim=-1)
        return (weights @ v, weights)

    assert lesson02.scaled_attention.check(with_einsum).passed
    assert lesson02.scaled_attention.check(with_mT_and_rsqrt).passed


def test_scaled_attention_checks_both_results_and_their_packing():
    def context_only(q, k, v):
        return _weights(q, k) @ v

    def as_list(q, k, v):
        return [_weights(q, k) @ v, _weights(q, k)]

    def weights_first(q, k, v):
        return _weights(q, k), _weights(q, k) @ v

    def scores_for_weights(q, k, v):
        scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        return torch.softmax(scores, dim=-1) @ v, scores

    def weights_over_the_queries(q, k, v):
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1]), dim=-2)
        return weights @ v, weights

    feedback = lesson02.scaled_attention.check(context_only)
    assert not feedback and "only the context vectors" in feedback.message
    feedback = lesson02.scaled_attention.check(as_list)
    assert not feedback and "tuple" in feedback.message
    feedback = lesson02.scaled_attention.check(weights_first)
    assert not feedback and "weights first" in feedback.message
    feedback = lesson02.scaled_attention.check(scores_for_weights)
    assert not feedback and "scores, not the weights" in feedback.message
    feedback = lesson02.scaled_attention.check(weights_over_the_queries)
    assert not feedback and "dim=-2" in feedback.message


@pytest.mark.parametrize("library", [
    lambda q, k, v: (F.scaled_dot_product_attention(q, k, v), _weights(q, k)),
    lambda q, k, v: helpers.scaled_dot_product_attention(q, k, v),
    lambda q, k, v: helpers.attention.scaled_dot_product_attention(q, k, v),
])
def test_scaled_attention_forbids_library_attention(library):
    feedback = lesson02.scaled_attention.check(library)
    assert not feedback and "not to call" in feedback.message and "scaled_dot_product_attention" in feedback.message


def test_scaled_attention_tries_different_numbers_of_queries_and_keys():
    cases = lesson02.scaled_attention.cases(torch.Generator().manual_seed(0))
    assert any(q.shape[-2] != k.shape[-2] for q, k, _ in (c.args for c in cases))
    assert any(v.shape[-1] != k.shape[-1] for _, k, v in (c.args for c in cases))
    assert any(q.dim() == 4 for q, _, _ in (c.args for c in cases))

    def with_plain_transpose(q, k, v):  # right for one sequence, an error for a batch
        weights = torch.softmax(q @ k.transpose(0, 1) / math.sqrt(k.shape[-1]), dim=-1)
        return weights @ v, weights

    feedback = lesson02.scaled_attention.check(with_plain_transpose)
    assert not feedback and "raised" in feedback.message


def test_weights_at_temperature_buggy_code_ignores_the_temperature():
    scores = torch.tensor([[0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]])
    buggy = lesson02.buggy_weights_at_temperature
    torch.testing.assert_close(buggy(scores, 0.1), buggy(scores, 10.0))
    torch.testing.assert_close(buggy(scores, 1.0), torch.softmax(scores, dim=-1))


def test_weights_at_temperature_accepts_other_right_forms():
    def sharpened_weights(attn_scores, temperature):
        weights = torch.softmax(attn_scores, dim=-1) ** (1 / temperature)
        return weights / weights.sum(dim=-1, keepdim=True)

    def by_hand(attn_scores, temperature):
        scaled = attn_scores / temperature
        exps = torch.exp(scaled - scaled.amax(dim=-1, keepdim=True))
        return exps / exps.sum(dim=-1, keepdim=True)

    assert lesson02.weights_at_temperature.check(sharpened_weights).passed
    assert lesson02.weights_at_temperature.check(by_hand).passed


def test_the_notebook_pre_fills_the_exercises_own_buggy_code():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    cell = next("".join(c["source"]) for c in cells
                if c["cell_type"] == "code" and "lesson02.weights_at_temperature.check(" in "".join(c["source"]))
    body = [line for line in cell.splitlines()[2:] if line.strip() and "check(" not in line]
    buggy = inspect.getsource(lesson02.buggy_weights_at_temperature).splitlines()[1:]
    assert body == buggy


def test_hints_are_nudges_not_answers(capsys):
    for name in lesson02.__all__:
        for _ in range(3):
            getattr(lesson02, name).hint()
    shown = capsys.readouterr().out
    for answer in ("max(dim=-1, keepdim=True)", "keepdim=True", "keys.transpose(-2, -1)", "transpose(-2, -1)",
                   "attn_weights @", "sqrt(keys.shape[-1])", "attn_scores / temperature", "scores / temperature",
                   "cancels"):
        assert answer not in shown, answer


def test_the_notebook_states_only_what_is_checked():
    """Exercise texts speak of built-in softmax / library attention (both forbidden by a rule), not checker internals."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "without any built-in softmax" in text and "without any library attention function" in text
    assert "watches" not in text and "the checker rejects" not in text
    rules = {name: getattr(lesson02, name).rules for name in ("stable_softmax", "scaled_attention")}
    assert "helpers.softmax_stable" in rules["stable_softmax"][0].watch
    assert "torch.nn.functional.scaled_dot_product_attention" in rules["scaled_attention"][0].watch
    # Exercise 3 asks why, and does not state the fix.
    exercise_3 = text[text.index("### Exercise 3"):]
    assert "/ temperature" not in exercise_3 and "s_i / \\tau" not in exercise_3 and "why?" in exercise_3
