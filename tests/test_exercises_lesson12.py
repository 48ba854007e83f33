"""Notebook 12's exercises: right answers in any reasonable form pass, the real mistakes are named."""

import math

import torch

from helpers.circuits import head_outputs, path_ablated_forward
from helpers.exercises import lesson12
from helpers.induction import InductionModel, prefix_matching_score, repeated_sequences


def test_prefix_score_accepts_a_loop_and_a_broadcast_answer():
    def with_loops(attn_weights, token_ids):
        num_heads, num_tokens, _ = attn_weights.shape
        totals, counted = torch.zeros(num_heads), 0
        for i in range(num_tokens):
            matches = [j for j in range(1, i + 1) if token_ids[j - 1] == token_ids[i]]
            if matches:
                totals += attn_weights[:, i, matches].sum(dim=-1)
                counted += 1
        return totals / counted
    assert lesson12.prefix_score.check(with_loops).passed

    def with_roll(attn_weights, token_ids):
        previous = torch.roll(token_ids, 1)
        previous[0] = -1
        match = (previous[None, :] == token_ids[:, None]).tril()
        has = match.any(dim=-1)
        return (attn_weights * match).sum(-1)[:, has].mean(-1)
    assert lesson12.prefix_score.check(with_roll).passed


def test_prefix_score_names_the_occurrence_itself_and_the_all_queries_mean():
    def occurrence(attn_weights, token_ids):
        same = (token_ids[None, :] == token_ids[:, None]).tril(-1)
        return (attn_weights * same).sum(-1)[:, same.any(-1)].mean(-1)
    feedback = lesson12.prefix_score.check(occurrence)
    assert feedback.status == "wrong" and "earlier occurrence of ids_i itself" in feedback.message

    def all_queries(attn_weights, token_ids):
        previous = torch.cat([torch.tensor([-1]), token_ids[:-1]])
        return (attn_weights * (previous[None, :] == token_ids[:, None]).tril()).sum(-1).mean(-1)
    feedback = lesson12.prefix_score.check(all_queries)
    assert feedback.status == "wrong" and "every query" in feedback.message


def test_prefix_score_rejects_the_course_function_and_survives_nan():
    def via_course(attn_weights, token_ids):
        return prefix_matching_score(attn_weights[None], token_ids[None])
    feedback = lesson12.prefix_score.check(via_course)
    assert feedback.status == "wrong" and "not to call" in feedback.message

    def nan_answer(attn_weights, token_ids):
        return torch.full((attn_weights.shape[0],), float("nan"))
    feedback = lesson12.prefix_score.check(nan_answer)
    assert feedback.status == "wrong" and "nan" in feedback.message

    def inf_answer(attn_weights, token_ids):
        return torch.full((attn_weights.shape[0],), float("inf"))
    assert lesson12.prefix_score.check(inf_answer).status == "wrong"


def test_keys_ablated_names_the_bug_and_the_swapped_sides():
    feedback = lesson12.keys_ablated.check(lesson12.keys_ablated.buggy)
    assert feedback.status == "wrong" and "mean(dim=1)" in feedback.message

    def on_the_queries(stream, head_output, W_query, W_key):   # the labels swapped: queries ablated, keys whole
        ablated = stream - head_output + head_output.mean(0)
        scores = (ablated @ W_query) @ (stream @ W_key).mT / W_key.shape[1] ** 0.5
        return scores.masked_fill(torch.ones(scores.shape[-2:]).triu(1).bool(), -torch.inf).softmax(-1)
    feedback = lesson12.keys_ablated.check(on_the_queries)
    assert feedback.status == "wrong" and "from the queries" in feedback.message

    def zeroed(stream, head_output, W_query, W_key):
        scores = (stream @ W_query) @ ((stream - head_output) @ W_key).mT / W_key.shape[1] ** 0.5
        return scores.masked_fill(torch.ones(scores.shape[-2:]).triu(1).bool(), -torch.inf).softmax(-1)
    feedback = lesson12.keys_ablated.check(zeroed)
    assert feedback.status == "wrong" and "replacing the output by 0" in feedback.message, "zeroing is the bug in disguise"


def test_keys_ablated_accepts_answers_written_differently():
    def with_sdpa(stream, head_output, W_query, W_key):   # PyTorch's own attention, weights from a one-hot trick
        batch_size, num_tokens, _ = stream.shape
        keys = (stream - head_output + head_output.mean(dim=0)) @ W_key
        eye = torch.eye(num_tokens).expand(batch_size, num_tokens, num_tokens)
        return torch.nn.functional.scaled_dot_product_attention(stream @ W_query, keys, eye, is_causal=True)

    def by_the_keys_linearity(stream, head_output, W_query, W_key):   # k = x W_k - o W_k + mean(o) W_k
        keys = stream @ W_key - head_output @ W_key + (head_output @ W_key).mean(dim=0)
        scores = torch.einsum("btd,bsd->bts", stream @ W_query, keys) / math.sqrt(W_key.shape[1])
        mask = torch.arange(scores.shape[-1])[None, :] > torch.arange(scores.shape[-1])[:, None]
        return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)

    for answer in (with_sdpa, by_the_keys_linearity, lesson12.keys_ablated._solution):
        assert lesson12.keys_ablated.check(answer).passed, answer.__name__


def test_keys_ablated_is_section_3s_path_ablation_of_the_model():
    torch.manual_seed(0)
    model = InductionModel(17, 12, d_model=16, num_heads=2, num_layers=2).eval()
    ids = repeated_sequences(6, 12, 17, 3, 5, torch.Generator().manual_seed(1))[0]
    with torch.no_grad():
        x0 = model.token_embedding(ids) + model.position_embedding.weight[:12]
        outputs, _ = head_outputs(model, 0, x0)
        stream = x0 + outputs.sum(dim=1) + model.layers[0].out_proj.bias
        layer = model.layers[1]
        _, expected = path_ablated_forward(model, ids, 1, ("key",))
        for head in range(2):
            rows = slice(8 * head, 8 * head + 8)
            w_query = layer.W_query.weight[rows].T   # (d_model, D); the layer has no query/key bias
            w_key = layer.W_key.weight[rows].T
            assert layer.W_query.bias is None and layer.W_key.bias is None
            got = lesson12.keys_ablated._solution(stream, outputs[:, 1], w_query, w_key)
            torch.testing.assert_close(got, expected[:, head])


def test_messages_point_to_the_lesson12_names():
    def placeholder(*args):
        raise NotImplementedError
    assert "`lesson12.prefix_score.hint()`" in lesson12.prefix_score.check(placeholder).message
    assert "`lesson12.keys_ablated.hint()`" in lesson12.keys_ablated.check(placeholder).message


def test_keys_ablated_survives_inf_and_nan_answers():
    def inf_answer(stream, head_output, W_query, W_key):
        return torch.full(stream.shape[:2] + stream.shape[1:2], float("inf"))

    def nan_answer(stream, head_output, W_query, W_key):
        return torch.full(stream.shape[:2] + stream.shape[1:2], float("nan"))
    for answer in (inf_answer, nan_answer):
        feedback = lesson12.keys_ablated.check(answer)
        assert feedback.status == "wrong", answer.__name__
