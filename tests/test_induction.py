"""Notebook 12's helpers: the repeating data, the two-layer model, the head scores, the knock-out, the sink caches."""

import math

import pytest
import torch

from helpers.attention_sinks import SinkCache, start_token_weight, streaming_logits
from helpers.gqa import KVCache
from helpers.induction import (START, TOKENS, InductionModel, copying_score, encode, in_context_loss, in_context_mask,
                               knocked_out, prefix_matching_score, previous_token_score, repeated_sequences,
                               train_induction_model)


def test_sequences_repeat_a_pattern_of_distinct_tokens_with_a_period_that_varies():
    ids, periods = repeated_sequences(200, 32, 63, 4, 12, torch.Generator().manual_seed(0))
    assert ids.shape == (200, 32) and periods.shape == (200,)
    assert (ids[:, 0] == START).all() and (ids[:, 1:] != START).all()
    assert set(periods.tolist()) == set(range(4, 13)), "every period from 4 to 12 must occur"
    for row, period in zip(ids, periods.tolist()):
        pattern = row[1:1 + period]
        assert len(set(pattern.tolist())) == period, "the tokens of one period are distinct"
        assert torch.equal(row[1 + period:], row[1:32 - period]), "x_i = x_(i - L) after the first period"
    again, _ = repeated_sequences(200, 32, 63, 4, 12, torch.Generator().manual_seed(0))
    assert torch.equal(ids, again)


def test_in_context_mask_starts_at_the_first_token_that_occurred_before():
    mask = in_context_mask(torch.tensor([4, 6]), 10)   # (2, 9): position i predicts token i + 1
    assert mask[0].tolist() == [False] * 5 + [True] * 4
    assert mask[1].tolist() == [False] * 7 + [True] * 2


@pytest.mark.parametrize("kwargs, match", [(dict(min_period=5, max_period=4), "min_period"),
                                           (dict(max_period=31), "no room"), (dict(batch_size=0), "batch_size")])
def test_bad_data_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        repeated_sequences(**({"batch_size": 2} | kwargs))


def test_encode_names_every_token_once():
    assert len(TOKENS) == 63 and len(set(TOKENS)) == 63
    assert encode("aB3").tolist() == [[START, TOKENS.index("a"), TOKENS.index("B"), TOKENS.index("3")]]
    with pytest.raises(ValueError, match="letters and digits"):
        encode("a b")


def test_model_is_a_residual_stack_of_the_courses_attention_and_matches_its_cache():
    torch.manual_seed(0)
    model = InductionModel(63, 16, d_model=32, num_heads=2, num_layers=2).eval()
    ids, _ = repeated_sequences(3, 16, 63, 3, 5, torch.Generator().manual_seed(1))
    logits, weights = model(ids, return_weights=True)
    assert logits.shape == (3, 16, 63) and len(weights) == 2 and weights[1].shape == (3, 2, 16, 16)
    assert (weights[0].triu(1) == 0).all(), "causal"
    with torch.no_grad():   # by hand: x + layer(x), twice, then the read-out
        x = model.token_embedding(ids) + model.position_embedding.weight[:16]
        for layer in model.layers:
            x = x + layer(x)
        torch.testing.assert_close(model.unembed(x), logits)
    torch.testing.assert_close(streaming_logits(model, ids), logits)   # one token at a time through full caches
    with pytest.raises(ValueError, match="context_length"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="one KVCache per layer"):
        model(ids, caches=[KVCache()])


def test_knocked_out_zeroes_one_heads_columns_before_w_o_and_only_inside_the_block():
    torch.manual_seed(0)
    model = InductionModel(63, 12, d_model=16, num_heads=2, num_layers=2).eval()
    ids, _ = repeated_sequences(2, 12, 63, 3, 5, torch.Generator().manual_seed(1))
    reaching_w_o = []   # what enters layer 0's out_proj, after any knock-out
    hook = model.layers[0].out_proj.register_forward_hook(lambda _m, inputs, _out: reaching_w_o.append(inputs[0]))
    with torch.no_grad():
        normal = model(ids)
        with knocked_out(model, [(0, 1)]):
            silenced = model(ids)
        after = model(ids)
    hook.remove()
    merged, knocked, _ = reaching_w_o
    assert (knocked[..., 8:] == 0).all() and torch.equal(knocked[..., :8], merged[..., :8])  # head 1: columns 8..15
    assert not torch.allclose(normal, silenced) and torch.equal(normal, after)
    with pytest.raises(ValueError, match="no head 2 in layer 0"):
        with knocked_out(model, [(0, 2)]):
            pass


def test_scores_on_hand_made_patterns():
    ids = torch.tensor([[0, 5, 6, 7, 5, 6, 7, 5]])   # L = 3
    T = ids.shape[1]
    previous = torch.zeros(1, 1, T, T)
    previous[0, 0, 0, 0] = 1
    previous[0, 0, torch.arange(1, T), torch.arange(T - 1)] = 1          # every query on the token before it
    induction = torch.zeros(1, 1, T, T)
    induction[0, 0, :, 0] = 1                                            # the sink, for the queries with no match
    for i in range(4, T):                                                # x_i occurred at i - 3: look at i - 2
        induction[0, 0, i] = 0
        induction[0, 0, i, i - 2] = 1
    assert previous_token_score(previous).item() == 1.0
    assert previous_token_score(induction).item() == pytest.approx(1 / 7)  # only query 1, on key 0
    assert prefix_matching_score(induction, ids).item() == 1.0
    assert prefix_matching_score(previous, ids).item() == 0.0
    uniform = torch.ones(1, 2, T, T).tril() / torch.arange(1, T + 1)[:, None]
    expected = (1 / 5 + 1 / 6 + 1 / 7 + 2 / 8) / 4   # queries 4..7; query 7 has 2 matches
    assert prefix_matching_score(uniform, ids).tolist() == pytest.approx([expected] * 2)
    with pytest.raises(ValueError, match="token_ids"):
        prefix_matching_score(uniform, ids[:, :-1])


def test_copying_score_is_1_for_a_head_that_writes_its_token_and_0_for_a_silent_one():
    torch.manual_seed(0)
    model = InductionModel(9, 8, d_model=8, num_heads=2, num_layers=1)
    with torch.no_grad():
        model.token_embedding.weight.copy_(torch.eye(9, 8) * 3)
        model.layers[0].W_value.weight.zero_()
        model.layers[0].W_value.weight[:4, :4] = torch.eye(4)     # head 0 passes features 0..3 through
        model.layers[0].out_proj.weight.copy_(torch.eye(8))
        model.unembed.weight.copy_(torch.eye(9, 8))
    scores = copying_score(model, 0)
    assert scores[0].item() == pytest.approx(3 / 8)   # tokens 1, 2, 3 copied; tokens 4..8 have no features in head 0
    assert scores[1].item() == 0.0


def test_in_context_loss_counts_only_the_positions_that_can_be_copied():
    ids, periods = repeated_sequences(2, 10, 20, 3, 3, torch.Generator().manual_seed(0))
    perfect = torch.full((2, 10, 20), -30.0)
    perfect[:, :-1].scatter_(2, ids[:, 1:, None], 30.0)          # right everywhere ...
    perfect[:, :4] = 0.0                                        # ... but uniform where nothing can be copied
    assert in_context_loss(perfect, ids, periods).item() < 1e-6
    assert in_context_loss(torch.zeros(2, 10, 20), ids, periods).item() == pytest.approx(math.log(20))


def test_start_token_weight_splits_first_period_and_later_queries():
    T = 8
    weights = torch.zeros(1, 1, T, T)
    weights[0, 0, :, 0] = 1.0
    weights[0, 0, 5:, 0] = 0.25
    weights[0, 0, 5:, 1] = 0.75
    first, later = start_token_weight(weights, torch.tensor([4]))   # first period: queries 1..4; later: 5..7
    assert first.tolist() == [1.0] and later.tolist() == [0.25]


def test_sink_cache_keeps_the_first_tokens_and_the_window():
    cache = SinkCache(window_size=3, num_sinks=1)
    for t in range(7):
        keys = torch.full((1, 1, 1, 2), float(t))
        held, _ = cache.update(keys, keys.clone())
        assert held[0, 0, :, 0].tolist() == ([0.0] + list(range(max(1, t - 3), t + 1)) if t > 3 else list(range(t + 1)))
    assert len(cache) == 4 and cache.num_seen == 7 and "num_sinks=1" in repr(cache)
    with pytest.raises(ValueError, match="window_size"):
        SinkCache(0)


def test_streaming_with_a_window_drops_the_start_token_and_a_sink_cache_keeps_it():
    torch.manual_seed(0)
    model = InductionModel(63, 12, d_model=16, num_heads=2, num_layers=2).eval()
    ids, _ = repeated_sequences(2, 12, 63, 3, 5, torch.Generator().manual_seed(1))
    full = model(ids).detach()
    window = streaming_logits(model, ids, lambda: KVCache(window_size=4))
    sink = streaming_logits(model, ids, lambda: SinkCache(window_size=4))
    torch.testing.assert_close(window[:, :5], full[:, :5])   # up to position 4 the window still holds everything
    torch.testing.assert_close(sink[:, :6], full[:, :6])     # <s> + 4 recent: everything up to position 5
    assert not torch.allclose(window[:, 5:], full[:, 5:]) and not torch.allclose(sink[:, 6:], full[:, 6:])


def test_a_short_run_keeps_its_checkpoints():
    run = train_induction_model(num_steps=20, checkpoint_every=10, num_eval=8)
    assert run.steps == [0, 10, 20] and len(run.losses) == 20
    assert run.previous_token.shape == run.prefix_matching.shape == run.copying.shape == (3, 2, 2)
    assert run.watch_weights.shape == (3, 2, 2, 32, 32) and run.watch_ids.shape == (32,)
    assert run.in_context_losses[0] == pytest.approx(math.log(62), abs=0.1)
    again = train_induction_model(num_steps=20, checkpoint_every=10, num_eval=8)
    assert again.losses == run.losses and torch.equal(again.watch_weights, run.watch_weights)
    assert run.checkpoint(10) == 1
    with pytest.raises(ValueError, match="no checkpoint at step 5"):
        run.checkpoint(5)
