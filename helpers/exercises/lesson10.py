"""Exercises for notebook 10: cross-attention.

1. an encoder-decoder's three masks: which mask goes into the encoder's self-attention (padding only, not
   causal), the decoder's self-attention (causal and padding) and its cross-attention (the source's padding);
2. spot the bug: section 2's (B, 1, T_k) key padding mask carried over to multi-head scores (B, H, T_q, T_k),
   where broadcasting lines it up with the heads instead of the sequences.
"""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ..masks import causal_mask, padding_mask
from ._inputs import randn
from .core import Case, FunctionExercise, Mistake, SpotTheBug

__all__ = ["decoder_masks", "padded_heads"]


# --- 1. an encoder-decoder's three masks --------------------------------------------------------------------
def _mask_cases(g: torch.Generator) -> list[Case]:
    def case(description, target_lengths, source_lengths, num_queries, num_keys):
        return Case(description, (padding_mask(target_lengths, num_queries), padding_mask(source_lengths, num_keys)))
    return [case("2 sequences, 4 target and 4 source tokens, target lengths [4, 2], source lengths [3, 4]",
                 [4, 2], [3, 4], 4, 4),
            case("the lesson's sizes: 3 sequences, T_q = 4 words, T_k = 8 digits, 1 to 4 numbers",
                 [2, 4, 1], [4, 8, 2], 4, 8),
            case("2 sequences, T_q = 5, T_k = 3, no padding in the first", [5, 3], [3, 1], 5, 3)]


def _encoder_mask(source_padding_mask):
    num_keys = source_padding_mask.shape[1]
    return source_padding_mask[:, None, :].expand(-1, num_keys, num_keys)                # (B, T_k, T_k)


def _reference_masks(target_padding_mask, source_padding_mask):
    batch_size, num_queries = target_padding_mask.shape
    num_keys = source_padding_mask.shape[1]
    self_mask = causal_mask(num_queries) | target_padding_mask[:, None, :]           # (B, T_q, T_q)
    cross_mask = source_padding_mask[:, None, :].expand(batch_size, num_queries, num_keys)  # (B, T_q, T_k)
    return _encoder_mask(source_padding_mask), self_mask, cross_mask


def _solution_decoder_masks(target_padding_mask, source_padding_mask):
    batch_size, num_queries = target_padding_mask.shape
    num_keys = source_padding_mask.shape[1]
    encoder_mask = source_padding_mask[:, None, :].expand(batch_size, num_keys, num_keys)   # padding keys only
    future = torch.triu(torch.ones(num_queries, num_queries, dtype=torch.bool), diagonal=1)   # (T_q, T_q)
    self_mask = future | target_padding_mask[:, None, :]        # (T_q, T_q) | (B, 1, T_q) -> (B, T_q, T_q)
    cross_mask = source_padding_mask[:, None, :].expand(batch_size, num_queries, num_keys)   # keys only: (B, T_q, T_k)
    return encoder_mask, self_mask, cross_mask


def _sizes(target_padding_mask, source_padding_mask):
    return target_padding_mask.shape[0], target_padding_mask.shape[1], source_padding_mask.shape[1]


def _causal_in_encoder(target_padding_mask, source_padding_mask):
    encoder_mask, self_mask, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    return encoder_mask | causal_mask(source_padding_mask.shape[1]), self_mask, cross_mask


def _encoder_padding_on_rows(target_padding_mask, source_padding_mask):
    _, self_mask, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    num_keys = source_padding_mask.shape[1]
    return source_padding_mask[:, :, None].expand(-1, num_keys, num_keys), self_mask, cross_mask


def _masks_not_expanded(target_padding_mask, source_padding_mask):
    encoder_mask, self_mask, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    return source_padding_mask[:, None, :], self_mask, source_padding_mask[:, None, :]   # section 2's (B, 1, T_k)


def _causal_in_cross(target_padding_mask, source_padding_mask):
    batch_size, num_queries, num_keys = _sizes(target_padding_mask, source_padding_mask)
    encoder_mask, self_mask, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    return encoder_mask, self_mask, cross_mask | torch.triu(torch.ones(num_queries, num_keys, dtype=torch.bool),
                                                            diagonal=1)


def _target_rows_in_cross(target_padding_mask, source_padding_mask):
    encoder_mask, self_mask, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    return encoder_mask, self_mask, cross_mask | target_padding_mask[:, :, None]


def _source_on_query_axis(target_padding_mask, source_padding_mask):
    batch_size, num_queries, num_keys = _sizes(target_padding_mask, source_padding_mask)
    encoder_mask, self_mask, _ = _reference_masks(target_padding_mask, source_padding_mask)
    return encoder_mask, self_mask, source_padding_mask[:, :, None].expand(batch_size, num_queries, num_keys)


def _no_causal(target_padding_mask, source_padding_mask):
    batch_size, num_queries, _ = _sizes(target_padding_mask, source_padding_mask)
    encoder_mask, _, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    return encoder_mask, target_padding_mask[:, None, :].expand(batch_size, num_queries, num_queries), cross_mask


def _self_padding_on_rows(target_padding_mask, source_padding_mask):
    encoder_mask, _, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    return encoder_mask, causal_mask(target_padding_mask.shape[1]) | target_padding_mask[:, :, None], cross_mask


def _no_target_padding(target_padding_mask, source_padding_mask):
    batch_size, num_queries, _ = _sizes(target_padding_mask, source_padding_mask)
    encoder_mask, _, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    return encoder_mask, causal_mask(num_queries).expand(batch_size, num_queries, num_queries), cross_mask


def _causal_diagonal_hidden(target_padding_mask, source_padding_mask):
    num_queries = target_padding_mask.shape[1]
    encoder_mask, _, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    hides_itself = torch.ones(num_queries, num_queries, dtype=torch.bool).triu(0)
    return encoder_mask, hides_itself | target_padding_mask[:, None, :], cross_mask


def _causal_one_word_ahead(target_padding_mask, source_padding_mask):
    num_queries = target_padding_mask.shape[1]
    encoder_mask, _, cross_mask = _reference_masks(target_padding_mask, source_padding_mask)
    one_ahead = torch.ones(num_queries, num_queries, dtype=torch.bool).triu(2)
    return encoder_mask, one_ahead | target_padding_mask[:, None, :], cross_mask


decoder_masks = FunctionExercise(
    "The three masks of an encoder-decoder",
    "write decoder_masks(target_padding_mask, source_padding_mask): target_padding_mask (B, T_q) and "
    "source_padding_mask (B, T_k) are True at padding tokens, which sit at the end of each sequence. Return (encoder_mask, self_mask, cross_mask), bool, "
    "True = hide: encoder_mask (B, T_k, T_k) for the encoder's self-attention (queries and keys from the source), "
    "self_mask (B, T_q, T_q) for the decoder's masked self-attention (queries and keys from the target), "
    "cross_mask (B, T_q, T_k) for the decoder's cross-attention (queries from the target, keys from the source). "
    "Each mask hides exactly what its layer must not see: no word may read what has not been written yet, and no "
    "query reads padding: hide padding keys (columns), not rows. Decide for each layer which of these apply.",
    reference=_reference_masks,
    cases=_mask_cases,
    hint=["Take the three layers one at a time and ask, for each: which sequence do its keys come from, is that "
          "sequence complete before the layer runs, and what must a query not see among those keys: the future, "
          "the padding, or both?",
          "A padding mask hides padding tokens wherever they would be read, the same for every query. Which "
          "tokens does each layer read?"],
    solution=_solution_decoder_masks,
    mistakes=[
        Mistake(_causal_in_encoder,
                "your encoder_mask is causal: the encoder reads the whole source, which is complete before it runs, "
                "so each source token may read every other (section 7: no causal mask in the encoder). Hide only "
                "the source's padding keys."),
        Mistake(_encoder_padding_on_rows,
                "your encoder_mask hides whole rows, those of the source's padding (the query axis). Hide padding "
                "keys (columns), not rows: the same columns for every query."),
        Mistake(_masks_not_expanded,
                "your encoder_mask and cross_mask are section 2's (B, 1, T_k) padding mask: the right keys hidden, "
                "but the task asks for one row per query, (B, T_k, T_k) and (B, T_q, T_k). Expand each over its "
                "queries."),
        Mistake(_causal_in_cross,
                "your cross_mask hides the source tokens after position i from output i: a causal mask does not "
                "belong in cross-attention. The whole source is known before the first word is written, and "
                "output i may need any source token (in section 4, output word 0 needs source position 1, its units digit)."),
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
        Mistake(_causal_diagonal_hidden,
                "your self_mask also hides each word's own key (the diagonal, j = i): the causal mask hides only "
                "the words after it, j > i. Word 0 then has no key left at all."),
        Mistake(_causal_one_word_ahead,
                "your self_mask lets each word read the word just after it (j = i + 1): the causal mask hides all "
                "the words after it, j > i (notebook 04's triu with diagonal=1)."),
        Mistake(_self_padding_on_rows,
                "your self_mask hides whole rows of the target's padding (the query axis). Hide padding keys "
                "(columns), not rows: the same columns for every query."),
        Mistake(_no_target_padding,
                "your self_mask is causal but does not hide the target's padding keys. The causal mask hides them "
                "from every real word, but a padded word still reads padding keys, its own and any before it, and "
                "no query may read padding: hide the target's padding keys as well."),
    ],
)


# --- 2. spot the bug: a padding mask that lines up with the heads -------------------------------------------------
def _heads_cases(g: torch.Generator) -> list[Case]:
    def case(description, lengths, num_heads, num_queries, num_keys, head_dim, scale=1.0):
        batch_size = len(lengths)
        queries = randn(g, batch_size, num_heads, num_queries, head_dim, scale=scale)
        keys = randn(g, batch_size, num_heads, num_keys, head_dim, scale=scale)
        values = randn(g, batch_size, num_heads, num_keys, head_dim)
        return Case(description, (queries, keys, values, padding_mask(lengths, num_keys)))
    return [case("2 sequences (5 and 3 real source tokens), 2 heads, T_q = 3, T_k = 5", [5, 3], 2, 3, 5, 4),
            case("3 sequences (2, 4 and 1 real tokens), 3 heads, T_q = 4, T_k = 4, large scores (inputs times 10)",
                 [2, 4, 1], 3, 4, 4, 8, scale=10.0),
            case("2 sequences (8 and 2 real tokens), 4 heads, T_q = 4, T_k = 8", [8, 2], 4, 4, 8, 4),
            case("4 sequences (1, 3, 6, 6 real tokens), 2 heads, T_q = 2, T_k = 6, sharply peaked (inputs times 25)",
                 [1, 3, 6, 6], 2, 2, 6, 4, scale=25.0),
            case("1 sequence (2 real tokens of 5), 8 heads, T_q = 6, T_k = 5", [2], 8, 6, 5, 4)]


def _reference_heads(queries, keys, values, source_padding_mask):
    context_vecs, _ = scaled_dot_product_attention(queries, keys, values, mask=source_padding_mask[:, None, None, :])
    return context_vecs


def buggy_padded_heads(queries, keys, values, source_padding_mask):
    # queries (B, H, T_q, D) from the target; keys, values (B, H, T_k, D) from the source
    # source_padding_mask (B, T_k): True at the source's padding
    attn_scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])   # (B, H, T_q, T_k)
    key_mask = source_padding_mask[:, None, :]             # section 2's line: the padding keys, for every query
    attn_scores = attn_scores.masked_fill(key_mask, float("-inf"))
    attn_weights = torch.softmax(attn_scores, dim=-1)      # (B, H, T_q, T_k)
    return attn_weights @ values                           # (B, H, T_q, D)


def _solution_padded_heads(queries, keys, values, source_padding_mask):
    attn_scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])   # (B, H, T_q, T_k)
    key_mask = source_padding_mask[:, None, None, :]       # (B, T_k) -> (B, 1, 1, T_k): every head, every query
    attn_scores = attn_scores.masked_fill(key_mask, float("-inf"))
    attn_weights = torch.softmax(attn_scores, dim=-1)      # (B, H, T_q, T_k)
    return attn_weights @ values                           # (B, H, T_q, D)


def _scores(queries, keys):
    return queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])


def _zeroed_after_softmax(queries, keys, values, source_padding_mask):
    weights = torch.softmax(_scores(queries, keys), dim=-1).masked_fill(source_padding_mask[:, None, None, :], 0.0)
    return weights @ values


def _inverted(queries, keys, values, source_padding_mask):
    return torch.softmax(_scores(queries, keys).masked_fill(~source_padding_mask[:, None, None, :], float("-inf")),
                         dim=-1) @ values


def _no_mask(queries, keys, values, source_padding_mask):
    return torch.softmax(_scores(queries, keys), dim=-1) @ values


padded_heads = SpotTheBug(
    "Spot the bug: the padding mask meets several heads",
    "padded_heads(queries, keys, values, source_padding_mask) should return the context vectors (B, H, T_q, D) of "
    "multi-head cross-attention: queries (B, H, T_q, D) from the target, keys and values (B, H, T_k, D) from the "
    "source, source_padding_mask (B, T_k) True at the source's padding, which no query of any head may read. This "
    "code runs on the lesson's batch of 2 sequences with 2 heads and returns the right shape, yet it is wrong. "
    "Find the bug and fix it. Any way of computing the answer is accepted (F.scaled_dot_product_attention "
    "included, with its own mask convention).",
    reference=_reference_heads,
    cases=_heads_cases,
    hint=["Print the shape of key_mask, then write the scores' shape under it, aligned on the right, as "
          "broadcasting aligns them. Which axis of the scores does the batch axis of the mask meet?",
          "Try a batch of 3 sequences with 2 heads: what happens, and why does a batch of 2 with 2 heads not "
          "complain?"],
    solution=_solution_padded_heads,
    buggy=buggy_padded_heads,
    bug_message="broadcasting aligns shapes from the right: key_mask (B, 1, T_k) meets the scores (B, H, T_q, T_k) "
                "as (1, B, 1, T_k), so its batch axis lands on the heads. Head h of every sequence gets the "
                "padding of sequence h: the wrong keys are hidden, silently whenever B equals H (and an error "
                "otherwise). Section 2's scores had no head axis; here the mask needs one: (B, 1, 1, T_k).",
    mistakes=[
        Mistake(_zeroed_after_softmax, "you zero the padding's weights after the softmax: each row then sums to "
                                       "less than 1, and the real tokens' weights still depend on the padding's "
                                       "scores. Hide the padding before the softmax (-inf), or renormalise."),
        Mistake(_inverted, "your mask hides the real source tokens and keeps the padding: True in "
                           "source_padding_mask means padding, to be hidden (masked_fill hides where True)."),
        Mistake(_no_mask, "your function hides nothing: every query reads the source's padding too."),
    ],
)
