"""The five modules: the book's numbers, shapes, masks, PyTorch equivalence, gradients, errors."""

import pytest
import torch
from torch import nn

import helpers
from helpers import (
    CausalAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttention_v1,
    SelfAttention_v2,
)

_, INPUTS = helpers.your_journey()
BATCH = torch.stack((INPUTS, INPUTS))  # (2, 6, 3), as in the book

# First rows printed in chapter 3 of the book, for the seeds it uses.
BOOK_CASES = [
    ("v1", 123, lambda: SelfAttention_v1(3, 2), INPUTS, [[0.2996, 0.8053], [0.3061, 0.8210]]),
    ("v2", 789, lambda: SelfAttention_v2(3, 2), INPUTS, [[-0.0739, 0.0713], [-0.0748, 0.0703]]),
    ("causal", 123, lambda: CausalAttention(3, 2, 6, 0.0), BATCH, [[-0.4519, 0.2216], [-0.5874, 0.0058]]),
    ("wrapper", 123, lambda: MultiHeadAttentionWrapper(3, 2, 6, 0.0, num_heads=2), BATCH,
     [[-0.4519, 0.2216, 0.4772, 0.1063], [-0.5874, 0.0058, 0.5891, 0.3257]]),
    ("mha", 123, lambda: MultiHeadAttention(3, 2, 6, 0.0, num_heads=2), BATCH, [[0.3190, 0.4858], [0.2943, 0.3897]]),
]


@pytest.mark.parametrize("name,seed,build,x,first_rows", BOOK_CASES, ids=[c[0] for c in BOOK_CASES])
def test_same_numbers_as_the_book(name, seed, build, x, first_rows):
    torch.manual_seed(seed)
    out = build()(x)
    rows = out[:2] if out.dim() == 2 else out[0, :2]
    torch.testing.assert_close(rows, torch.tensor(first_rows), atol=1e-4, rtol=0)


def test_gpt2_sized_layer_parameter_count():
    mha = MultiHeadAttention(d_in=768, d_out=768, context_length=1024, dropout=0.0, num_heads=12)
    assert sum(p.numel() for p in mha.parameters()) == 2_360_064


def test_parameter_creation_order():
    names = [n for n, _ in MultiHeadAttention(4, 4, 3, 0.0, 2, qkv_bias=True).named_parameters()]
    assert names == ["W_query.weight", "W_query.bias", "W_key.weight", "W_key.bias",
                     "W_value.weight", "W_value.bias", "out_proj.weight", "out_proj.bias"]


def _all_modules(d_in=5, d_out=4, context_length=8, dropout=0.0, num_heads=2):
    return {
        "v1": SelfAttention_v1(d_in, d_out),
        "v2": SelfAttention_v2(d_in, d_out),
        "causal": CausalAttention(d_in, d_out, context_length, dropout),
        "wrapper": MultiHeadAttentionWrapper(d_in, d_out, context_length, dropout, num_heads),
        "mha": MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads),
    }


EXPECTED_SHAPES = {  # for x of shape (3, 7, 5), d_out=4, 2 heads
    "v1": ((3, 7, 4), (3, 7, 7)), "v2": ((3, 7, 4), (3, 7, 7)), "causal": ((3, 7, 4), (3, 7, 7)),
    "wrapper": ((3, 7, 8), (3, 2, 7, 7)), "mha": ((3, 7, 4), (3, 2, 7, 7)),
}


@pytest.mark.parametrize("name", list(EXPECTED_SHAPES))
def test_shapes_and_rows_sum_to_one(name):
    torch.manual_seed(0)
    module = _all_modules()[name]
    x = torch.randn(3, 7, 5)
    context_vecs, attn_weights = module(x, return_weights=True)
    assert (context_vecs.shape, attn_weights.shape) == EXPECTED_SHAPES[name]
    torch.testing.assert_close(attn_weights.sum(-1), torch.ones(attn_weights.shape[:-1]))
    torch.testing.assert_close(module(x), context_vecs)  # return_weights only adds the weights
    if name in ("causal", "wrapper", "mha"):
        above_diagonal = helpers.causal_mask(7)
        assert (attn_weights[..., above_diagonal] == 0).all()


def test_v1_and_v2_compute_the_same_function_with_copied_weights():
    torch.manual_seed(0)
    v1, v2 = SelfAttention_v1(3, 2), SelfAttention_v2(3, 2)
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            getattr(v1, name).copy_(getattr(v2, name).weight.T)
    torch.testing.assert_close(v1(INPUTS), v2(INPUTS))


@pytest.mark.parametrize("d_in,d_out,num_heads,num_tokens,qkv_bias",
                         [(6, 6, 2, 5, False), (4, 6, 3, 7, True), (8, 12, 4, 1, False), (5, 2, 1, 4, True)])
def test_multi_head_attention_matches_torch_multihead_attention(d_in, d_out, num_heads, num_tokens, qkv_bias):
    torch.manual_seed(7)
    ours = MultiHeadAttention(d_in, d_out, context_length=num_tokens + 2, dropout=0.0, num_heads=num_heads,
                              qkv_bias=qkv_bias)
    theirs = nn.MultiheadAttention(d_out, num_heads, bias=True, batch_first=True, kdim=d_in, vdim=d_in)
    with torch.no_grad():
        # nn.MultiheadAttention projects its query input from embed_dim (= d_out) features, so it
        # gets our projected queries and an identity query projection; keys and values are
        # projected by copies of our weights.
        if theirs.in_proj_weight is not None:  # d_in == d_out packs the three projections together
            theirs.in_proj_weight.copy_(torch.cat([torch.eye(d_out), ours.W_key.weight, ours.W_value.weight]))
        else:
            theirs.q_proj_weight.copy_(torch.eye(d_out))
            theirs.k_proj_weight.copy_(ours.W_key.weight)
            theirs.v_proj_weight.copy_(ours.W_value.weight)
        biases = [torch.zeros(d_out)] + [
            (layer.bias if qkv_bias else torch.zeros(d_out)) for layer in (ours.W_key, ours.W_value)
        ]
        theirs.in_proj_bias.copy_(torch.cat(biases))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    x = torch.randn(3, num_tokens, d_in)
    causal = helpers.causal_mask(num_tokens)  # True = may not attend, the same convention as nn.MultiheadAttention
    expected, expected_weights = theirs(ours.W_query(x), x, x, attn_mask=causal, average_attn_weights=False)
    context_vecs, attn_weights = ours(x, return_weights=True)
    torch.testing.assert_close(context_vecs, expected)
    torch.testing.assert_close(attn_weights, expected_weights)


@pytest.mark.parametrize("name", list(EXPECTED_SHAPES))
def test_gradients_reach_every_parameter(name):
    torch.manual_seed(0)
    module = _all_modules(dropout=0.2)[name]
    module(torch.randn(2, 6, 5)).square().sum().backward()
    for param_name, param in module.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, param_name


@pytest.mark.parametrize("name", ["causal", "wrapper", "mha"])
def test_eval_disables_dropout(name):
    torch.manual_seed(0)
    module = _all_modules(dropout=0.5)[name]
    x = torch.randn(2, 6, 5)
    train_a, train_b = module(x), module(x)
    assert not torch.allclose(train_a, train_b)  # dropout is live in train() mode
    module.eval()
    torch.testing.assert_close(module(x), module(x))
    reference = _all_modules(dropout=0.0)[name]
    reference.load_state_dict(module.state_dict())
    torch.testing.assert_close(module(x), reference(x))


@pytest.mark.parametrize("name", ["causal", "mha"])
def test_mask_buffer_follows_the_module(name):
    module = _all_modules()[name]
    assert "mask" in dict(module.named_buffers())
    module.to("meta")
    assert module.mask.device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runs_on_cuda():
    torch.manual_seed(0)
    module = MultiHeadAttention(5, 4, 8, 0.0, 2)
    x = torch.randn(2, 6, 5)
    expected = module(x)
    torch.testing.assert_close(module.to("cuda")(x.to("cuda")).cpu(), expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "build,error,words",
    [
        (lambda: MultiHeadAttention(3, 5, 6, 0.0, num_heads=2), ValueError, "d_out must be divisible by num_heads"),
        (lambda: MultiHeadAttention(3, 4, 6, 0.0, num_heads=0), ValueError, "num_heads must be at least 1"),
        (lambda: MultiHeadAttentionWrapper(3, 4, 6, 0.0, num_heads=0), ValueError, "num_heads must be at least 1"),
        (lambda: MultiHeadAttentionWrapper(3, 4, 6, 0.0, num_heads=2, d_out=4), TypeError, "not both"),
        (lambda: MultiHeadAttentionWrapper(3, context_length=6, dropout=0.0, num_heads=2), TypeError, "head_dim"),
        (lambda: MultiHeadAttention(3, 4, 6, 1.0, num_heads=2), ValueError, "dropout must be in"),
        (lambda: CausalAttention(3, 4, 6, -0.1), ValueError, "dropout must be in"),
        (lambda: CausalAttention(3, 4, 0, 0.0), ValueError, "context_length must be at least 1"),
        (lambda: CausalAttention(3, 4, 2.5, 0.0), TypeError, "context_length must be an int"),
        (lambda: SelfAttention_v1(0, 2), ValueError, "d_in must be at least 1"),
        (lambda: SelfAttention_v2(3, 2, qkv_bias="yes"), TypeError, "qkv_bias must be a bool"),
    ],
)
def test_constructors_reject_bad_arguments(build, error, words):
    with pytest.raises(error, match=words):
        build()


@pytest.mark.parametrize("name", list(EXPECTED_SHAPES))
@pytest.mark.parametrize(
    "x,error,words",
    [
        (torch.randn(2, 9, 5), ValueError, "9 tokens but the module was built with context_length=8"),
        (torch.randn(2, 6, 3), ValueError, "last dimension d_in=5"),
        (torch.randn(1, 2, 6, 5), ValueError, "x must have shape"),
        (torch.ones(2, 6, 5, dtype=torch.long), TypeError, "floating-point"),
        ([[0.1] * 5], TypeError, "x must be a torch.Tensor"),
    ],
    ids=["too-many-tokens", "wrong-d_in", "4-dims", "integer", "list"],
)
def test_forward_rejects_bad_input(name, x, error, words):
    if name in ("v1", "v2") and "context_length" in words:
        pytest.skip("v1 and v2 have no context length")
    with pytest.raises(error, match=words):
        _all_modules()[name](x)


def test_batched_modules_ask_for_a_batch_dimension():
    with pytest.raises(ValueError, match="unsqueeze"):
        MultiHeadAttention(3, 2, 6, 0.0, 2)(INPUTS)


def test_wrapper_takes_head_dim_or_the_books_name_d_out():
    """The wrapper's per-head width is ``head_dim``; the book's keyword ``d_out`` still means the same."""
    modules = []
    for kwargs in ({"head_dim": 2}, {"d_out": 2}):
        torch.manual_seed(123)
        modules.append(MultiHeadAttentionWrapper(d_in=3, context_length=6, dropout=0.0, num_heads=2, **kwargs))
    torch.manual_seed(123)
    positional = MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2)
    for module in modules:
        assert module(BATCH).shape == (BATCH.shape[0], BATCH.shape[1], 4)
        torch.testing.assert_close(module(BATCH), positional(BATCH))
