"""Lesson 04's exercises: right answers in any reasonable form pass, plausible wrong ones and broken rules fail."""

from __future__ import annotations

import pytest
import torch

import helpers
from helpers.exercises import SpotTheBug, lesson04


def placeholder(*args, **kwargs):
    raise NotImplementedError


# --- 1. who influences whom: causality from the outputs alone -----------------------------------------------
def _by_perturbation(attention, inputs, compare="exact", disturb=lambda token: token * 2.0 + 1.0):
    num_tokens = inputs.shape[1]
    before = attention(inputs)
    columns = []
    for j in range(num_tokens):
        changed = inputs.clone()
        changed[:, j] = disturb(changed[:, j])
        after = attention(changed)
        moved = (after != before) if compare == "exact" else ~torch.isclose(after, before, atol=1e-6)
        columns.append(moved.any(dim=2).any(dim=0))        # (T,)
    return torch.stack(columns, dim=1)                     # (T, T): column j = the outputs that token j moves


def _by_jacobian(attention, inputs):
    jacobian = torch.autograd.functional.jacobian(attention, inputs)   # (B, T, d_out, B, T, d_in)
    return (jacobian != 0).any(dim=5).any(dim=3).any(dim=2).any(dim=0)


def _by_prefixes_and_suffixes(attention, inputs):
    """Another right answer: replace token j by a random vector, compare with a tolerance, batch element 0 only."""
    generator = torch.Generator().manual_seed(1)
    return _by_perturbation(attention, inputs[:1], compare="close",
                            disturb=lambda token: torch.randn(token.shape, generator=generator))


@pytest.mark.parametrize("answer", [lesson04.influence._solution, _by_perturbation, _by_jacobian,
                                    _by_prefixes_and_suffixes])
def test_influence_accepts_every_right_experiment(answer):
    feedback = lesson04.influence.check(answer)
    assert feedback, feedback.message


def test_influence_cases_cover_a_causal_layer_and_three_kinds_of_leak():
    cases = lesson04.influence.cases(torch.Generator().manual_seed(0))
    patterns = [lesson04.influence.reference(*case.args) for case in cases]
    future = [p & helpers.causal_mask(p.shape[0]) for p in patterns]
    assert not future[0].any() and not future[-1].any()                      # the causal layer
    assert sum(bool(f.any()) for f in future) == 3                            # three layers that leak
    assert patterns[-1].shape == (1, 1)                                       # and a single token


def test_influence_reference_is_what_the_layers_do():
    """The known patterns agree with an experiment on every case (so the reference is not just asserted)."""
    for case in lesson04.influence.cases(torch.Generator().manual_seed(0)):
        torch.testing.assert_close(_by_jacobian(*case.args), lesson04.influence.reference(*case.args))


@pytest.mark.parametrize("wrong, words", [
    (lambda attention, inputs: _by_perturbation(attention, inputs).T, "swapped"),
    (lambda attention, inputs: _by_perturbation(attention, inputs) & helpers.causal_mask(inputs.shape[1]),
     "whole matrix"),
    (lambda attention, inputs: torch.ones(inputs.shape[1], inputs.shape[1], dtype=torch.bool), "values are not"),
    (lambda attention, inputs: ~helpers.causal_mask(inputs.shape[1]), "values are not"),   # assumes causality
    (lambda attention, inputs: _by_perturbation(attention, inputs).int(), "dtype"),
    (lambda attention, inputs: list(_by_perturbation(attention, inputs)), "tensor"),
])
def test_influence_rejects_plausible_wrong_answers(wrong, words):
    feedback = lesson04.influence.check(wrong)
    assert not feedback and words in feedback.message, feedback.message


# --- 2. spot the bug: causal on paper (weights zeroed after the softmax) -------------------------------------
def _attention(normalise, hide_with=float("-inf")):
    """A learner's fix whose weights come from ``normalise(masked, scaled scores)``."""
    def attention(queries, keys, values):
        num_tokens = queries.shape[-2]
        attn_scores = (queries @ keys.transpose(-2, -1)) / queries.shape[-1] ** 0.5
        attn_scores = attn_scores.masked_fill(helpers.causal_mask(num_tokens), hide_with)
        attn_weights = normalise(attn_scores)
        return attn_weights @ values, attn_weights
    return attention


def _softmax_by_hand(scores, shift=True):
    if shift:
        scores = scores - scores.amax(dim=-1, keepdim=True)
    exps = scores.exp()
    return exps / exps.sum(dim=-1, keepdim=True)


def _with_additive_mask(queries, keys, values):
    """Another right fix: add a float mask of 0 and -inf to the scores (the way many codebases store it)."""
    num_tokens = queries.shape[-2]
    additive = torch.zeros(num_tokens, num_tokens).masked_fill(helpers.causal_mask(num_tokens), float("-inf"))
    attn_weights = torch.softmax(queries @ keys.mT / queries.shape[-1] ** 0.5 + additive, dim=-1)
    return attn_weights @ values, attn_weights


def _with_where(queries, keys, values):
    num_tokens = queries.shape[-2]
    keep = torch.tril(torch.ones(num_tokens, num_tokens, dtype=torch.bool))
    scores = torch.where(keep, queries @ keys.mT, torch.tensor(float("-inf")))
    attn_weights = scores.div(queries.shape[-1] ** 0.5).softmax(dim=-1)
    return attn_weights @ values, attn_weights


def test_causal_on_paper_is_a_spot_the_bug_whose_bug_is_explained_on_the_first_input():
    exercise = lesson04.causal_on_paper
    assert isinstance(exercise, SpotTheBug)
    feedback = exercise.check(exercise.buggy)
    assert not feedback and "set to 0" in feedback.message and "one sentence" in feedback.message


def test_causal_on_paper_bug_passes_the_lessons_check_yet_output_0_sees_the_last_token():
    """The premise of the task: no weight above the diagonal, yet output 0 moves when the last token changes."""
    generator = torch.Generator().manual_seed(0)
    queries, keys, values = (torch.randn(2, 5, 4, generator=generator) for _ in range(3))
    _, weights = lesson04.causal_on_paper.buggy(queries, keys, values)
    assert not (weights * helpers.causal_mask(5)).any()                                 # check_no_future passes
    changed = [t.clone() for t in (queries, keys, values)]
    for t in changed:
        t[:, -1] += 1.0                                                                     # change the last token
    before, after = lesson04.causal_on_paper.buggy(queries, keys, values)[0], lesson04.causal_on_paper.buggy(*changed)[0]
    assert not torch.allclose(before[:, 0], after[:, 0])                                    # output 0 moved
    fixed_before = lesson04.causal_on_paper.reference(queries, keys, values)[0]
    fixed_after = lesson04.causal_on_paper.reference(*changed)[0]
    torch.testing.assert_close(fixed_before[:, :-1], fixed_after[:, :-1])                # the fix: only the last moves


def test_causal_on_paper_reference_agrees_with_pytorch():
    for case in lesson04.causal_on_paper.cases(torch.Generator().manual_seed(0)):
        queries, keys, values = case.args
        torch.testing.assert_close(lesson04.causal_on_paper.reference(*case.args)[0],
                                   torch.nn.functional.scaled_dot_product_attention(queries, keys, values,
                                                                                    is_causal=True))


def test_the_plain_repair_really_underflows_on_the_large_scores():
    """The mistake message's claim: zero-then-renormalise in float32 gives nan on the checker's large scores."""
    cases = lesson04.causal_on_paper.cases(torch.Generator().manual_seed(0))
    large = next(c for c in cases if "large scores" in c.description)
    _, zeroed = lesson04.causal_on_paper.buggy(*large.args)
    assert (zeroed.sum(dim=-1) == 0).any()                                               # a row underflowed to 0
    assert (zeroed / zeroed.sum(dim=-1, keepdim=True)).isnan().any()


@pytest.mark.parametrize("answer", [
    lesson04.causal_on_paper._solution,
    _attention(lambda s: torch.softmax(s, dim=-1)),
    _attention(lambda s: s.softmax(s.dim() - 1)),
    _attention(lambda s: torch.nn.functional.softmax(s, dim=-1)),
    _attention(_softmax_by_hand),
    _attention(lambda s: torch.softmax(s, dim=-1), hide_with=torch.finfo(torch.float32).min),
    _with_additive_mask,
    _with_where,
    lambda q, k, v: helpers.scaled_dot_product_attention(q, k, v, mask=helpers.causal_mask(q.shape[-2])),
])
def test_causal_on_paper_accepts_every_right_fix(answer):
    feedback = lesson04.causal_on_paper.check(answer)
    assert feedback, feedback.message


def _zeroed(q, k, v):
    return lesson04.causal_on_paper.buggy(q, k, v)[1]


@pytest.mark.parametrize("wrong, words", [
    (lambda q, k, v: (lambda w: (w @ v, w))(_zeroed(q, k, v) / _zeroed(q, k, v).sum(-1, keepdim=True)),
     "underflow"),
    (lambda q, k, v: (lambda w: (w @ v, w))(_zeroed(q, k, v) / _zeroed(q, k, v).sum(-2, keepdim=True)),
     "column"),
    (_attention(lambda s: torch.softmax(s, dim=-1), hide_with=0.0), "ordinary score"),
    (_attention(lambda s: torch.softmax(s, dim=-2)), "values are not"),
    (_attention(lambda s: torch.softmax(s, dim=1)), "values are not"),        # 02's bug: wrong on a batch
    (_attention(lambda s: torch.softmax(s, dim=2)), "IndexError"),            # right for a batch, not one sentence
    (_attention(lambda s: _softmax_by_hand(s, shift=False)), "nan"),          # overflows on the large scores
    (lambda q, k, v: _attention(lambda s: torch.softmax(s, dim=-1))(q, k, v)[0], "value(s), expected 2"),
    (lambda q, k, v: tuple(t.double() for t in _attention(lambda s: torch.softmax(s, dim=-1))(q, k, v)), None),
])
def test_causal_on_paper_rejects_plausible_wrong_fixes(wrong, words):
    feedback = lesson04.causal_on_paper.check(wrong)
    if words is None:      # float64 answers are accepted: the values are what counts
        assert feedback, feedback.message
        return
    assert not feedback and words in feedback.message, feedback.message


def test_causal_on_paper_checks_large_very_negative_and_single_token_inputs():
    cases = lesson04.causal_on_paper.cases(torch.Generator().manual_seed(0))
    scores = [c.args[0] @ c.args[1].transpose(-2, -1) / c.args[0].shape[-1] ** 0.5 for c in cases]
    assert max(float(s.max()) for s in scores) > 100                      # exp overflows in float32 above 88
    assert any(float(s.max()) < -100 for s in scores)                     # every exp underflows to 0
    assert any(c.args[0].shape[-2] == 1 for c in cases) and any(c.args[0].dim() == 4 for c in cases)
    assert any(c.args[2].shape[-1] != c.args[0].shape[-1] for c in cases)  # d_v != d_k
    task = lesson04.causal_on_paper.task
    assert "above 100" in task and "below -100" in task and "d_v" in task and "heads" in task   # rules stated


def _notebook_cell_of_exercise_2():
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).parents[1] / "notebooks" / "04_causal_attention.ipynb").read_text(encoding="utf-8"))
    return next("".join(c["source"]) for c in nb["cells"]
                if c["cell_type"] == "code" and "lesson04.causal_on_paper.check(" in "".join(c["source"]))


def test_the_notebook_cell_holds_the_same_buggy_code():
    """Exercise 2 gives the buggy code in the cell the learner edits: it must be the bug the checker knows."""
    import inspect

    cell = _notebook_cell_of_exercise_2()
    body = [line.strip() for line in cell.splitlines()[1:] if line.startswith("    ") and "raise" not in line]
    buggy = [line.strip() for line in inspect.getsource(lesson04.buggy_causal_attention).splitlines()[1:]]
    assert body == buggy
    assert "raise NotImplementedError  # delete this line" in cell and ".show()" not in cell


def test_the_shipped_cell_is_not_done_until_the_placeholder_goes_then_names_the_bug():
    """A learner who deletes the placeholder line and hands the code in unchanged is told what the bug is."""
    cell = _notebook_cell_of_exercise_2()
    definition = cell.split("\n\n\n")[0]                          # the def, without the check call
    namespace = {"torch": torch}
    exec(definition, namespace)
    assert lesson04.causal_on_paper.check(namespace["causal_attention"]).status == "not done"
    exec(definition.replace("    raise NotImplementedError  # delete this line, then fix the code below\n", ""),
         namespace)
    feedback = lesson04.causal_on_paper.check(namespace["causal_attention"])
    assert not feedback and "set to 0" in feedback.message, feedback.message


@pytest.mark.parametrize("spoil", [float("inf"), float("-inf"), float("nan")])
def test_causal_on_paper_explains_answers_with_infinities_or_nan(spoil):
    def spoiled(q, k, v):
        context_vecs, weights = lesson04.causal_on_paper._solution(q, k, v)
        return context_vecs, weights.masked_fill(~helpers.causal_mask(q.shape[-2]), spoil)
    feedback = lesson04.causal_on_paper.check(spoiled)
    assert feedback.status == "wrong" and "returned value 1 (counting from 0)" in feedback.message, feedback.message


# --- what every lesson-04 exercise promises -------------------------------------------------------------
@pytest.mark.parametrize("name", lesson04.__all__)
def test_placeholder_is_not_done_and_hides_the_hint(name):
    feedback = getattr(lesson04, name).check(placeholder)
    assert feedback.status == "not done" and "not done yet" in feedback.message
    assert not any(hint in feedback.message for hint in getattr(lesson04, name)._hints)


@pytest.mark.parametrize("name", lesson04.__all__)
def test_hints_do_not_give_the_answer(name):
    for hint in getattr(lesson04, name)._hints:
        for answer in ("diagonal=1", "triu(", "tril(", "-inf", "float('-inf')", "> positions", "[None, :] >",
                       "clone()", "+= ", "[:, j]", "jacobian", "dim=-1", "dim=2", "softmax(", "over the keys"):
            assert answer not in hint, f"{name}: hint gives away {answer!r}"


def test_at_least_one_exercise_is_not_spot_the_bug():
    exercises = [getattr(lesson04, name) for name in lesson04.__all__]
    assert any(not isinstance(e, SpotTheBug) for e in exercises)
    assert any(isinstance(e, SpotTheBug) for e in exercises)


def test_the_spot_the_bug_name_in_the_learners_cell_does_not_name_the_bug():
    """Issue 34: `lesson04.axis_leak` told the learner, in the cell they edit, that the bug is an axis."""
    assert lesson04.__all__ == ["influence", "causal_on_paper"]
    assert lesson04.causal_on_paper.name == "lesson04.causal_on_paper"
    exercise = lesson04.causal_on_paper
    for word in ("axis", "dim", "softmax", "leak", "zero", "renormalis", "sum"):
        assert word not in exercise.name and word not in exercise.title.lower()
        assert word not in exercise.task.lower() and word not in exercise.buggy.__name__
        assert word not in exercise.check(lambda q, k, v: (_ for _ in ()).throw(NotImplementedError)).message
    assert lesson04.axis_leak is lesson04.causal_on_paper, "older copies of notebook 04 still run"
