"""Notebook 09's exercises: right answers in any reasonable form pass, plausible wrong ones are named, every stated
rule is checked, and no hint gives the answer away."""

import math

import pytest
import torch

from helpers.exercises import lesson09
from helpers.positions import apply_rope


# --- 1. ALiBi weights ----------------------------------------------------------------------------------------------
def _distance(num_tokens):
    positions = torch.arange(num_tokens)
    return (positions[:, None] - positions[None, :]).float()          # i - j


def _alibi_with_minus_1e9(attn_scores, slopes):
    distance = _distance(attn_scores.shape[-1])
    biased = attn_scores - slopes.view(-1, 1, 1) * distance
    return torch.softmax(biased.masked_fill(distance < 0, -1e9), dim=-1)   # a large negative instead of -inf


def _alibi_with_triu_and_f_softmax(attn_scores, slopes):
    num_tokens = attn_scores.shape[-1]
    future = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)
    penalty = torch.einsum("h,ij->hij", slopes, _distance(num_tokens))
    return torch.nn.functional.softmax((attn_scores - penalty).masked_fill(future, float("-inf")), dim=-1)


def _alibi_through_sdpa_style_bias(attn_scores, slopes):
    num_tokens = attn_scores.shape[-1]
    bias = -slopes[:, None, None] * _distance(num_tokens).clamp(min=0)             # (H, T, T), 0 on the diagonal
    bias = bias + torch.zeros(num_tokens, num_tokens).masked_fill(_distance(num_tokens) < 0, float("-inf"))
    return torch.softmax(attn_scores + bias, dim=-1)


@pytest.mark.parametrize("answer", [_alibi_with_minus_1e9, _alibi_with_triu_and_f_softmax,
                                    _alibi_through_sdpa_style_bias])
def test_alibi_accepts_every_right_form(answer):
    feedback = lesson09.alibi_weights.check(answer)
    assert feedback.passed, feedback.message


def _alibi_sign_flipped(attn_scores, slopes):
    distance = _distance(attn_scores.shape[-1])
    return torch.softmax((attn_scores + slopes.view(-1, 1, 1) * distance).masked_fill(distance < 0, float("-inf")), -1)


def _alibi_bidirectional(attn_scores, slopes):
    return torch.softmax(attn_scores - slopes.view(-1, 1, 1) * _distance(attn_scores.shape[-1]).abs(), dim=-1)


def _alibi_naive_softmax(attn_scores, slopes):
    distance = _distance(attn_scores.shape[-1])
    exps = (attn_scores - slopes.view(-1, 1, 1) * distance).exp().masked_fill(distance < 0, 0.0)
    return exps / exps.sum(dim=-1, keepdim=True)                        # no maximum subtracted


def _alibi_row_mean_shift(attn_scores, slopes):
    distance = _distance(attn_scores.shape[-1])
    biased = (attn_scores - slopes.view(-1, 1, 1) * distance).masked_fill(distance < 0, float("-inf"))
    finite = biased.masked_fill(distance < 0, 0.0)
    shifted = biased - finite.sum(-1, keepdim=True) / (distance >= 0).sum(-1)     # the row mean, not the maximum
    exps = shifted.exp()
    return exps / exps.sum(dim=-1, keepdim=True)


def _alibi_slopes_per_query(attn_scores, slopes):
    distance = _distance(attn_scores.shape[-1])
    return torch.softmax((attn_scores - slopes[:, None] * distance).masked_fill(distance < 0, float("-inf")), -1)


@pytest.mark.parametrize("wrong, words", [
    (_alibi_sign_flipped, "wrong sign"),
    (_alibi_bidirectional, "keys after it"),
    (_alibi_naive_softmax, "nan"),
    (_alibi_row_mean_shift, None),
    (_alibi_slopes_per_query, None),
])
def test_alibi_rejects_wrong_answers(wrong, words):
    feedback = lesson09.alibi_weights.check(wrong)
    assert feedback.status == "wrong", wrong.__name__
    assert words is None or words in feedback.message, feedback.message


def _alibi_hiding_the_diagonal(attn_scores, slopes):
    distance = _distance(attn_scores.shape[-1])
    return torch.softmax((attn_scores - slopes.view(-1, 1, 1) * distance).masked_fill(distance <= 0, float("-inf")),
                         -1)


def _alibi_one_key_ahead(attn_scores, slopes):
    distance = _distance(attn_scores.shape[-1])
    return torch.softmax((attn_scores - slopes.view(-1, 1, 1) * distance).masked_fill(distance < -1, float("-inf")),
                         -1)


@pytest.mark.parametrize("wrong, words", [(_alibi_hiding_the_diagonal, "own key (j = i)"),
                                          (_alibi_one_key_ahead, "just after it (j = i + 1)")])
def test_alibi_names_both_off_by_one_masks(wrong, words):
    # "key j may not come after query i": the threshold j = i sits in every case (the diagonal); both sides named.
    feedback = lesson09.alibi_weights.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


def test_alibi_calls_its_input_the_scaled_scores():
    # The card's attn_scores is the unscaled S; the task's argument is already divided by sqrt(d_head).
    assert "scaled_scores" in lesson09.alibi_weights.task and "attn_scores" not in lesson09.alibi_weights.task


def test_alibi_survives_inf_and_nan_answers():
    for value in (float("nan"), float("inf")):
        def flat(attn_scores, slopes, value=value):
            return torch.full_like(attn_scores, value)
        assert lesson09.alibi_weights.check(flat).status == "wrong"


# --- 2. spot the bug: a quarter turn that is a reflection --------------------------------------------------------
def _rope_attention_with_sdpa(queries, keys, values):
    return torch.nn.functional.scaled_dot_product_attention(apply_rope(queries), apply_rope(keys), values)


def _rope_attention_via_halves_and_permutation(queries, keys, values):
    # rotate-half on dimensions reordered so that its pairs are the adjacent ones: the same rotation
    from helpers.positions import halves_to_adjacent
    back = torch.argsort(halves_to_adjacent(queries.shape[-1]))
    turned_q, turned_k = (apply_rope(x[..., back], pairs="halves") for x in (queries, keys))
    return torch.softmax(turned_q @ turned_k.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1) @ values


def _rope_attention_halves_for_both(queries, keys, values):
    # the rotate-half layout for queries and keys alike: RoPE too (scores depend on j - i only), so it passes
    turned_q, turned_k = apply_rope(queries, pairs="halves"), apply_rope(keys, pairs="halves")
    return torch.softmax(turned_q @ turned_k.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1) @ values


@pytest.mark.parametrize("answer", [_rope_attention_with_sdpa, _rope_attention_via_halves_and_permutation,
                                    _rope_attention_halves_for_both])
def test_rope_attention_accepts_right_forms(answer):
    feedback = lesson09.rope_attention.check(answer)
    assert feedback.passed, feedback.message


def test_rope_attention_names_the_bug():
    feedback = lesson09.rope_attention.check(lesson09.rope_attention.buggy)
    assert feedback.status == "wrong" and "quarter turn is wrong" in feedback.message, feedback.message


def test_the_bug_is_one_only_the_shift_check_reveals():
    # The buggy code turns queries and keys alike with one hand-written turn (no second layout, no turned values,
    # nothing to diff with another line); its one wrong sign, (-b, -a) for (-b, a), appears nowhere in the notebook.
    import json
    from pathlib import Path

    source = __import__("inspect").getsource(lesson09.rope_attention.buggy)
    assert "torch.stack((-b, -a)" in source
    assert "queries, keys = turn(queries, positions), turn(keys, positions)" in source
    assert "pairs=" not in source and "turn(values" not in source and "apply_rope" not in source
    path = Path(__file__).resolve().parents[1] / "notebooks" / "09_positions.ipynb"
    text = "".join("".join(cell["source"]) for cell in json.loads(path.read_text(encoding="utf-8"))["cells"])
    assert "(-b, -a)" not in text and "(-b, a)" not in text and "quarter" not in text


def test_the_task_states_the_scaling_and_the_untouched_values():
    task = lesson09.rope_attention.task
    assert "sqrt(head_dim)" in task and "values are not turned" in task


def _reflection(a, b):
    return -b, -a                                                       # the buggy code's "quarter turn"


def _clockwise(a, b):
    return b, -a


def _anticlockwise(a, b):
    return -b, a                                                        # section 4 at 90 degrees


def _turn(x, positions=None, quarter=_reflection):
    # the printed code's turn, with its quarter turn as an argument
    positions = torch.arange(x.shape[-2]) if positions is None else positions
    omega = 10000.0 ** (-torch.arange(0, x.shape[-1], 2) / x.shape[-1])
    angles = (positions[:, None] * omega).repeat_interleave(2, dim=-1)
    return x * angles.cos() + torch.stack(quarter(x[..., 0::2], x[..., 1::2]), dim=-1).flatten(-2) * angles.sin()


def test_the_fixed_turn_is_apply_rope_and_the_buggy_code_uses_the_reflection():
    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(_turn(x, quarter=_anticlockwise), apply_rope(x))
    q, k, v = (torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3))
    torch.testing.assert_close(lesson09.rope_attention.buggy(q, k, v),
                               torch.softmax(_turn(q) @ _turn(k).transpose(-2, -1) / 8 ** 0.5, -1) @ v)


@pytest.mark.parametrize("wrong, words", [
    (lambda q, k, v: torch.softmax(apply_rope(q) @ apply_rope(k).transpose(-2, -1) / k.shape[-1] ** 0.5, -1)
     @ apply_rope(v), "values are turned too"),
    (lambda q, k, v: torch.softmax(apply_rope(q) @ apply_rope(k, pairs="halves").transpose(-2, -1)
                                   / k.shape[-1] ** 0.5, -1) @ apply_rope(v), "values are not"),   # two bugs
    (lambda q, k, v: torch.softmax(apply_rope(q, pairs="halves") @ apply_rope(k, pairs="halves").transpose(-2, -1),
                                   -1) @ v, "values are not"),   # the layout is free, the scaling is not
    (lambda q, k, v: apply_rope(v), "values are not"),
    (lambda q, k, v: torch.full_like(v, float("inf")), "values are not"),
    (lambda q, k, v: torch.softmax(apply_rope(q, pairs="halves") @ apply_rope(k).transpose(-2, -1)
                                   / k.shape[-1] ** 0.5, -1) @ v, "rotate-half pairs"),
    (lambda q, k, v: torch.softmax(apply_rope(q) @ apply_rope(k, pairs="halves").transpose(-2, -1)
                                   / k.shape[-1] ** 0.5, -1) @ v, "rotate-half pairs"),
    (lambda q, k, v: torch.softmax(apply_rope(q) @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, -1) @ v,
     "rotated the queries only"),
    (lambda q, k, v: torch.softmax(q @ apply_rope(k).transpose(-2, -1) / k.shape[-1] ** 0.5, -1) @ v,
     "rotated the keys only"),   # the other half-fix: the turn dropped from the query line
    (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, -1) @ v, "no positions"),
    (lambda q, k, v: torch.softmax(_turn(q, quarter=_clockwise) @ _turn(k, quarter=_clockwise).transpose(-2, -1)
                                   / k.shape[-1] ** 0.5, -1) @ v, "wrong way round"),   # (b, -a): a half-fix
    (lambda q, k, v: torch.softmax(_turn(q) @ _turn(k).transpose(-2, -1) / k.shape[-1] ** 0.5, -1) @ v,
     "quarter turn is wrong"),   # the bug, retyped
    (lambda q, k, v: torch.softmax(apply_rope(q) @ apply_rope(k).transpose(-2, -1), -1) @ v, "values are not"),
])
def test_rope_attention_rejects_wrong_answers(wrong, words):
    feedback = lesson09.rope_attention.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


@pytest.mark.parametrize("exercise", [lesson09.alibi_weights, lesson09.rope_attention])
def test_no_hint_gives_the_answer_away(exercise):
    solution_lines = {line.strip() for line in __import__("inspect").getsource(exercise._solution).splitlines()[1:]}
    for hint in exercise._hints:
        assert not any(line and line in hint for line in solution_lines if len(line) > 20), hint


def test_alibi_task_states_every_rule():
    assert "Any PyTorch call is allowed" in lesson09.alibi_weights.task and not lesson09.alibi_weights.rules


def test_the_shift_check_the_task_suggests_exposes_the_bug():
    # Shifting every position by 10 leaves right RoPE attention unchanged and moves the buggy one's outputs.
    g = torch.Generator().manual_seed(0)
    queries, keys, values = (torch.randn(2, 6, 8, generator=g) for _ in range(3))
    positions = torch.arange(6)

    def attention(quarter, shift):
        q, k = _turn(queries, positions + shift, quarter), _turn(keys, positions + shift, quarter)
        return torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, dim=-1) @ values

    torch.testing.assert_close(attention(_anticlockwise, 10), attention(_anticlockwise, 0))
    torch.testing.assert_close(attention(_clockwise, 10), attention(_clockwise, 0))      # a rotation, the wrong way
    torch.testing.assert_close(lesson09.rope_attention.buggy(queries, keys, values), attention(_reflection, 0))
    assert not torch.allclose(attention(_reflection, 10), attention(_reflection, 0), atol=1e-3)   # the buggy code


def test_the_task_asks_for_the_shift_check_and_the_solution_holds_it():
    # The task states the property and asks the learner to write the check; hint 1 only nudges, the model answer
    # shows the check's code.
    task, first_hint = lesson09.rope_attention.task, lesson09.rope_attention._hints[0]
    assert "First write a check" in task and "0..5" in task and "10..15" in task
    assert "turn(k, p + shift" not in task and "turn(k, p + shift" not in first_hint
    assert "torch.arange(6) + 10" in first_hint
    source = lesson09.rope_attention._solution_source()
    code = "\n".join(line.strip()[6:] for line in source.splitlines() if line.strip().startswith("#     "))
    printed = []
    torch.manual_seed(0)
    exec(code, {"torch": torch, "turn": _turn, "print": printed.append})
    assert len(printed) == 2 and not torch.allclose(printed[0], printed[1], atol=1e-3)   # the buggy turn moves
    printed.clear()
    exec(code, {"torch": torch, "turn": lambda x, p: _turn(x, p, _anticlockwise), "print": printed.append})
    torch.testing.assert_close(printed[0], printed[1])                                     # the fixed one: they stay


def test_no_cell_of_the_lesson_runs_or_explains_the_exercise_bug():
    # Mixed pair layouts are a named wrong answer of the spot-the-bug exercise; neither the core nor a deep dive
    # runs them (or says what mixing does): every cell that scores turned vectors uses one layout.
    import json
    import re
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / "09_positions.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            assert not re.search(r"mix(ing|ed)? (the )?layouts", text, re.IGNORECASE), text[:200]
            continue
        for line in text.splitlines():
            calls = re.findall(r"apply_rope\(([^()]*(?:\([^()]*\)[^()]*)*)\)", line)
            layouts = {"halves" if 'pairs="halves"' in call else "adjacent" for call in calls}
            assert "@" not in line or len(layouts) <= 1, line
    where = [cell for cell in cells if "".join(cell["source"]).startswith("### Where RoPE goes in a model")]
    assert len(where) == 1 and "halves" not in "".join(where[0]["source"])   # the core names no layout
