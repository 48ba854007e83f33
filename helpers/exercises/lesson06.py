"""Exercises for notebook 06: multi-head attention."""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask
from ..modules import MultiHeadAttention, MultiHeadAttentionWrapper
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids

__all__ = ["layer_sizes", "multi_head_bug"]


# --- 1. count: the sizes of a layer, from its arguments ------------------------------------------------------
_SIZE_NAMES = ("head_dim", "output width", "parameter count")


def _reference_sizes(kind, d_in, d_out, num_heads, qkv_bias):
    """Build the layer and measure it: the ground truth the learner's arithmetic is compared with.

    ``None`` where the class refuses the arguments (``MultiHeadAttention`` needs ``d_out % num_heads == 0``).
    """
    if kind == "wrapper":
        layer = MultiHeadAttentionWrapper(d_in, d_out, 1, 0.0, num_heads, qkv_bias=qkv_bias)
        head_dim = layer.heads[0].d_out
    elif kind == "split":
        try:
            layer = MultiHeadAttention(d_in, d_out, 1, 0.0, num_heads, qkv_bias=qkv_bias)
        except ValueError:
            return None
        head_dim = layer.head_dim
    else:
        raise ValueError(f'kind must be "wrapper" or "split", got {kind!r}')
    with torch.no_grad():
        width = layer(torch.zeros(1, 1, d_in)).shape[-1]
    return head_dim, width, sum(parameter.numel() for parameter in layer.parameters())


def _size_cases(g: torch.Generator) -> list[Case]:
    configs = [("wrapper", 3, 2, 2, False), ("split", 3, 2, 2, False), ("split", 768, 768, 12, True),
               ("wrapper", 16, 4, 4, True), ("split", 10, 12, 3, False), ("wrapper", 768, 64, 12, False),
               ("wrapper", 10, 10, 3, False), ("split", 10, 10, 3, False)]
    return [Case(f'layer_sizes("{kind}", {d_in}, {d_out}, {heads}, {bias})',
                 (kind, d_in, d_out, heads, bias)) for kind, d_in, d_out, heads, bias in configs]


def _solution_layer_sizes(kind, d_in, d_out, num_heads, qkv_bias):
    qkv = 3 * (d_in * d_out + (d_out if qkv_bias else 0))   # W_query, W_key, W_value of width d_out
    if kind == "wrapper":                                    # d_out per head; heads side by side; no W_o
        return d_out, num_heads * d_out, num_heads * qkv
    if d_out % num_heads != 0:                               # num_heads equal slices cannot fill d_out
        return None
    out_proj = d_out * d_out + d_out                         # W_o always has a bias
    return d_out // num_heads, d_out, qkv + out_proj         # d_out in total, cut into num_heads slices


def _sizes_wrong(got, case: Case, function) -> str:
    """Which of the three numbers is off, and which way, without giving the right value away."""
    kind, _, d_out, num_heads, _ = case.args
    expected = _reference_sizes(*case.args)
    if kind == "split" and tuple(got[:2]) == (d_out, num_heads * d_out):
        return _SPLIT_LIKE_WRAPPER
    if kind == "wrapper" and tuple(got[:2]) == (d_out // num_heads, d_out):
        return _WRAPPER_LIKE_SPLIT
    for name, answer, right in zip(_SIZE_NAMES, got, expected):
        if answer != right:
            return (f"your {name} is too {'high' if answer > right else 'low'}. "
                    f"List what this class builds, layer by layer, and count again.")
    return "the values differ from the answer."


def _with(kind, d_in, d_out, num_heads, qkv_bias, change):
    """The model answer with ``change(head_dim, width, count)`` applied where a layer exists."""
    sizes = _solution_layer_sizes(kind, d_in, d_out, num_heads, qkv_bias)
    return None if sizes is None else change(*sizes)


def _split_like_wrapper(kind, d_in, d_out, num_heads, qkv_bias):
    if kind == "wrapper":
        return _solution_layer_sizes(kind, d_in, d_out, num_heads, qkv_bias)
    return _with(kind, d_in, d_out, num_heads, qkv_bias, lambda h, w, c: (d_out, num_heads * d_out, c))


def _wrapper_like_split(kind, d_in, d_out, num_heads, qkv_bias):
    if kind == "split":
        return _solution_layer_sizes(kind, d_in, d_out, num_heads, qkv_bias)
    return _with(kind, d_in, d_out, num_heads, qkv_bias, lambda h, w, c: (d_out // num_heads, d_out, c))


def _no_out_proj_bias(kind, d_in, d_out, num_heads, qkv_bias):
    return _with(kind, d_in, d_out, num_heads, qkv_bias,
                 lambda h, w, c: (h, w, c - (d_out if kind == "split" else 0)))


def _no_out_proj(kind, d_in, d_out, num_heads, qkv_bias):
    return _with(kind, d_in, d_out, num_heads, qkv_bias,
                 lambda h, w, c: (h, w, c - (d_out * d_out + d_out if kind == "split" else 0)))


def _wrapper_with_out_proj(kind, d_in, d_out, num_heads, qkv_bias):
    return _with(kind, d_in, d_out, num_heads, qkv_bias,
                 lambda h, w, c: (h, w, c + (w * w + w if kind == "wrapper" else 0)))


def _bias_always(kind, d_in, d_out, num_heads, qkv_bias):
    return _solution_layer_sizes(kind, d_in, d_out, num_heads, True)


def _bias_never(kind, d_in, d_out, num_heads, qkv_bias):
    return _solution_layer_sizes(kind, d_in, d_out, num_heads, False)


_SPLIT_LIKE_WRAPPER = ("for MultiHeadAttention you read d_out as the width of one head. There, d_out is the width "
                       "of the whole layer: num_heads slices of head_dim share it, and the output has d_out "
                       "features.")
_WRAPPER_LIKE_SPLIT = ("for MultiHeadAttentionWrapper you read d_out as the width of the whole layer. There, d_out "
                       "is the width of each head, and the heads' outputs sit side by side.")
_BIAS_MESSAGE = ("your parameter count ignores qkv_bias: W_query, W_key and W_value carry a bias of d_out numbers "
                 "each exactly when qkv_bias is True.")
_NO_SUCH_LAYER = ("MultiHeadAttention cannot be built with these arguments: its d_out must be cut into num_heads "
                  "slices of the same whole width, and here it cannot. The task asks for None when the class "
                  "refuses its arguments.")
_LAYER_EXISTS = ("you returned None, yet this layer can be built. Only a layer whose arguments the class refuses "
                 "gets None; does this class need anything to divide?")


class _SizesExercise(FunctionExercise):
    """A FunctionExercise whose answer may be ``None`` (no such layer), with a precise message either way."""

    def _compare(self, got: tuple, expected: tuple, case: Case, previous, function):
        no_layer, said_none = expected == (None,), len(got) == 1 and got[0] is None
        if no_layer and not said_none:
            return _NO_SUCH_LAYER
        if said_none and not no_layer:
            return _LAYER_EXISTS
        return super()._compare(got, expected, case, previous, function)


layer_sizes = _SizesExercise(
    "The sizes of a layer",
    'write layer_sizes(kind, d_in, d_out, num_heads, qkv_bias) returning (head_dim, output_width, '
    'num_parameters) of MultiHeadAttentionWrapper (kind "wrapper") or MultiHeadAttention (kind "split") built '
    "with these arguments, worked out from the numbers, without building a layer; None if the class would refuse "
    "these arguments.",
    reference=_reference_sizes,
    cases=_size_cases,
    hint=["Start from the d_out table of section 4: in which class is d_out the width of one head, and in which "
          "the width of all heads together?",
          "List the nn.Linear layers each class builds, with their in and out features. Each holds "
          "in x out weights, plus out biases when it has a bias. Which class has an output projection?",
          "For None: every head of a layer has the same width. In which class must that width come out of "
          "d_out and num_heads, and when can it not?"],
    rules=[forbids("torch.nn.Linear", "helpers.heads.layer_cost",
                   why="Work it out from the five arguments: building the layer and counting is what section 5 "
                       "did for you.")],
    solution=_solution_layer_sizes,
    properties=_sizes_wrong,
    mistakes=[
        Mistake(_split_like_wrapper, _SPLIT_LIKE_WRAPPER),
        Mistake(_wrapper_like_split, _WRAPPER_LIKE_SPLIT),
        Mistake(_no_out_proj,
                "your count for MultiHeadAttention leaves out its output projection W_o (out_proj), an "
                "nn.Linear(d_out, d_out) applied after the heads are merged."),
        Mistake(_no_out_proj_bias,
                "your count for MultiHeadAttention leaves out the bias of out_proj: out_proj is "
                "nn.Linear(d_out, d_out), with a bias whatever qkv_bias says."),
        Mistake(_wrapper_with_out_proj,
                "your count for MultiHeadAttentionWrapper includes an output projection. The wrapper only "
                "concatenates its heads: it has none."),
        Mistake(_bias_always, _BIAS_MESSAGE),
        Mistake(_bias_never, _BIAS_MESSAGE),
    ],
)


# --- 2. spot the bug: multi-head attention in one function --------------------------------------------------
def _attention_cases(g: torch.Generator) -> list[Case]:
    def case(num_heads, d_out):
        shape = (2, 5, d_out)
        return Case(f"batch 2, 5 tokens, d_out={d_out}, {num_heads} head{'' if num_heads == 1 else 's'}",
                    (randn(g, *shape), randn(g, *shape), randn(g, *shape), num_heads))
    return [case(1, 4), case(2, 8), case(4, 16), case(3, 6)]


def _reference_heads(queries, keys, values, num_heads):
    q, k, v = (t.unflatten(-1, (num_heads, -1)).transpose(1, 2) for t in (queries, keys, values))  # (B, H, T, D)
    context, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(queries.shape[1]))
    return context.transpose(1, 2).flatten(2)                                # (B, H, T, D) -> (B, T, H*D)


def buggy_multi_head(queries, keys, values, num_heads):
    batch_size, num_tokens, d_out = queries.shape
    head_dim = d_out // num_heads
    q = queries.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)  # (B, H, T, D)
    k = keys.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    v = values.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    attn_scores = q @ k.transpose(2, 3) / math.sqrt(head_dim)     # (B, H, T, T)
    mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=queries.device), diagonal=1)
    attn_weights = torch.softmax(attn_scores.masked_fill(mask, float("-inf")), dim=-1)
    context = attn_weights @ v                                    # (B, H, T, D)
    return context.permute(0, 2, 3, 1).reshape(batch_size, num_tokens, d_out)  # -> (B, T, d_out)


def _solution_multi_head(queries, keys, values, num_heads):
    batch_size, num_tokens, d_out = queries.shape
    head_dim = d_out // num_heads
    q = queries.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)  # (B, H, T, D)
    k = keys.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    v = values.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    attn_scores = q @ k.transpose(2, 3) / math.sqrt(head_dim)     # (B, H, T, T)
    mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool, device=queries.device), diagonal=1)
    attn_weights = torch.softmax(attn_scores.masked_fill(mask, float("-inf")), dim=-1)
    context = attn_weights @ v                                    # (B, H, T, D)
    # (B, H, T, D) -> (B, T, H, D) -> (B, T, d_out): head h's D features sit together, heads in order
    return context.transpose(1, 2).reshape(batch_size, num_tokens, d_out)


def _merged_without_moving_heads(queries, keys, values, num_heads):
    """Reads the (B, H, T, D) context straight as (B, T, d_out): rows of different tokens get mixed."""
    q, k, v = (t.unflatten(-1, (num_heads, -1)).transpose(1, 2) for t in (queries, keys, values))
    context, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(queries.shape[1]))
    return context.reshape(queries.shape)


def _interleaved_everywhere(queries, keys, values, num_heads):
    """Splits and merges both in (D, H) order: consistent, but head h works on features h, h + H, h + 2H, ..."""
    b, t, d = queries.shape
    q, k, v = (x.view(b, t, d // num_heads, num_heads).permute(0, 3, 1, 2) for x in (queries, keys, values))
    context, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(t))
    return context.permute(0, 2, 3, 1).reshape(b, t, d)


multi_head_bug = SpotTheBug(
    "Spot the bug: multi-head attention in one function",
    "multi_head(queries, keys, values, num_heads) takes projected queries, keys and values of shape "
    "(batch_size, num_tokens, d_out) and runs causal attention in every head. Head h works on features "
    "h*head_dim to (h+1)*head_dim - 1 of the queries, keys and values, and its context vectors must land in the "
    "same features of the output, as with the wrapper's torch.cat (no out_proj). The code runs and every shape is "
    "right, yet its output is wrong. Find the bug and fix it.",
    reference=_reference_heads,
    cases=_attention_cases,
    hint=["Try it with num_heads=1, then with 2, on inputs small enough to read. With one head it is right: what "
          "does a second head change?",
          "Compute head 1 alone, by hand, from its slice of the queries, keys and values. Then look for its "
          "context vectors in the function's output: which features of each token hold them?"],
    solution=_solution_multi_head,
    buggy=buggy_multi_head,
    bug_message="every head computes the right context vectors, but they land in the wrong features of the "
                "output: with 2 heads, feature 1 of each token holds head 1's first feature instead of head 0's "
                "second. Head h's context vector must fill features h*head_dim to (h+1)*head_dim - 1.",
    mistakes=[
        Mistake(_merged_without_moving_heads,
                "your output reads the (B, H, T, D) context vectors straight as (B, T, d_out): the numbers of "
                "one head's tokens fill a row, so each output row mixes several tokens (even later ones). Bring "
                "the token axis next to the batch axis before you flatten the heads."),
        Mistake(_interleaved_everywhere,
                "split and merge now agree, but both use the (D, H) order: head h works on features h, h + H, "
                "h + 2H, ... of the queries, keys and values instead of its own block h*head_dim to "
                "(h+1)*head_dim - 1."),
    ],
)
