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


def _batch(lengths, width=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    num_tokens = max(lengths)
    last_hidden = torch.randn(len(lengths), num_tokens, width, generator=g)
    padding_mask = torch.arange(num_tokens)[None, :] >= torch.tensor(lengths)[:, None]
    return last_hidden, padding_mask


def test_word_pool_bug_is_named_and_fixes_written_differently_pass():
    feedback = lesson13.word_pool.check(lesson13.buggy_word_pool)
    assert feedback.status == "wrong" and "LAST COLUMN" in feedback.message
    assert lesson13.word_pool.check(lesson13._solution_pool).passed

    def one_sentence_at_a_time(last_hidden, padding_mask):   # a loop over the batch, slicing each sentence's words
        rows = []
        for vectors, padded in zip(last_hidden, padding_mask):
            n = int((~padded).sum())
            words = vectors[1:n - 1]
            rows.append(words.mean(0) / words.mean(0).norm() if len(words) else torch.zeros(vectors.shape[-1]))
        return torch.stack(rows)

    def summed_not_averaged(last_hidden, padding_mask):      # dividing by the count changes no direction
        lengths = (~padding_mask).sum(1, keepdim=True)
        positions = torch.arange(padding_mask.shape[1])
        words = ((positions > 0) & (positions < lengths - 1)).float()
        return torch.nn.functional.normalize(torch.einsum("btd,bt->bd", last_hidden, words), dim=-1)
    assert lesson13.word_pool.check(one_sentence_at_a_time).passed
    assert lesson13.word_pool.check(summed_not_averaged).passed


def test_word_pool_names_each_class_of_wrong_answer():
    for mistake, words in ((lesson13._kept_sep, "only [CLS] is left out"),
                           (lesson13._model_pooling, "the model's own sentence vector"),
                           (lesson13._padding_in, "padded positions"),
                           (lesson13._not_normalised, "length 1"),
                           (lesson13._nan_without_words, "row of zeros")):
        feedback = lesson13.word_pool.check(mistake)
        assert feedback.status == "wrong" and words in feedback.message, (mistake.__name__, feedback.message)

    def unmasked(last_hidden, padding_mask):                 # no mask at all: every position, padding included
        return torch.nn.functional.normalize(last_hidden.mean(1), dim=-1)
    assert lesson13.word_pool.check(unmasked).status == "wrong"


def test_word_pool_boundaries_no_padding_and_no_words():
    last_hidden, padding_mask = _batch([6, 6])                # no padding: the buggy code happens to be right
    torch.testing.assert_close(lesson13.buggy_word_pool(last_hidden, padding_mask),
                               lesson13._reference_pool(last_hidden, padding_mask))
    last_hidden, padding_mask = _batch([2, 5])                # [CLS] [SEP] only: a row of zeros, never nan
    pooled = lesson13._reference_pool(last_hidden, padding_mask)
    assert torch.equal(pooled[0], torch.zeros(5)) and not pooled.isnan().any()
    torch.testing.assert_close(pooled[1].norm(), torch.tensor(1.0))
    torch.testing.assert_close(pooled[1], torch.nn.functional.normalize(last_hidden[1, 1:4].mean(0), dim=0))
    descriptions = [case.description for case in lesson13._pool_cases(torch.Generator().manual_seed(0))]
    assert any("no padding" in d for d in descriptions) and any("without words" in d for d in descriptions)


def test_word_pool_rejects_answers_that_change_their_inputs_and_its_answers_do_not():
    for changes, name in ((lesson13._changes_the_mask, "padding_mask"),
                          (lesson13._zeros_the_padding_in_place, "last_hidden")):
        last_hidden, padding_mask = _batch([7, 4])
        torch.testing.assert_close(changes(last_hidden.clone(), padding_mask.clone()),
                                   lesson13._reference_pool(last_hidden, padding_mask))   # the values are right
        feedback = lesson13.word_pool.check(changes)
        assert feedback.status == "wrong" and f"`{name}` in place" in feedback.message
    for function in (lesson13._reference_pool, lesson13._solution_pool, lesson13.buggy_word_pool):
        last_hidden, padding_mask = _batch([7, 4, 2])
        before = last_hidden.clone(), padding_mask.clone()
        function(last_hidden, padding_mask)
        assert torch.equal(last_hidden, before[0]) and torch.equal(padding_mask, before[1]), function.__name__


def test_word_pool_reference_on_the_real_model_equals_each_sentence_alone():
    from helpers.bert_heads import read_sentence
    from helpers.pretrained import load_minilm
    encoder, tokenizer = load_minilm()
    sentences = ["The river bank was muddy.", "Yes.", "Attention lets every token look at every other token."]
    token_ids, padding_mask = tokenizer.batch(sentences)
    with torch.no_grad():
        pooled = lesson13._reference_pool(encoder(token_ids, padding_mask).hidden_states[-1], padding_mask)
    for i, sentence in enumerate(sentences):   # the sentence run alone, no padding: the mean of its word tokens
        alone = read_sentence(encoder, tokenizer, sentence).hidden[-1]   # (T, d): [CLS] ... [SEP]
        torch.testing.assert_close(pooled[i], torch.nn.functional.normalize(alone[1:-1].mean(0), dim=0),
                                   atol=1e-5, rtol=1e-4)


def test_word_pool_buggy_code_needs_only_torch_and_does_not_name_the_fix():
    import inspect
    source = inspect.getsource(lesson13.buggy_word_pool)
    namespace = {"torch": torch}
    exec(source, namespace)  # a learner's copy runs where only torch is imported
    last_hidden, padding_mask = _batch([4, 3])
    got = namespace["buggy_word_pool"](last_hidden, padding_mask)
    assert got.shape == (2, 5) and not got.isnan().any()
    torch.testing.assert_close(got.norm(dim=-1), torch.ones(2))
    text = " ".join([lesson13.word_pool.title, lesson13.word_pool.task, *lesson13.word_pool._hints])
    assert "lengths - 1" not in text and "last column" not in text.lower()


def test_word_pool_names_the_width_as_the_notation_card_does():
    import inspect
    import re
    text = lesson13.word_pool.task + inspect.getsource(lesson13.buggy_word_pool)
    assert "(B, T, d_model)" in text and "(B, d_model)" in text
    assert not re.search(r"\(B, (T, )?d\)", text), "the card's name for a model's width is d_model"
