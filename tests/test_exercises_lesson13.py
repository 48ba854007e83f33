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


def test_masked_weights_bug_is_named_and_fixes_written_differently_pass():
    feedback = lesson13.masked_weights.check(lesson13.buggy_masked_weights)
    assert feedback.status == "wrong" and "None, None, :]" in feedback.message
    assert lesson13.masked_weights.check(lesson13._solution_masked).passed

    def with_where(queries, keys, padding_mask):          # an additive mask with -1e9, via torch.where
        scores = torch.einsum("bhid,bhjd->bhij", queries, keys) / queries.shape[-1] ** 0.5
        scores = scores + torch.where(padding_mask, -1e9, 0.0).unsqueeze(1).unsqueeze(2)
        return scores.softmax(-1)

    def with_sdpa(queries, keys, padding_mask):           # PyTorch's own attention, values = identity
        t = queries.shape[-2]
        eye = torch.eye(t).expand(*queries.shape[:2], t, t)
        return torch.nn.functional.scaled_dot_product_attention(queries, keys, eye,
                                                                attn_mask=~padding_mask[:, None, None, :])
    assert lesson13.masked_weights.check(with_where).passed
    assert lesson13.masked_weights.check(with_sdpa).passed
    feedback = lesson13.masked_weights.check(lesson13._filled_with_zero)
    assert feedback.status == "wrong" and "-inf" in feedback.message

    def unmasked(queries, keys, padding_mask):
        return torch.softmax(queries @ keys.transpose(-2, -1) / queries.shape[-1] ** 0.5, dim=-1)
    assert not lesson13.masked_weights.check(unmasked).passed


def test_masked_weights_reference_is_the_real_models_attention():
    from helpers.pretrained import load_minilm
    encoder, tokenizer = load_minilm()
    token_ids, padding_mask = tokenizer.batch(["The river bank was muddy.", "Yes."])
    with torch.no_grad():
        out = encoder(token_ids, padding_mask)
        attention = encoder.blocks[1].attention
        x = out.hidden_states[1]
        b, t, _ = x.shape
        q = attention.W_query(x).view(b, t, 12, 32).transpose(1, 2)
        k = attention.W_key(x).view(b, t, 12, 32).transpose(1, 2)
        got = lesson13._reference_masked(q, k, padding_mask)
    real = ~padding_mask
    for i in range(b):   # the real queries' rows: exactly the model's
        torch.testing.assert_close(got[i][:, real[i]], out.attn_weights[1][i][:, real[i]], atol=1e-6, rtol=1e-5)


def test_masked_weights_buggy_code_needs_only_torch_and_does_not_name_the_fix():
    import inspect
    source = inspect.getsource(lesson13.buggy_masked_weights)
    namespace = {"torch": torch}
    exec(source, namespace)  # a learner's copy runs where only torch is imported
    q = torch.randn(2, 2, 3, 4)
    mask = torch.tensor([[False, False, False], [False, False, True]])
    got = namespace["buggy_masked_weights"](q, q, mask)
    assert got.shape == (2, 2, 3, 3) and not got.isnan().any()
    text = " ".join([lesson13.masked_weights.title, lesson13.masked_weights.task, *lesson13.masked_weights._hints])
    assert "queries instead" not in text.lower() and "None, None, :]" not in text and "rows" not in text.split("Find")[-1]
