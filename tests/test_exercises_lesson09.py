"""Notebook 09's exercises: right answers in any reasonable form pass, plausible wrong ones are named, every stated
rule is checked, and no hint gives the answer away."""

import math

import pytest
import torch

from helpers.exercises import lesson09
from helpers.positions import apply_rope


# --- 1. P_i . P_j from the distance --------------------------------------------------------------------------------
def _similarity_by_outer_cos(num_tokens, d_in):
    omega = torch.exp(-math.log(10000.0) * torch.arange(0, d_in, 2) / d_in)            # the same frequencies
    distance = torch.arange(num_tokens).view(-1, 1, 1) - torch.arange(num_tokens).view(1, -1, 1)
    return (distance * omega).cos().sum(-1)


def _similarity_by_cos_identity_einsum(num_tokens, d_in):
    omega = 10000.0 ** (-torch.arange(0, d_in, 2, dtype=torch.float64) / d_in)
    angles = torch.arange(num_tokens, dtype=torch.float64)[:, None] * omega             # (T, d_in / 2)
    # cos(a - b) = cos a cos b + sin a sin b, written with cosines only: sin x = cos(x - pi/2)
    shifted = torch.cos(angles - math.pi / 2)
    return (torch.einsum("ir,jr->ij", torch.cos(angles), torch.cos(angles))
            + torch.einsum("ir,jr->ij", shifted, shifted)).float()


@pytest.mark.parametrize("answer", [_similarity_by_outer_cos, _similarity_by_cos_identity_einsum])
def test_position_similarity_accepts_every_right_form(answer):
    """Also a form that writes the frequencies as exp(-log(10000) * 2r / d_in), as the Annotated Transformer does."""
    feedback = lesson09.position_similarity.check(answer)
    assert feedback.passed, feedback.message


def _similarity_with_loop(num_tokens, d_in):
    rows = []
    for i in range(num_tokens):
        rows.append(_similarity_by_outer_cos(num_tokens, d_in)[i])
    return torch.stack(rows)


def _similarity_building_p(num_tokens, d_in):
    omega = 10000.0 ** (-torch.arange(0, d_in, 2) / d_in)
    angles = torch.arange(num_tokens)[:, None] * omega
    encoding = torch.stack((torch.sin(angles), torch.cos(angles)), -1).flatten(-2)
    return encoding @ encoding.T


def _similarity_via_helper(num_tokens, d_in):
    import helpers
    encoding = helpers.sinusoidal_positions(num_tokens, d_in)
    return encoding @ encoding.T


@pytest.mark.parametrize("wrong, words", [
    (lambda T, d: _similarity_by_outer_cos(T, d) * 2, "Each PAIR"),
    (lambda T, d: (((torch.arange(T).view(-1, 1, 1) + torch.arange(T).view(1, -1, 1))
                    * 10000.0 ** (-torch.arange(0, d, 2) / d)).cos().sum(-1)), "i + j"),
    (_similarity_with_loop, "no Python loop"),
    (_similarity_building_p, "torch.sin"),
    (_similarity_via_helper, "sinusoidal_positions"),
    (lambda T, d: (((torch.arange(T).view(-1, 1, 1) - torch.arange(T).view(1, -1, 1))
                    * 10000.0 ** (-torch.arange(0, d // 2) / d)).cos().sum(-1)), "-2r / d_in"),
    (lambda T, d: _similarity_by_outer_cos(T, d).T[:, :-1], "shape"),
])
def test_position_similarity_rejects_wrong_answers(wrong, words):
    feedback = lesson09.position_similarity.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


# --- 2. spot the bug: RoPE on the values ---------------------------------------------------------------------------
def _rope_attention_with_sdpa(queries, keys, values):
    return torch.nn.functional.scaled_dot_product_attention(apply_rope(queries), apply_rope(keys), values)


def test_rope_attention_accepts_torch_sdpa_and_names_the_bug():
    assert lesson09.rope_on_values.check(_rope_attention_with_sdpa).passed
    feedback = lesson09.rope_on_values.check(lesson09.rope_on_values.buggy)
    assert feedback.status == "wrong" and "values are rotated too" in feedback.message


@pytest.mark.parametrize("wrong, words", [
    (lambda q, k, v: torch.softmax(apply_rope(q) @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, -1) @ v,
     "rotated the queries only"),
    (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, -1) @ v, "no positions"),
    (lambda q, k, v: torch.softmax(apply_rope(q) @ apply_rope(k).transpose(-2, -1), -1) @ v, "values are not"),
])
def test_rope_attention_rejects_wrong_answers(wrong, words):
    feedback = lesson09.rope_on_values.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


@pytest.mark.parametrize("exercise", [lesson09.position_similarity, lesson09.rope_on_values])
def test_no_hint_gives_the_answer_away(exercise):
    solution_lines = {line.strip() for line in __import__("inspect").getsource(exercise._solution).splitlines()[1:]}
    for hint in exercise._hints:
        assert not any(line and line in hint for line in solution_lines if len(line) > 20), hint
