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


def _similarity_with_angular_frequencies(num_tokens, d_in):
    from helpers.positions import angular_frequencies     # the task says it may be used
    positions = torch.arange(num_tokens)
    return torch.cos((positions[None, :] - positions[:, None])[..., None] * angular_frequencies(d_in)).sum(-1)


@pytest.mark.parametrize("answer", [_similarity_by_outer_cos, _similarity_by_cos_identity_einsum,
                                    _similarity_with_angular_frequencies])
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


# --- 2. spot the bug: two pair layouts ----------------------------------------------------------------------------
def _rope_attention_with_sdpa(queries, keys, values):
    return torch.nn.functional.scaled_dot_product_attention(apply_rope(queries), apply_rope(keys), values)


def _rope_attention_via_halves_and_permutation(queries, keys, values):
    # rotate-half on dimensions reordered so that its pairs are the adjacent ones: the same rotation
    from helpers.positions import halves_to_adjacent
    back = torch.argsort(halves_to_adjacent(queries.shape[-1]))
    turned_q, turned_k = (apply_rope(x[..., back], pairs="halves") for x in (queries, keys))
    return torch.softmax(turned_q @ turned_k.transpose(-2, -1) / keys.shape[-1] ** 0.5, dim=-1) @ values


@pytest.mark.parametrize("answer", [_rope_attention_with_sdpa, _rope_attention_via_halves_and_permutation])
def test_rope_attention_accepts_right_forms(answer):
    feedback = lesson09.rope_attention.check(answer)
    assert feedback.passed, feedback.message


def test_rope_attention_names_the_bug():
    feedback = lesson09.rope_attention.check(lesson09.rope_attention.buggy)
    assert feedback.status == "wrong" and "rotate-half pairs" in feedback.message, feedback.message


@pytest.mark.parametrize("wrong, words", [
    (lambda q, k, v: torch.softmax(apply_rope(q) @ apply_rope(k).transpose(-2, -1) / k.shape[-1] ** 0.5, -1)
     @ apply_rope(v), "values are rotated too"),
    (lambda q, k, v: torch.softmax(apply_rope(q, pairs="halves") @ apply_rope(k, pairs="halves").transpose(-2, -1)
                                   / k.shape[-1] ** 0.5, -1) @ v, "rotate-half layout"),
    (lambda q, k, v: torch.softmax(apply_rope(q, pairs="halves") @ apply_rope(k).transpose(-2, -1)
                                   / k.shape[-1] ** 0.5, -1) @ v, "rotate-half pairs"),
    (lambda q, k, v: torch.softmax(apply_rope(q) @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, -1) @ v,
     "rotated the queries only"),
    (lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, -1) @ v, "no positions"),
    (lambda q, k, v: torch.softmax(apply_rope(q) @ apply_rope(k).transpose(-2, -1), -1) @ v, "values are not"),
])
def test_rope_attention_rejects_wrong_answers(wrong, words):
    feedback = lesson09.rope_attention.check(wrong)
    assert feedback.status == "wrong" and words in feedback.message, feedback.message


@pytest.mark.parametrize("exercise", [lesson09.position_similarity, lesson09.rope_attention])
def test_no_hint_gives_the_answer_away(exercise):
    solution_lines = {line.strip() for line in __import__("inspect").getsource(exercise._solution).splitlines()[1:]}
    for hint in exercise._hints:
        assert not any(line and line in hint for line in solution_lines if len(line) > 20), hint


def test_position_similarity_allows_torch_cos_as_its_task_says():
    assert "torch.cos is allowed" in lesson09.position_similarity.task


def test_the_shift_check_the_task_suggests_exposes_the_bug():
    # Shifting every position by 10 leaves right RoPE attention unchanged and moves the buggy one's outputs.
    g = torch.Generator().manual_seed(0)
    queries, keys, values = (torch.randn(2, 6, 8, generator=g) for _ in range(3))
    positions = torch.arange(6)

    def attention(key_pairs, shift):
        q = apply_rope(queries, positions + shift)
        k = apply_rope(keys, positions + shift, pairs=key_pairs)
        return torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, dim=-1) @ values

    torch.testing.assert_close(attention("adjacent", 10), attention("adjacent", 0))
    assert not torch.allclose(attention("halves", 10), attention("halves", 0), atol=1e-3)
    torch.testing.assert_close(lesson09.rope_attention.buggy(queries, keys, values), attention("halves", 0))
