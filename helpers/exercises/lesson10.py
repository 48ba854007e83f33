"""Exercises for notebook 10: cross-attention.

1. the decoder's two masks: which mask goes into the decoder's self-attention, which into its cross-attention;
2. spot the bug: cross-attention from notebook 06's MultiHeadAttention, its padding mask written in PyTorch's
   True = take part convention.
"""

from __future__ import annotations

import torch

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask, padding_mask
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug, forbids

__all__ = ["decoder_masks", "cross_from_parts"]


# --- 1. the decoder's two masks ------------------------------------------------------------------------------
def _mask_cases(g: torch.Generator) -> list[Case]:
    def case(description, target_lengths, source_lengths, num_queries, num_keys):
        return Case(description, (padding_mask(target_lengths, num_queries), padding_mask(source_lengths, num_keys)))
    return [case("2 sequences, 4 target and 4 source tokens, target lengths [4, 2], source lengths [3, 4]",
                 [4, 2], [3, 4], 4, 4),
            case("the lesson's sizes: 3 sequences, T_q = 4 words, T_k = 8 digits, 1 to 4 numbers",
                 [2, 4, 1], [4, 8, 2], 4, 8),
            case("2 sequences, T_q = 5, T_k = 3, no padding in the first", [5, 3], [3, 1], 5, 3)]


def _reference_masks(target_padding_mask, source_padding_mask):
    batch_size, num_queries = target_padding_mask.shape
    num_keys = source_padding_mask.shape[1]
    self_mask = causal_mask(num_queries) | target_padding_mask[:, None, :]           # (B, T_q, T_q)
    cross_mask = source_padding_mask[:, None, :].expand(batch_size, num_queries, num_keys)  # (B, T_q, T_k)
    return self_mask, cross_mask


def _solution_decoder_masks(target_padding_mask, source_padding_mask):
    batch_size, num_queries = target_padding_mask.shape
    num_keys = source_padding_mask.shape[1]
    future = torch.triu(torch.ones(num_queries, num_queries, dtype=torch.bool), diagonal=1)   # (T_q, T_q)
    self_mask = future | target_padding_mask[:, None, :]        # (T_q, T_q) | (B, 1, T_q) -> (B, T_q, T_q)
    cross_mask = source_padding_mask[:, None, :].expand(batch_size, num_queries, num_keys)   # keys only: (B, T_q, T_k)
    return self_mask, cross_mask


def _sizes(target_padding_mask, source_padding_mask):
    return target_padding_mask.shape[0], target_padding_mask.shape[1], source_padding_mask.shape[1]


def _causal_in_cross(target_padding_mask, source_padding_mask):
    batch_size, num_queries, num_keys = _sizes(target_padding_mask, source_padding_mask)
    self_mask, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    return self_mask, cross_mask | torch.triu(torch.ones(num_queries, num_keys, dtype=torch.bool), diagonal=1)


def _target_rows_in_cross(target_padding_mask, source_padding_mask):
    self_mask, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    return self_mask, cross_mask | target_padding_mask[:, :, None]


def _source_on_query_axis(target_padding_mask, source_padding_mask):
    batch_size, num_queries, num_keys = _sizes(target_padding_mask, source_padding_mask)
    self_mask, _ = _reference_masks(target_padding_mask, source_padding_mask)
    return self_mask, source_padding_mask[:, :, None].expand(batch_size, num_queries, num_keys)


def _no_causal(target_padding_mask, source_padding_mask):
    batch_size, num_queries, _ = _sizes(target_padding_mask, source_padding_mask)
    _, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    return target_padding_mask[:, None, :].expand(batch_size, num_queries, num_queries), cross_mask


def _self_padding_on_rows(target_padding_mask, source_padding_mask):
    _, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    return causal_mask(target_padding_mask.shape[1]) | target_padding_mask[:, :, None], cross_mask


def _no_target_padding(target_padding_mask, source_padding_mask):
    batch_size, num_queries, _ = _sizes(target_padding_mask, source_padding_mask)
    _, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    return causal_mask(num_queries).expand(batch_size, num_queries, num_queries), cross_mask


decoder_masks = FunctionExercise(
    "The decoder's two masks",
    "write decoder_masks(target_padding_mask, source_padding_mask): target_padding_mask (B, T_q) and "
    "source_padding_mask (B, T_k) are True at padding tokens. Return (self_mask, cross_mask), bool, True = hide: "
    "self_mask (B, T_q, T_q) for the decoder's masked self-attention (queries and keys from the target), "
    "cross_mask (B, T_q, T_k) for its cross-attention (queries from the target, keys from the source). Each mask "
    "hides exactly what its layer must not see: no word may read what has not been written yet, and no query "
    "reads padding: hide padding keys (columns), not rows. Decide for each layer which of these apply.",
    reference=_reference_masks,
    cases=_mask_cases,
    hint=["Take the two layers one at a time and ask, for each: which sequence do its keys come from, and what "
          "must a query not see among those keys, the future, the padding, or both?",
          "A padding mask hides padding tokens wherever they would be read, the same for every query. Which "
          "tokens does each layer read?"],
    solution=_solution_decoder_masks,
    mistakes=[
        Mistake(_causal_in_cross,
                "your cross_mask hides the source tokens after position i from output i: a causal mask does not "
                "belong in cross-attention. The whole source is known before the first word is written, and "
                "output i may need any source token (in section 4, output 0 needs digit 1)."),
        Mistake(_target_rows_in_cross,
                "your cross_mask also hides whole rows, those of the target's padding. Hide padding keys "
                "(columns), not rows: a row with every key hidden has no weights to give (0 / 0), and the keys of "
                "cross-attention are the source's. The loss simply ignores padded outputs."),
        Mistake(_source_on_query_axis,
                "your cross_mask puts the source's padding on the query axis (rows). The source supplies the keys: "
                "its padding mask hides columns, the same for every query."),
        Mistake(_no_causal,
                "your self_mask lets a target word see the words after it. The decoder writes one word at a time: "
                "its self-attention needs the causal mask as well as the padding."),
        Mistake(_self_padding_on_rows,
                "your self_mask hides whole rows of the target's padding (the query axis). Hide padding keys "
                "(columns), not rows: the same columns for every query."),
        Mistake(_no_target_padding,
                "your self_mask is causal but does not hide the target's padding keys. With the padding on the "
                "right, the causal mask already hides them from every real word, so the words that count come out "
                "the same; the task asks for both, so that the mask stays right wherever the padding sits."),
    ],
)


# --- 2. spot the bug: cross-attention from notebook 06's layer ----------------------------------------------
def _module(seed: int, d_in: int, d_out: int, num_heads: int, context_length: int):
    from ..modules import MultiHeadAttention
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MultiHeadAttention(d_in, d_out, context_length, 0.0, num_heads).eval()


def _module_cases(g: torch.Generator) -> list[Case]:
    def case(description, lengths, num_queries, num_keys, d_in, d_out, num_heads, context_length):
        module = _module(int(torch.randint(0, 2**31 - 1, (1,), generator=g)), d_in, d_out, num_heads,
                         context_length)
        batch_size = len(lengths)
        x = randn(g, batch_size, num_queries, d_in)
        source = randn(g, batch_size, num_keys, d_in)
        return Case(description, (module, x, source, padding_mask(lengths, num_keys)))
    return [case("the lesson's sizes: 3 sequences, T_q = 4, T_k = 8, d_in = d_out = 32, 2 heads, 1 to 3 numbers",
                 [6, 4, 2], 4, 8, 32, 32, 2, 8),
            case("2 sequences, T_q = 6 queries, T_k = 3 source tokens, d_in 5, d_out 8, 4 heads", [2, 1], 6, 3, 5,
                 8, 4, 6),
            case("1 sequence, T_q = 2, T_k = 5 (3 real, 2 padding), 1 head", [3], 2, 5, 4, 6, 1, 5)]


def _reference_cross(module, x, source, source_padding_mask):
    """What CrossAttention with the same four projections returns."""
    from ..cross_attention import CrossAttention
    cross = CrossAttention(module.d_in, module.d_out, 0.0, module.num_heads).eval()
    cross.load_state_dict({k: v for k, v in module.state_dict().items() if k != "mask"})
    with torch.no_grad():
        return cross(x, source, source_padding_mask)


def buggy_cross_attention(module, x, source, source_padding_mask):
    # notebook 06's MultiHeadAttention.forward, turned into cross-attention: keys and values now read the source
    # x (B, T_q, d_in), source (B, T_k, d_in), source_padding_mask (B, T_k) -> (B, T_q, d_out)
    batch_size, num_queries, _ = x.shape
    num_keys = source.shape[1]
    heads = (module.num_heads, module.head_dim)
    queries = module.W_query(x).view(batch_size, num_queries, *heads).transpose(1, 2)    # (B, H, T_q, D)
    keys = module.W_key(source).view(batch_size, num_keys, *heads).transpose(1, 2)       # (B, H, T_k, D)
    values = module.W_value(source).view(batch_size, num_keys, *heads).transpose(1, 2)   # (B, H, T_k, D)
    mask = ~source_padding_mask[:, None, None, :]        # (B, 1, 1, T_k): True at the real source tokens
    context_vecs, _ = scaled_dot_product_attention(queries, keys, values, mask=mask)    # (B, H, T_q, D)
    context_vecs = context_vecs.transpose(1, 2).reshape(batch_size, num_queries, module.d_out)
    return module.out_proj(context_vecs)                                                 # (B, T_q, d_out)


def _solution_cross_attention(module, x, source, source_padding_mask):
    batch_size, num_queries, _ = x.shape
    num_keys = source.shape[1]
    heads = (module.num_heads, module.head_dim)
    queries = module.W_query(x).view(batch_size, num_queries, *heads).transpose(1, 2)    # (B, H, T_q, D)
    keys = module.W_key(source).view(batch_size, num_keys, *heads).transpose(1, 2)       # (B, H, T_k, D)
    values = module.W_value(source).view(batch_size, num_keys, *heads).transpose(1, 2)   # (B, H, T_k, D)
    mask = source_padding_mask[:, None, None, :]     # (B, 1, 1, T_k): True = hide, the source's padding
    context_vecs, _ = scaled_dot_product_attention(queries, keys, values, mask=mask)    # (B, H, T_q, D)
    context_vecs = context_vecs.transpose(1, 2).reshape(batch_size, num_queries, module.d_out)
    return module.out_proj(context_vecs)                                                 # (B, T_q, d_out)


def _attend(module, x, source, mask):
    batch_size, num_queries, _ = x.shape
    heads = (module.num_heads, module.head_dim)
    queries = module.W_query(x).view(batch_size, num_queries, *heads).transpose(1, 2)
    keys = module.W_key(source).view(batch_size, source.shape[1], *heads).transpose(1, 2)
    values = module.W_value(source).view(batch_size, source.shape[1], *heads).transpose(1, 2)
    context_vecs, _ = scaled_dot_product_attention(queries, keys, values, mask=mask)
    return module.out_proj(context_vecs.transpose(1, 2).reshape(batch_size, num_queries, module.d_out))


def _no_mask(module, x, source, source_padding_mask):
    return _attend(module, x, source, None)


def _causal_kept(module, x, source, source_padding_mask):
    causal = module.mask[:x.shape[1], :source.shape[1]].bool()                # (T_q, T_k)
    return _attend(module, x, source, causal | source_padding_mask[:, None, None, :])


cross_from_parts = SpotTheBug(
    "Spot the bug: cross-attention from notebook 06's layer",
    "cross_attention(module, x, source, source_padding_mask) reuses the projections of notebook 06's "
    "MultiHeadAttention (module.W_query, W_key, W_value, out_proj, num_heads, head_dim, d_out) as cross-attention: "
    "queries from x, keys and values from source. It should return what a CrossAttention with those same weights "
    "returns, computed with helpers.attention.scaled_dot_product_attention. This version, adapted from the layer's "
    "own forward, runs and returns the right shape, but its answer is wrong. Find the bug and fix it.",
    reference=_reference_cross,
    cases=_module_cases,
    hint=["Look at the weights of one query: which source tokens does it read with this mask, the real ones or "
          "the padding?",
          "helpers.attention.scaled_dot_product_attention and F.scaled_dot_product_attention read True in a mask "
          "in opposite ways. Which one does this code call, and which way was its mask written?"],
    solution=_solution_cross_attention,
    buggy=buggy_cross_attention,
    bug_message="the mask is True at the real source tokens: PyTorch's convention for F.scaled_dot_product_attention "
                "(True = take part). helpers.attention.scaled_dot_product_attention reads True as hide, so every "
                "query reads only the source's padding and none of its real tokens. Pass the padding mask itself, "
                "True at the padding, on the key axis.",
    mistakes=[
        Mistake(_no_mask, "your function hides nothing: the queries now read the source's padding too. Keep the "
                          "source padding mask, on the key axis."),
        Mistake(_causal_kept, "your mask also keeps module.mask, notebook 06's causal mask: query i may then only "
                              "read source tokens 0 to i. Cross-attention reads a source that is complete before any "
                              "word is written; only the source's padding is hidden."),
    ],
    rules=[forbids("helpers.cross_attention.CrossAttention.forward",
                   why="Compute the context vectors from the module's parts, as its forward does.")],
)
