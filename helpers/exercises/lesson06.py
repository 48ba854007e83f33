"""Exercises for notebook 06: multi-head attention."""

from __future__ import annotations

import torch

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, no_loops

__all__ = ["split_heads", "merge_heads", "head_scale"]


def _reference_split(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)  # (B, T, H*D) -> (B, T, H, D) -> (B, H, T, D)


def _reference_merge(x):
    return x.transpose(1, 2).flatten(2)                      # (B, H, T, D) -> (B, T, H, D) -> (B, T, H*D)


# --- 1. split ----------------------------------------------------------------------------------------------
def _split_cases(g: torch.Generator) -> list[Case]:
    return [Case("batch 2, 6 tokens, d_out=4, 2 heads", (randn(g, 2, 6, 4), 2)),
            Case("batch 1, 5 tokens, d_out=12, 3 heads", (randn(g, 1, 5, 12), 3)),
            Case("batch 3, 4 tokens, d_out=8, 1 head", (randn(g, 3, 4, 8), 1))]


def _solution_split_heads(x, num_heads):
    batch_size, num_tokens, d_out = x.shape
    head_dim = d_out // num_heads
    x = x.view(batch_size, num_tokens, num_heads, head_dim)   # (B, T, d_out) -> (B, T, H, D)
    return x.transpose(1, 2)                                   # (B, T, H, D) -> (B, H, T, D)


split_heads = FunctionExercise(
    "Split into heads",
    "write split_heads(x, num_heads) turning (batch, num_tokens, d_out) into (batch, num_heads, num_tokens, "
    "head_dim): head h gets features h*head_dim ... (h+1)*head_dim - 1 of every token. Tensor operations only, "
    "no Python loop.",
    reference=_reference_split,
    cases=_split_cases,
    hint=["Look at the layout of one token first: its d_out features are num_heads groups of head_dim. Which "
          "shape names those two axes, while the tokens stay where they are?",
          "A reshape never moves numbers, it only re-reads them in memory order; putting the heads in front of "
          "the tokens is a different kind of operation."],
    rules=[no_loops()],
    solution=_solution_split_heads,
    mistakes=[
        Mistake(lambda x, h: x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h),
                "you reshaped straight to (batch, heads, tokens, head_dim). The shape is right, but view/reshape "
                "keep memory order, so each 'head' got a block of tokens rather than a slice of every token's "
                "features. View to (batch, tokens, heads, head_dim), then transpose(1, 2)."),
        Mistake(lambda x, h: x.reshape(x.shape[0], x.shape[1], x.shape[2] // h, h).permute(0, 3, 1, 2),
                "you split the features as (head_dim, num_heads), so a head gets every num_heads-th feature. "
                "Heads own contiguous slices: view to (..., num_heads, head_dim)."),
    ],
)


# --- 2. merge -----------------------------------------------------------------------------------------------
def _merge_cases(g: torch.Generator) -> list[Case]:
    return [Case("batch 2, 2 heads, 6 tokens, head_dim 2", (randn(g, 2, 2, 6, 2),)),
            Case("batch 1, 3 heads, 5 tokens, head_dim 4", (randn(g, 1, 3, 5, 4),)),
            Case("batch 2, 4 heads, 1 token, head_dim 3", (randn(g, 2, 4, 1, 3),))]


def _solution_merge_heads(x):
    batch_size, num_heads, num_tokens, head_dim = x.shape
    x = x.transpose(1, 2)                                      # (B, H, T, D) -> (B, T, H, D)
    return x.contiguous().view(batch_size, num_tokens, num_heads * head_dim)


merge_heads = FunctionExercise(
    "Merge the heads",
    "write merge_heads(x) turning (batch, num_heads, num_tokens, head_dim) back into (batch, num_tokens, "
    "num_heads * head_dim), each token's heads side by side: the inverse of split_heads. Tensor operations "
    "only, no Python loop.",
    reference=_reference_merge,
    cases=_merge_cases,
    hint=["Undo the split's two steps, in the opposite order.",
          "If PyTorch refuses your view, ask what the step before it did to the order of the numbers in memory."],
    rules=[no_loops()],
    solution=_solution_merge_heads,
    mistakes=[
        Mistake(lambda x: x.reshape(x.shape[0], x.shape[2], x.shape[1] * x.shape[3]),
                "you reshaped without transposing back. The shape is right, but the numbers of one token now "
                "come from several tokens of one head. Transpose (1, 2) first."),
    ],
)


# --- 3. spot the bug: the scale of a head -------------------------------------------------------------------
def _attention_cases(g: torch.Generator) -> list[Case]:
    def case(num_heads, d_out):
        shape = (2, 5, d_out)
        return Case(f"batch 2, 5 tokens, d_out={d_out}, {num_heads} head{'' if num_heads == 1 else 's'}",
                    (randn(g, *shape), randn(g, *shape), randn(g, *shape), num_heads))
    return [case(1, 4), case(2, 8), case(4, 16)]


def _reference_heads(queries, keys, values, num_heads):
    q, k, v = (_reference_split(t, num_heads) for t in (queries, keys, values))
    context, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(queries.shape[1]))
    return _reference_merge(context)


def buggy_multi_head(queries, keys, values, num_heads):
    batch_size, num_tokens, d_out = queries.shape
    head_dim = d_out // num_heads
    q = queries.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)   # (B, H, T, D)
    k = keys.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    v = values.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    attn_scores = q @ k.transpose(2, 3)                                               # (B, H, T, T)
    mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    attn_scores = attn_scores.masked_fill(mask, float("-inf"))
    attn_weights = torch.softmax(attn_scores / d_out**0.5, dim=-1)
    context = attn_weights @ v                                                        # (B, H, T, D)
    return context.transpose(1, 2).contiguous().view(batch_size, num_tokens, d_out)


def _solution_multi_head(queries, keys, values, num_heads):
    batch_size, num_tokens, d_out = queries.shape
    head_dim = d_out // num_heads
    q = queries.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    k = keys.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    v = values.view(batch_size, num_tokens, num_heads, head_dim).transpose(1, 2)
    attn_scores = q @ k.transpose(2, 3)
    mask = torch.triu(torch.ones(num_tokens, num_tokens, dtype=torch.bool), diagonal=1)
    attn_scores = attn_scores.masked_fill(mask, float("-inf"))
    attn_weights = torch.softmax(attn_scores / head_dim**0.5, dim=-1)   # each head's keys are head_dim wide
    context = attn_weights @ v
    return context.transpose(1, 2).contiguous().view(batch_size, num_tokens, d_out)


head_scale = SpotTheBug(
    "Spot the bug: scaling a head",
    "multi_head(queries, keys, values, num_heads) takes projected (batch, num_tokens, d_out) tensors and runs "
    "causal attention in every head. It is right with one head and wrong with more. Fix it.",
    reference=_reference_heads,
    cases=_attention_cases,
    hint=["With one head the code is right. What changes inside the function when there are more heads?",
          "Count the terms of one head's dot product q . k."],
    solution=_solution_multi_head,
    buggy=buggy_multi_head,
    bug_message="the scores are divided by sqrt(d_out), the width of ALL heads together. Each head's dot "
                "products run over head_dim = d_out // num_heads features: divide by sqrt(head_dim).",
)
