"""helpers.heads: wrapper -> split-head weights, parameter and FLOP counts checked against torch."""

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from helpers.heads import (
    AttentionCost,
    full_width_heads_cost,
    layer_cost,
    split_heads_cost,
    wrapper_to_multihead,
)
from helpers.modules import MultiHeadAttention, MultiHeadAttentionWrapper


def _num_params(*modules):
    return sum(p.numel() for module in modules for p in module.parameters())


def _matmul_flops(module, x):
    with FlopCounterMode(display=False) as counter:
        module(x)
    return counter.get_total_flops()


@pytest.mark.parametrize("d_in,d_out,num_heads,qkv_bias", [(3, 4, 2, False), (5, 6, 3, True), (8, 8, 1, False)])
def test_wrapper_to_multihead_is_the_same_function(d_in, d_out, num_heads, qkv_bias):
    torch.manual_seed(3)
    wrapper = MultiHeadAttentionWrapper(d_in, d_out, 9, 0.0, num_heads, qkv_bias=qkv_bias)
    split = wrapper_to_multihead(wrapper)
    assert (split.num_heads, split.head_dim, split.d_out) == (num_heads, d_out, num_heads * d_out)
    x = torch.randn(2, 7, d_in)
    expected, expected_weights = wrapper(x, return_weights=True)
    context_vecs, attn_weights = split(x, return_weights=True)
    torch.testing.assert_close(context_vecs, expected)
    torch.testing.assert_close(attn_weights, expected_weights)


def test_wrapper_to_multihead_with_an_output_projection():
    torch.manual_seed(4)
    wrapper = MultiHeadAttentionWrapper(3, 2, 6, 0.0, num_heads=3)
    out_proj = nn.Linear(6, 6)
    split = wrapper_to_multihead(wrapper, out_proj)
    x = torch.randn(2, 6, 3)
    torch.testing.assert_close(split(x), out_proj(wrapper(x)))
    assert not torch.allclose(split(x), wrapper(x))  # the projection does change the output


def test_heads_land_in_consecutive_rows():
    torch.manual_seed(5)
    wrapper = MultiHeadAttentionWrapper(4, 3, 6, 0.0, num_heads=2)
    split = wrapper_to_multihead(wrapper)
    torch.testing.assert_close(split.W_key.weight[3:6], wrapper.heads[1].W_key.weight)
    torch.testing.assert_close(split.out_proj.weight, torch.eye(6))


def test_wrapper_to_multihead_keeps_the_mode_and_rejects_bad_input():
    wrapper = MultiHeadAttentionWrapper(3, 2, 6, 0.5, num_heads=2).eval()
    split = wrapper_to_multihead(wrapper)
    assert not split.training and split.dropout.p == 0.5
    with pytest.raises(TypeError, match="wrapper must be a MultiHeadAttentionWrapper"):
        wrapper_to_multihead(MultiHeadAttention(3, 4, 6, 0.0, 2))
    with pytest.raises(ValueError, match=r"out_proj must be an nn.Linear\(4, 4\)"):
        wrapper_to_multihead(wrapper, nn.Linear(4, 3))


def test_gpt2_small_sized_layers():
    """GPT-2 small's attention (768 wide, 12 heads, 1024 tokens) has query/key/value biases (openai/gpt-2
    src/model.py, c_attn): 4*768**2 + 4*768 parameters. Without them it is the chapter-3 layer of
    Raschka (2024), 2,360,064."""
    gpt2 = split_heads_cost(768, 12, 1024, qkv_bias=True)
    assert isinstance(gpt2, AttentionCost)
    assert (gpt2.num_heads, gpt2.head_dim, gpt2.parameters) == (12, 64, 4 * 768**2 + 4 * 768) == (12, 64, 2_362_368)
    assert gpt2.attn_weights == 12 * 1024 * 1024
    assert split_heads_cost(768, 12, 1024).parameters == 2_360_064


@pytest.mark.parametrize("d_model,num_heads,qkv_bias", [(12, 1, False), (12, 3, False), (12, 4, True), (8, 8, True)])
def test_split_heads_cost_matches_the_module(d_model, num_heads, qkv_bias):
    num_tokens = 5
    module = MultiHeadAttention(d_model, d_model, num_tokens, 0.0, num_heads, qkv_bias=qkv_bias)
    cost = split_heads_cost(d_model, num_heads, num_tokens, qkv_bias=qkv_bias)
    assert cost.parameters == _num_params(module)
    assert cost.flops == _matmul_flops(module, torch.randn(1, num_tokens, d_model))


@pytest.mark.parametrize("num_heads", [1, 2, 3])
def test_full_width_heads_cost_matches_wrapper_plus_projection(num_heads):
    d_model, num_tokens = 6, 4
    wrapper = MultiHeadAttentionWrapper(d_model, d_model, num_tokens, 0.0, num_heads)
    out_proj = nn.Linear(num_heads * d_model, d_model)
    cost = full_width_heads_cost(d_model, num_heads, num_tokens)
    assert cost.head_dim == d_model
    assert cost.parameters == _num_params(wrapper, out_proj)
    x = torch.randn(1, num_tokens, d_model)
    with FlopCounterMode(display=False) as counter:
        out_proj(wrapper(x))
    assert cost.flops == counter.get_total_flops()


def test_split_costs_do_not_depend_on_num_heads_but_full_width_costs_do():
    split = [split_heads_cost(768, h, 1024) for h in (1, 2, 12)]
    assert len({c.parameters for c in split}) == 1 and len({c.flops for c in split}) == 1
    full = [full_width_heads_cost(768, h, 1024) for h in (1, 2, 12)]
    assert full[0] == split[0]  # one full-width head is the one-head split layer
    assert full[2].parameters > 11 * split[2].parameters


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda: split_heads_cost(10, 3, 4), ValueError, "d_model must be divisible by num_heads"),
        (lambda: split_heads_cost(10, 0, 4), ValueError, "num_heads must be at least 1"),
        (lambda: layer_cost(4, 2, 2, 0), ValueError, "num_tokens must be at least 1"),
        (lambda: layer_cost(4, 2, 2.0, 3), TypeError, "head_dim must be an int"),
        (lambda: layer_cost(4, 2, 2, 3, qkv_bias=1), TypeError, "qkv_bias must be a bool"),
        (lambda: full_width_heads_cost(-1, 2, 3), ValueError, "d_model must be at least 1"),
    ],
)
def test_bad_arguments(call, error, words):
    with pytest.raises(error, match=words):
        call()
