"""CrossAttention equals PyTorch's cross-attention; the number-words task and model do what notebook 10 says."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import helpers
from helpers.cross_attention import CrossAttention
from helpers.number_words import (NumberWordsModel, NumberWordsTask, number_to_words, train_number_words)

SHAPES = [  # batch_size, num_queries, num_keys, d_in, d_out, num_heads, d_source
    (2, 3, 5, 4, 8, 2, 6),
    (3, 6, 2, 8, 8, 4, 8),
    (1, 1, 7, 5, 6, 3, 3),
    (4, 4, 4, 6, 12, 1, 10),
]


def _inputs(batch_size, num_queries, num_keys, d_in, d_source, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, num_queries, d_in, generator=g)
    source = torch.randn(batch_size, num_keys, d_source, generator=g)
    lengths = torch.randint(1, num_keys + 1, (batch_size,), generator=g)
    lengths[0] = num_keys   # one source without padding
    return x, source, helpers.padding_mask(lengths, num_keys)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("qkv_bias", [False, True])
def test_equals_nn_multiheadattention_with_kdim_vdim_and_key_padding(shape, qkv_bias):
    batch_size, num_queries, num_keys, d_in, d_out, num_heads, d_source = shape
    torch.manual_seed(0)
    ours = CrossAttention(d_in, d_out, 0.0, num_heads, qkv_bias=qkv_bias, d_source=d_source)
    theirs = nn.MultiheadAttention(d_out, num_heads, batch_first=True, kdim=d_source, vdim=d_source)
    with torch.no_grad():
        # nn.MultiheadAttention's queries have width embed_dim (= d_out): give it our projected queries and an
        # identity query projection; keys and values get copies of our weights.
        if theirs.in_proj_weight is not None:   # kdim == vdim == embed_dim packs the three projections together
            theirs.in_proj_weight.copy_(torch.cat([torch.eye(d_out), ours.W_key.weight, ours.W_value.weight]))
        else:
            theirs.q_proj_weight.copy_(torch.eye(d_out))
            theirs.k_proj_weight.copy_(ours.W_key.weight)
            theirs.v_proj_weight.copy_(ours.W_value.weight)
        biases = [torch.zeros(d_out)] + [layer.bias if qkv_bias else torch.zeros(d_out)
                                         for layer in (ours.W_key, ours.W_value)]
        theirs.in_proj_bias.copy_(torch.cat(biases))
        theirs.out_proj.load_state_dict(ours.out_proj.state_dict())
    x, source, pad = _inputs(batch_size, num_queries, num_keys, d_in, d_source)
    expected, expected_weights = theirs(ours.W_query(x), source, source, key_padding_mask=pad,
                                        average_attn_weights=False)
    context_vecs, attn_weights = ours(x, source, pad, return_weights=True)
    torch.testing.assert_close(context_vecs, expected)
    torch.testing.assert_close(attn_weights, expected_weights)
    assert attn_weights.shape == (batch_size, num_heads, num_queries, num_keys)


def test_equals_nn_multiheadattention_with_weights_copied_directly():
    torch.manual_seed(1)
    ours = CrossAttention(8, 8, 0.0, 2, d_source=5)
    theirs = nn.MultiheadAttention(8, 2, batch_first=True, kdim=5, vdim=5)
    with torch.no_grad():
        theirs.q_proj_weight.copy_(ours.W_query.weight)
        theirs.k_proj_weight.copy_(ours.W_key.weight)
        theirs.v_proj_weight.copy_(ours.W_value.weight)
        theirs.in_proj_bias.zero_()
        theirs.out_proj.load_state_dict(ours.out_proj.state_dict())
    x, source, pad = _inputs(3, 4, 6, 8, 5, seed=3)
    torch.testing.assert_close(ours(x, source, pad), theirs(x, source, source, key_padding_mask=pad)[0])


@pytest.mark.parametrize("shape", SHAPES)
def test_equals_sdpa_per_head(shape):
    batch_size, num_queries, num_keys, d_in, d_out, num_heads, d_source = shape
    torch.manual_seed(2)
    module = CrossAttention(d_in, d_out, 0.0, num_heads, d_source=d_source)
    x, source, pad = _inputs(batch_size, num_queries, num_keys, d_in, d_source, seed=4)

    def split(t):
        return t.view(batch_size, t.shape[1], num_heads, d_out // num_heads).transpose(1, 2)

    q, k, v = split(module.W_query(x)), split(module.W_key(source)), split(module.W_value(source))
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=~pad[:, None, None, :])   # True = keep
    expected = module.out_proj(fused.transpose(1, 2).reshape(batch_size, num_queries, d_out))
    torch.testing.assert_close(module(x, source, pad), expected)


def test_padding_changes_nothing_and_gets_no_weight():
    torch.manual_seed(0)
    module = CrossAttention(4, 6, 0.0, 2, d_source=3)
    x, source, _ = _inputs(2, 3, 5, 4, 3)
    pad = helpers.padding_mask([5, 2])
    context_vecs, attn_weights = module(x, source, pad, return_weights=True)
    assert attn_weights[1, :, :, 2:].abs().max() == 0
    torch.testing.assert_close(attn_weights.sum(dim=-1), torch.ones(2, 2, 3))
    trimmed = module(x[1:], source[1:, :2])   # the short source without its padding, no mask needed
    torch.testing.assert_close(context_vecs[1:], trimmed)
    unmasked = module(x[1:], source[1:])
    assert not torch.allclose(unmasked, trimmed), "without the mask the padding must change the result"


def test_no_mask_is_plain_attention_over_every_source_token():
    torch.manual_seed(0)
    module = CrossAttention(4, 4, 0.0, 1)
    x, source, _ = _inputs(2, 3, 5, 4, 4)
    torch.testing.assert_close(module(x, source), module(x, source, torch.zeros(2, 5, dtype=torch.bool)))


def test_parameters_in_the_course_order_and_dropout_only_in_training():
    torch.manual_seed(0)
    module = CrossAttention(4, 6, 0.5, 2, qkv_bias=True, d_source=3)
    names = [name for name, _ in module.named_parameters()]
    assert names == ["W_query.weight", "W_query.bias", "W_key.weight", "W_key.bias", "W_value.weight",
                     "W_value.bias", "out_proj.weight", "out_proj.bias"]
    assert module.W_key.weight.shape == (6, 3) and module.W_query.weight.shape == (6, 4)
    x, source, pad = _inputs(2, 3, 5, 4, 3)
    assert not torch.allclose(module(x, source, pad), module(x, source, pad))
    module.eval()
    torch.testing.assert_close(module(x, source, pad), module(x, source, pad))
    assert "d_source=3" in repr(module)


def test_gradients_reach_every_parameter_and_both_inputs():
    torch.manual_seed(0)
    module = CrossAttention(4, 6, 0.0, 3, qkv_bias=True, d_source=5)
    x, source, pad = _inputs(2, 3, 4, 4, 5)
    x.requires_grad_(True)
    source.requires_grad_(True)
    module(x, source, pad).square().sum().backward()
    for name, param in module.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    assert x.grad.abs().sum() > 0
    assert source.grad[1:, :].abs().sum() > 0
    padded = pad.nonzero()
    for b, j in padded.tolist():   # padded source tokens get no gradient: nothing read them
        assert source.grad[b, j].abs().max() == 0


@pytest.mark.parametrize("call, error, words", [
    (lambda m, x, y, p: m(x, x, p), ValueError, "source must have last dimension d_source=5"),
    (lambda m, x, y, p: m(y, y, p), ValueError, "x must have last dimension d_in=4"),
    (lambda m, x, y, p: m(x, y[:1], p), ValueError, "same number of sequences"),
    (lambda m, x, y, p: m(x, y, p[:, :3]), ValueError, "source_padding_mask must have shape"),
    (lambda m, x, y, p: m(x, y, p.transpose(0, 1)), ValueError, "source_padding_mask must have shape"),
    (lambda m, x, y, p: m(x, y, p.float()), TypeError, "bool"),
    (lambda m, x, y, p: m(x, y, torch.ones_like(p)), ValueError, "hides every token"),
    (lambda m, x, y, p: m(x[0], y, p), ValueError, "(batch_size, num_queries, d_in)"),
    (lambda m, x, y, p: m(x, y.long(), p), TypeError, "source must hold floating-point"),
])
def test_bad_input_gets_a_clear_error(call, error, words):
    torch.manual_seed(0)
    module = CrossAttention(4, 6, 0.0, 2, d_source=5)
    x, source, pad = _inputs(2, 3, 4, 4, 5)
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        call(module, x, source, pad)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(d_out=7, num_heads=2), ValueError, "divisible"),
    (dict(d_source=0), ValueError, "d_source"),
    (dict(qkv_bias=1), TypeError, "qkv_bias"),
    (dict(dropout=1.0), ValueError, "dropout"),
])
def test_bad_construction(kwargs, error, words):
    options = dict(d_in=4, d_out=6, dropout=0.0, num_heads=2) | kwargs
    with pytest.raises(error, match=words):
        CrossAttention(**options)


# --- the number-words task and model ----------------------------------------------------------------------------
def test_number_words():
    assert [number_to_words(n) for n in (10, 12, 19, 20, 31, 47, 99)] == [
        "ten", "twelve", "nineteen", "twenty", "thirty-one", "forty-seven", "ninety-nine"]
    for bad in (9, 100, 3.0, True):
        with pytest.raises(ValueError):
            number_to_words(bad)


def test_task_samples_padded_sources_and_matching_targets():
    task = NumberWordsTask(max_numbers=4)
    source_ids, target_ids = task.sample(500, torch.Generator().manual_seed(0))
    assert source_ids.shape == (500, 8) and target_ids.shape == (500, 4)
    torch.testing.assert_close(task.targets(source_ids), target_ids)
    counts = (target_ids != task.ignore_id).sum(dim=1)
    assert set(counts.tolist()) == {1, 2, 3, 4}
    pad = task.source_padding_mask(source_ids)
    assert torch.equal(pad, helpers.padding_mask(2 * counts, 8))      # padding on the right, two digits a number
    assert (source_ids[:, 0] >= 1).all()                              # tens digits 1-9: numbers 10 to 99
    ideal = task.ideal_pattern()
    assert ideal.shape == (2, 4, 8) and torch.equal(ideal.sum(dim=(0, 2)), torch.full((4,), 2.0))
    first = torch.tensor([7, 8, 5, 3, 10, 10, 10, 10])
    assert task.source_tokens(first) == ["7", "8", "5", "3", "pad", "pad", "pad", "pad"]
    assert task.source_labels(first)[:2] == ["7\npos 0", "8\npos 1"]
    assert task.target_words(task.targets(first)) == ["seventy-eight", "fifty-three", "pad", "pad"]


def test_held_out_part_of_the_source_space_is_never_trained_on(monkeypatch):
    task = NumberWordsTask(max_numbers=4)
    held, _ = task.sample(300, torch.Generator().manual_seed(0), held_out=True)
    rest, rest_targets = task.sample(300, torch.Generator().manual_seed(0), held_out=False)
    assert held.shape == (300, 8) and rest.shape == (300, 8)
    assert task.is_held_out(held).all() and not task.is_held_out(rest).any()
    torch.testing.assert_close(task.targets(rest), rest_targets)
    everything, _ = task.sample(2000, torch.Generator().manual_seed(0))
    assert 0.08 < task.is_held_out(everything).float().mean() < 0.22        # about 1 source in 7
    assert task.is_held_out(torch.tensor([[7, 0, 10, 10, 10, 10, 10, 10], [7, 1, 10, 10, 10, 10, 10, 10]])).tolist() \
        == [True, False]
    with pytest.raises(TypeError, match="held_out"):
        task.sample(4, held_out=1)
    seen = []
    original = task.sample
    monkeypatch.setattr(task, "sample", lambda *a, **k: seen.append(k.get("held_out")) or original(*a, **k))
    train_number_words(task, test_ids=held[:10], num_steps=3, seed=0)
    assert seen == [False, False, False], "training must draw only from outside the held-out part"


def test_task_rejects_bad_ids():
    task = NumberWordsTask(max_numbers=2)
    with pytest.raises(TypeError):
        task.targets(torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"\(\.\.\., 4\)"):
        task.targets(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="lie in"):
        task.targets(torch.full((1, 4), 11))


def test_model_shapes_masking_and_errors():
    torch.manual_seed(0)
    model = NumberWordsModel(max_numbers=4, d_model=16, num_heads=2)
    source_ids = torch.tensor([[9, 9, 8, 2, 10, 10, 10, 10], [1, 2, 3, 4, 5, 6, 7, 8]])
    logits, weights = model(source_ids, return_weights=True)
    assert logits.shape == (2, 4, 90) and weights.shape == (2, 2, 4, 8)
    assert weights[0, :, :, 4:].abs().max() == 0
    torch.testing.assert_close(model(source_ids[:1, :4]), logits[:1])   # trimming the padding changes nothing
    with pytest.raises(ValueError, match="at most 8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(TypeError):
        model(source_ids.float())
    with pytest.raises(ValueError, match="lie in"):
        model(source_ids + 5)


def test_training_finds_the_alignment_and_is_reproducible():
    task = NumberWordsTask()
    test_ids, _ = task.sample(300, torch.Generator().manual_seed(2), held_out=True)
    state = torch.random.get_rng_state()
    run = train_number_words(task, test_ids=test_ids, num_steps=150, seed=0)
    assert torch.equal(state, torch.random.get_rng_state()), "training must not move the caller's random stream"
    assert run.steps == [0, 25, 50, 75, 100, 125, 150] and len(run.losses) == 150
    assert run.accuracies[0] < 0.05 and run.accuracies[-1] == 1.0
    _, weights = run.model(test_ids, return_weights=True)                      # (N, H, T_q, T_k)
    real = task.targets(test_ids) != task.ignore_id
    on_digits = (weights.detach()[:, :, None] * task.ideal_pattern()).sum(dim=-1)   # (N, H, 2, T_q)
    best = on_digits.permute(0, 3, 1, 2)[real].mean(dim=0)                     # (H, 2): head x (tens, units)
    assert best.max(dim=1).values.min() > 0.75, "each head reads one digit of the number"
    assert set(best.argmax(dim=1).tolist()) == {0, 1}, "the two heads read different digits"
    again = train_number_words(task, test_ids=test_ids, num_steps=150, seed=0)
    assert again.losses == run.losses


def test_training_rejects_bad_settings():
    task = NumberWordsTask()
    test_ids, _ = task.sample(4, torch.Generator().manual_seed(0))
    with pytest.raises(TypeError):
        train_number_words("task", test_ids=test_ids)
    with pytest.raises(ValueError):
        train_number_words(task, test_ids=test_ids, lr=0)
    with pytest.raises(ValueError):
        train_number_words(task, test_ids=test_ids[:, :5])


def test_model_without_its_mask_reads_the_padding():
    from helpers.number_words import NumberWordsModel, NumberWordsTask
    torch.manual_seed(0)
    model = NumberWordsModel()
    ids = torch.tensor([[7, 0] + [NumberWordsTask.pad_id] * 6])
    with torch.no_grad():
        _, masked = model(ids, return_weights=True)
        _, unmasked = model(ids, return_weights=True, use_mask=False)
    assert masked[..., 2:].sum() == 0 and unmasked[..., 2:].sum() > 0.5
    with pytest.raises(TypeError, match="use_mask"):
        model(ids, use_mask=1)
