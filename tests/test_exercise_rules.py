"""The exercise core: rules about how an answer is computed, hints on request, precise messages on packing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.functional import softmax as imported_softmax

from helpers.exercises import Case, FunctionExercise, forbids, no_loops, requires


def _softmax_cases(generator):
    return [Case("a 3x4 matrix", (torch.randn(3, 4, generator=generator),)),
            Case("a 2x5 matrix", (torch.randn(2, 5, generator=generator),))]


def _own_softmax(x):
    exps = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return exps / exps.sum(dim=-1, keepdim=True)


SOFTMAX = FunctionExercise(
    "Own softmax", "softmax over the last dimension, without torch's softmax and without a loop",
    reference=lambda x: torch.softmax(x, dim=-1), cases=_softmax_cases,
    hint=["first nudge", "second nudge"], solution=_own_softmax, name="demo.softmax",
    rules=[no_loops(), forbids("torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax")])


def _loop_rows(x):
    return torch.stack([torch.exp(row) / torch.exp(row).sum() for row in x])


def _for_loop(x):
    out = torch.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = torch.exp(x[i]) / torch.exp(x[i]).sum()
    return out


def _while_loop(x):
    out, i = torch.empty_like(x), 0
    while i < x.shape[0]:
        out[i] = torch.exp(x[i]) / torch.exp(x[i]).sum()
        i += 1
    return out


def test_the_right_way_passes():
    assert SOFTMAX.check(_own_softmax).passed


@pytest.mark.parametrize("function, called", [
    (lambda x: torch.softmax(x, dim=-1), "torch.softmax"),
    (lambda x: x.softmax(-1), "torch.Tensor.softmax"),
    (lambda x: F.softmax(x, dim=-1), "torch.nn.functional.softmax"),
    (lambda x: imported_softmax(x, dim=-1), "torch.nn.functional.softmax"),  # an alias in the caller's globals
])
def test_a_forbidden_call_makes_a_right_value_wrong_and_is_named(function, called):
    feedback = SOFTMAX.check(function)
    assert feedback.status == "wrong"
    assert f"your function calls `{called}`" in feedback.message


def test_forbidden_functions_are_restored_after_the_check():
    original = (torch.softmax, torch.Tensor.softmax, F.softmax, imported_softmax)
    SOFTMAX.check(lambda x: torch.softmax(x, dim=-1))
    SOFTMAX.check(lambda x: 1 / 0)
    assert (torch.softmax, torch.Tensor.softmax, F.softmax, imported_softmax) == original


@pytest.mark.parametrize("function, kind", [(_loop_rows, "comprehension"), (_for_loop, "`for` loop"),
                                            (_while_loop, "`while` loop")])
def test_loops_are_refused_even_when_the_values_are_right(function, kind):
    feedback = SOFTMAX.check(function)
    assert feedback.status == "wrong" and kind in feedback.message and "no Python loop" in feedback.message


def test_a_required_call_must_happen():
    exercise = FunctionExercise(
        "With SDPA", "attention with PyTorch's fused function",
        reference=lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        cases=lambda g: [Case("(2, 4, 3) tensors", tuple(torch.randn(2, 4, 3, generator=g) for _ in range(3)))],
        hint="h", solution=lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        rules=[requires("torch.nn.functional.scaled_dot_product_attention")])
    by_hand = lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / 3 ** 0.5, dim=-1) @ v  # noqa: E731
    feedback = exercise.check(by_hand)
    assert feedback.status == "wrong" and "never calls it" in feedback.message
    assert exercise.check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v)).passed


def test_hints_come_one_at_a_time_only_when_asked(capsys):
    exercise = FunctionExercise("Hints", "t", reference=lambda x: x, cases=_softmax_cases,
                                hint=["look at the rows", "subtract the maximum"], solution=lambda x: x)
    wrong = exercise.check(lambda x: x * 2)
    assert "look at the rows" not in wrong.message and "Call `.hint()`" in wrong.message
    exercise.hint()
    exercise.hint()
    exercise.hint()
    shown = capsys.readouterr().out.splitlines()
    assert shown == ["Hint 1 of 2 (Hints): look at the rows", "Hint 2 of 2 (Hints): subtract the maximum",
                     "Hint 2 of 2 (Hints): subtract the maximum"]


def test_a_list_where_a_tuple_is_expected_gets_a_precise_message():
    exercise = FunctionExercise("Pair", "t", reference=lambda x: (x, x + 1), cases=_softmax_cases, hint="h",
                                solution=lambda x: (x, x + 1))
    feedback = exercise.check(lambda x: [x, x + 1])
    assert "returned a list of 2 values" in feedback.message and "tuple" in feedback.message
    assert exercise.check(lambda x: (x, x + 1)).passed


def test_a_list_of_numbers_where_a_tensor_is_expected_gets_a_precise_message():
    feedback = SOFTMAX.check(lambda x: x.tolist())
    assert "returned a list of" in feedback.message and "expected one tensor" in feedback.message


def test_bad_rules_fail_when_the_exercise_is_defined():
    with pytest.raises(ValueError, match="cannot find"):
        forbids("torch.no_such_function")
    with pytest.raises(ValueError, match="dotted names"):
        requires()
    with pytest.raises(TypeError, match="rules must be"):
        FunctionExercise("t", "t", reference=lambda x: x, cases=_softmax_cases, hint="h",
                         solution=lambda x: x, rules=["no loops"])
    with pytest.raises(TypeError, match="hint must be"):
        FunctionExercise("t", "t", reference=lambda x: x, cases=_softmax_cases, hint=[], solution=lambda x: x)
