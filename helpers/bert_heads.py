"""What the heads of a real encoder do, measured on sets of sentences (notebook 13).

Every function runs sentences one at a time (no padding), so a score is averaged over real tokens only.
Scores are ``(L, H)`` tensors: one number per head of every layer.

Shapes: ``L`` layers, ``H`` heads, ``T`` tokens of one sentence (``[CLS]`` ... ``[SEP]``), ``d_model`` 384.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

from .induction import previous_token_score
from .pretrained import MiniLMEncoder, knocked_out_heads, mean_pool
from .wordpiece import WordPieceTokenizer

__all__ = ["Reading", "read_sentence", "next_token_score", "weight_on_key", "mean_score", "word_positions",
           "word_to_word", "pronoun_pairs", "pronoun_vectors", "word_vectors", "paraphrase_margin", "knock_out_effects"]


class Reading(NamedTuple):
    """One sentence through the encoder: ``tokens``, ``attn_weights`` ``(L, H, T, T)``, ``hidden`` ``(L+1, T, d)``."""

    tokens: list[str]
    attn_weights: torch.Tensor
    hidden: torch.Tensor


@torch.no_grad()
def read_sentence(encoder: MiniLMEncoder, tokenizer: WordPieceTokenizer, sentence: str) -> Reading:
    """Tokenize ``sentence`` and run it alone through ``encoder``."""
    token_ids, padding_mask = tokenizer.batch([sentence])
    out = encoder(token_ids, padding_mask)
    return Reading(tokenizer.tokenize(sentence), torch.stack(out.attn_weights)[:, 0],
                   torch.stack(out.hidden_states)[:, 0])


def next_token_score(attn_weights: torch.Tensor) -> torch.Tensor:
    """Mean weight a query puts on the token just after it: ``(..., T, T)`` -> ``(...)`` (queries 0 .. T-2)."""
    return previous_token_score(attn_weights.transpose(-2, -1))  # a[i, i+1] is entry [i+1, i] of the transpose


def weight_on_key(attn_weights: torch.Tensor, key: int) -> torch.Tensor:
    """Mean weight the word tokens (queries 1 .. T-2) put on key ``key`` (0: ``[CLS]``, -1: ``[SEP]``)."""
    return attn_weights[..., 1:-1, key].mean(dim=-1)


def mean_score(readings: Sequence[Reading], score: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``score(attn_weights)`` ``(L, H)`` of each sentence, averaged over the sentences."""
    if not readings:
        raise ValueError("readings must hold at least one sentence")
    return torch.stack([score(r.attn_weights) for r in readings]).mean(dim=0)


def word_positions(tokenizer: WordPieceTokenizer, tokens: list[str], word: str) -> list[int]:
    """The positions of ``word``'s pieces in ``tokens`` (its first occurrence); ``ValueError`` if absent."""
    pieces = [p for w in tokenizer.basic_tokenize(word) for p in tokenizer.wordpiece(w)]
    for start in range(len(tokens) - len(pieces) + 1):
        if tokens[start:start + len(pieces)] == pieces:
            return list(range(start, start + len(pieces)))
    raise ValueError(f"{word!r} (pieces {pieces}) is not in the tokens {tokens}")


def word_to_word(tokenizer: WordPieceTokenizer, reading: Reading, query: str, key: str) -> torch.Tensor:
    """``(L, H)``: the weight from ``query``'s first piece to all of ``key``'s pieces."""
    q = word_positions(tokenizer, reading.tokens, query)[0]
    return reading.attn_weights[:, :, q, word_positions(tokenizer, reading.tokens, key)].sum(dim=-1)


def pronoun_pairs(encoder: MiniLMEncoder, tokenizer: WordPieceTokenizer,
                  pairs: Sequence[tuple[str, str, tuple[str, str], tuple[str, str]]]) -> torch.Tensor:
    """For each head, does the pronoun look more at the right noun? ``(2 * len(pairs), L, H)`` of 0/1.

    A pair is ``(template, pronoun, (noun_a, noun_b), (word_a, word_b))``: ``template.format(word_a)`` makes the
    pronoun mean ``noun_a``, ``template.format(word_b)`` makes it mean ``noun_b``. Row ``2k`` is the first
    sentence of pair ``k``, row ``2k + 1`` the second.
    """
    rows = []
    for template, pronoun, (noun_a, noun_b), words in pairs:
        for right, wrong, word in ((noun_a, noun_b, words[0]), (noun_b, noun_a, words[1])):
            reading = read_sentence(encoder, tokenizer, template.format(word))
            rows.append((word_to_word(tokenizer, reading, pronoun, right)
                         > word_to_word(tokenizer, reading, pronoun, wrong)).float())
    return torch.stack(rows)


@torch.no_grad()
def pronoun_vectors(encoder: MiniLMEncoder, tokenizer: WordPieceTokenizer,
                    pairs: Sequence[tuple[str, str, tuple[str, str], tuple[str, str]]]) -> torch.Tensor:
    """The model-level control of :func:`pronoun_pairs`: ``(L + 1, 2 * len(pairs))`` of 0/1, 1 where the pronoun's
    vector (row 0: after the embeddings, row ``n``: after layer ``n``) is closer, by cosine, to the right noun's
    vector than to the wrong one's (each word's first piece). Columns in :func:`pronoun_pairs`' row order."""
    columns = []
    for template, pronoun, (noun_a, noun_b), words in pairs:
        for right, wrong, word in ((noun_a, noun_b, words[0]), (noun_b, noun_a, words[1])):
            reading = read_sentence(encoder, tokenizer, template.format(word))
            vector = {w: reading.hidden[:, word_positions(tokenizer, reading.tokens, w)[0]]  # (L + 1, d_model)
                      for w in (pronoun, right, wrong)}
            cosine = {w: torch.cosine_similarity(vector[pronoun], vector[w], dim=-1) for w in (right, wrong)}
            columns.append((cosine[right] > cosine[wrong]).float())
    return torch.stack(columns, dim=1)


def word_vectors(encoder: MiniLMEncoder, tokenizer: WordPieceTokenizer, sentences: Sequence[str],
                 word: str) -> torch.Tensor:
    """``(L+1, N, d_model)``: the vector of ``word``'s first piece in each sentence, after each layer."""
    vectors = []
    for sentence in sentences:
        reading = read_sentence(encoder, tokenizer, sentence)
        vectors.append(reading.hidden[:, word_positions(tokenizer, reading.tokens, word)[0]])
    return torch.stack(vectors, dim=1)


@torch.no_grad()
def paraphrase_margin(encoder: MiniLMEncoder, tokenizer: WordPieceTokenizer,
                      pairs: Sequence[tuple[str, str]]) -> tuple[float, float]:
    """``(top1, margin)`` for sentence pairs ``(a_k, b_k)`` that say the same thing.

    Each ``a_k`` is compared by cosine similarity with every ``b``: ``top1`` is the share of ``a_k`` whose most
    similar ``b`` is ``b_k``; ``margin`` the mean of ``cos(a_k, b_k)`` minus the largest ``cos(a_k, b_j)``, ``j != k``.
    """
    token_ids, padding_mask = tokenizer.batch([a for a, _ in pairs] + [b for _, b in pairs])
    out = encoder(token_ids, padding_mask)
    embeddings = mean_pool(out.hidden_states[-1], padding_mask)  # (2N, d), each of length 1
    n = len(pairs)
    cosines = embeddings[:n] @ embeddings[n:].T  # (N, N): a_k against every b_j
    right = cosines.diagonal()
    others = cosines.masked_fill(torch.eye(n, dtype=torch.bool), float("-inf")).max(dim=1).values
    top1 = (cosines.argmax(dim=1) == torch.arange(n)).float().mean()
    return float(top1), float((right - others).mean())


def knock_out_effects(encoder: MiniLMEncoder, tokenizer: WordPieceTokenizer, pairs: Sequence[tuple[str, str]],
                      knock_outs: dict[str, list[tuple[int, int]]]) -> dict[str, tuple[float, float]]:
    """:func:`paraphrase_margin` of the intact model (``"none"``) and with each named set of heads knocked out."""
    effects = {"none": paraphrase_margin(encoder, tokenizer, pairs)}
    for name, heads in knock_outs.items():
        effects[name] = paraphrase_margin(knocked_out_heads(encoder, heads), tokenizer, pairs)
    return effects
