"""Linear attention: the recurrent state form equals the masked parallel form and a direct sum over the keys;
the delta rule stores what it is told; the look-up experiment separates softmax attention from a fixed state."""

import pytest
import torch
import torch.nn.functional as F

from helpers.recurrent import (RECALL_METHODS, associative_recall, delta_rule_recurrent, elu_feature_map,
                                      linear_attention, linear_attention_recurrent)


def _qkv(seed=0, shape=(2, 3, 9), d_k=5, d_v=4):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, d_k, generator=g), torch.randn(*shape, d_k, generator=g),
            torch.randn(*shape, d_v, generator=g))


def test_the_feature_map_is_elu_plus_one_and_positive():
    x = torch.linspace(-30, 5, 101)
    torch.testing.assert_close(elu_feature_map(x), torch.where(x > 0, x + 1, torch.exp(x)))
    assert bool((elu_feature_map(x) > 0).all())


def test_the_parallel_form_is_katharopoulos_equation():
    queries, keys, values = _qkv()
    context, weights = linear_attention(queries, keys, values)
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1
    for t in range(queries.shape[-2]):                                   # query t against keys 0..t, by hand
        sims = (phi_q[..., t:t + 1, :] * phi_k[..., :t + 1, :]).sum(-1)  # (2, 3, t + 1)
        expected = (sims[..., None] * values[..., :t + 1, :]).sum(-2) / sims.sum(-1, keepdim=True)
        torch.testing.assert_close(context[..., t, :], expected)
    assert bool((weights.triu(1) == 0).all())
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 9))


def test_the_recurrent_form_equals_the_parallel_form_and_continues_from_its_state():
    queries, keys, values = _qkv(1)
    parallel, _ = linear_attention(queries, keys, values)
    recurrent, (S, z) = linear_attention_recurrent(queries, keys, values)
    torch.testing.assert_close(recurrent, parallel)
    first, state = linear_attention_recurrent(queries[..., :4, :], keys[..., :4, :], values[..., :4, :])
    rest, _ = linear_attention_recurrent(queries[..., 4:, :], keys[..., 4:, :], values[..., 4:, :], state=state)
    torch.testing.assert_close(torch.cat([first, rest], dim=-2), parallel)
    assert S.shape == (2, 3, 5, 4) and z.shape == (2, 3, 5)       # the state does not grow with the tokens


def test_a_recurrence_without_the_normaliser_is_not_linear_attention():
    queries, keys, values = _qkv(2)
    parallel, _ = linear_attention(queries, keys, values)
    phi_q, phi_k = elu_feature_map(queries), elu_feature_map(keys)
    unnormalised = (phi_q @ phi_k.transpose(-2, -1)).tril() @ values
    assert not torch.allclose(unnormalised, parallel, atol=1e-3)


def test_the_delta_rule_overwrites_and_reads_back_orthogonal_keys():
    keys = torch.eye(4)[None].repeat(1, 2, 1)                   # (1, 8, 4): each of 4 keys written twice
    values = torch.randn(1, 8, 3, generator=torch.Generator().manual_seed(3))
    _, S = delta_rule_recurrent(keys, keys, values, torch.ones(1, 8))
    torch.testing.assert_close(torch.eye(4) @ S[0], values[0, 4:])   # the second writes replaced the first
    _, S_half = delta_rule_recurrent(keys[:, :4], keys[:, :4], values[:, :4], torch.full((1, 4), 0.5))
    torch.testing.assert_close(S_half[0], 0.5 * values[0, :4])


def test_softmax_recalls_what_a_fixed_state_cannot():
    assert associative_recall("softmax", 128) > 0.99
    assert associative_recall("linear", 64) < 0.1
    assert associative_recall("least squares", 8) == 1.0 and associative_recall("least squares", 128) < 0.2
    assert associative_recall("delta rule", 2) == 1.0 and associative_recall("delta rule", 64) < 0.3


@pytest.mark.parametrize("call, error, match", [
    (lambda: linear_attention(torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 3)), ValueError, "same shape"),
    (lambda: linear_attention(torch.randn(2, 3), torch.randn(2, 3), torch.randn(3, 3)), ValueError, "one row"),
    (lambda: linear_attention_recurrent(torch.ones(2, 3, dtype=torch.long), torch.randn(2, 3), torch.randn(2, 3)),
     TypeError, "floating-point"),
    (lambda: delta_rule_recurrent(torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3), torch.ones(3)),
     ValueError, "betas must have shape"),
    (lambda: associative_recall("mamba", 4), ValueError, "method must be one of"),
    (lambda: associative_recall("softmax", 0), ValueError, "num_pairs"),
])
def test_bad_inputs_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_methods_listed():
    assert RECALL_METHODS == ("softmax", "linear", "delta rule", "least squares")
