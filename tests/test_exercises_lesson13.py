"""Notebook 13's exercises: right answers in any reasonable form pass, the real mistakes are named."""

import torch

from helpers.exercises import lesson13


def test_next_token_score_accepts_loops_and_a_masked_diagonal():
    assert lesson13.batch_next_token_score.check(lesson13._solution_score).passed

    def masked(attn_weights, padding_mask):
        real = (~padding_mask).float()
        pairs = real[:, :-1] * real[:, 1:]
        diagonal = torch.diagonal(attn_weights, 1, -2, -1)
        return torch.einsum("bht,bt->h", diagonal, pairs) / pairs.sum()
    assert lesson13.batch_next_token_score.check(masked).passed


def test_next_token_score_names_padding_previous_and_mean_of_means():
    for mistake, words in ((lesson13._with_padding, "padded positions"), (lesson13._previous, "PREVIOUS"),
                           (lesson13._mean_of_means, "short sentence")):
        feedback = lesson13.batch_next_token_score.check(mistake)
        assert feedback.status == "wrong" and words in feedback.message


def test_next_token_score_equals_the_course_score_on_one_unpadded_sentence():
    from helpers.bert_heads import next_token_score
    weights = torch.softmax(torch.randn(1, 3, 6, 6), dim=-1)
    got = lesson13._reference_score(weights, torch.zeros(1, 6, dtype=torch.bool))
    torch.testing.assert_close(got, next_token_score(weights[0]))


def test_head_weights_bug_is_named_and_the_fix_passes():
    feedback = lesson13.head_weights.check(lesson13.buggy_head_weights)
    assert feedback.status == "wrong" and "weight.T" in feedback.message
    assert lesson13.head_weights.check(lesson13._solution_head_weights).passed

    def with_linear(x, query_weight, query_bias, key_weight, key_bias, num_heads):
        b, t, d = x.shape
        q = torch.nn.functional.linear(x, query_weight, query_bias).view(b, t, num_heads, -1).transpose(1, 2)
        k = torch.nn.functional.linear(x, key_weight, key_bias).view(b, t, num_heads, -1).transpose(1, 2)
        return torch.softmax(q @ k.transpose(-2, -1) / (d // num_heads) ** 0.5, dim=-1)
    assert lesson13.head_weights.check(with_linear).passed
    feedback = lesson13.head_weights.check(lesson13._one_transposed)
    assert feedback.status == "wrong" and "both" in feedback.message


def test_head_weights_reference_is_the_real_models_attention():
    from helpers.pretrained import load_minilm
    encoder, tokenizer = load_minilm()
    token_ids, padding_mask = tokenizer.batch(["The river bank was muddy."])
    with torch.no_grad():
        out = encoder(token_ids, padding_mask)
        attention = encoder.blocks[1].attention
        got = lesson13._reference_head_weights(out.hidden_states[1], attention.W_query.weight, attention.W_query.bias,
                                               attention.W_key.weight, attention.W_key.bias, 12)
    torch.testing.assert_close(got, out.attn_weights[1], atol=1e-6, rtol=1e-5)


def test_head_weights_buggy_code_needs_only_torch_and_does_not_name_the_fix():
    import inspect
    source = inspect.getsource(lesson13.buggy_head_weights)
    namespace = {"torch": torch}
    exec(source, namespace)  # a learner's copy runs where only torch is imported
    x = torch.randn(1, 3, 4)
    assert namespace["buggy_head_weights"](x, torch.eye(4), torch.zeros(4), torch.eye(4), torch.zeros(4), 2).shape == (
        1, 2, 3, 3)
    assert "nn.Linear" not in source and ".T" not in source
    assert "query weight" not in lesson13.head_weights.title.lower()
    assert not any("weight.T" in hint or "x @ weight" in hint for hint in lesson13.head_weights._hints)
