"""BERT's WordPiece tokenization, written out: text -> token ids a published BERT model reads.

Two steps, as the BERT release's ``tokenization.py`` does them (github.com/google-research/bert: ``BasicTokenizer``,
then ``WordpieceTokenizer``, "greedy longest-match-first"); BERT reads WordPiece tokens (Devlin et al. 2019, section 3),
the subword units of Wu et al. 2016 (section 4.1):

1. *Basic tokenization*: drop control characters, turn every kind of space into ``" "``, put spaces around
   CJK ideographs (each becomes a word of its own), strip accents (NFD, then drop the combining marks),
   lower-case, split on spaces and cut every punctuation character out as a word of its own.
2. *WordPiece*: each word is covered greedily from the left by the longest piece in the vocabulary; a piece
   that does not start the word is written with ``##`` in front. A word that cannot be covered, or that is
   longer than ``max_input_chars_per_word`` characters, becomes ``[UNK]``.

Then ``[CLS]`` is put in front and ``[SEP]`` at the end. The special tokens themselves (``[CLS]``, ``[MASK]``,
...) written in the text are kept whole. The vocabulary comes from a Hugging Face ``tokenizer.json``.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from pathlib import Path

import torch

__all__ = ["WordPieceTokenizer", "SCRIPTS", "script_letters"]

_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
               (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_space(char: str) -> bool:
    return char in "\t\n\r" or unicodedata.category(char) in ("Zs", "Zl", "Zp")


def _is_control(char: str) -> bool:  # every "other" category (Cc, Cf, Cs, Co, Cn), but tab and newlines are spaces
    return char not in "\t\n\r" and unicodedata.category(char).startswith("C")


def _is_punctuation(char: str) -> bool:
    return char in string.punctuation or unicodedata.category(char).startswith("P")


def _is_cjk(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _CJK_RANGES)


class WordPieceTokenizer:
    """Text -> ids for a BERT vocabulary (uncased: lower-cased, accents stripped).

    ``vocab`` maps each piece to its id and must hold ``[PAD] [UNK] [CLS] [SEP]``.
    """

    special_tokens = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

    def __init__(self, vocab: dict[str, int], max_length: int = 128, max_input_chars_per_word: int = 100):
        if not isinstance(vocab, dict) or not all(isinstance(k, str) and isinstance(v, int) for k, v in vocab.items()):
            raise TypeError("vocab must be a dict mapping str pieces to int ids")
        missing = [t for t in self.special_tokens[:4] if t not in vocab]
        if missing:
            raise ValueError(f"vocab lacks the special tokens {missing}")
        for name, value in (("max_length", max_length), ("max_input_chars_per_word", max_input_chars_per_word)):
            if not isinstance(value, int) or isinstance(value, bool) or value < (3 if name == "max_length" else 1):
                raise ValueError(f"{name} must be an int >= {3 if name == 'max_length' else 1}, got {value!r}")
        self.vocab, self.max_length, self.max_chars = vocab, max_length, max_input_chars_per_word
        self.pieces = {i: piece for piece, i in vocab.items()}  # id -> piece
        self._known: dict[str, list[str]] = {}  # word -> its pieces, for words met before
        specials = [t for t in self.special_tokens if t in vocab]
        self._special_split = re.compile("(" + "|".join(re.escape(t) for t in specials) + ")")

    @classmethod
    def from_tokenizer_json(cls, path: str | Path) -> "WordPieceTokenizer":
        """Read the WordPiece vocabulary (and the truncation length) of a Hugging Face ``tokenizer.json``."""
        config = json.loads(Path(path).read_text(encoding="utf-8"))
        model = config.get("model", {})
        if model.get("type") != "WordPiece":
            raise ValueError(f"{path} is not a WordPiece tokenizer (model type {model.get('type')!r})")
        max_length = (config.get("truncation") or {}).get("max_length", 512)
        return cls(model["vocab"], max_length=max_length,
                   max_input_chars_per_word=model.get("max_input_chars_per_word", 100))

    def basic_tokenize(self, text: str) -> list[str]:
        """Step 1: clean, space out CJK, strip accents, lower-case, split on spaces and punctuation."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        chars = [" " if _is_space(c) else c for c in text if c not in "\x00\ufffd" and not _is_control(c)]
        text = "".join(f" {c} " if _is_cjk(c) else c for c in chars)
        text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        text = "".join(c.lower() for c in text)  # character by character: no final-sigma rule
        words = []
        for chunk in text.split():
            word = ""
            for char in chunk:
                if _is_punctuation(char):
                    words += [word, char] if word else [char]
                    word = ""
                else:
                    word += char
            if word:
                words.append(word)
        return words

    def wordpiece(self, word: str) -> list[str]:
        """Step 2: the longest pieces of the vocabulary that cover ``word`` from the left, else ``["[UNK]"]``."""
        if word not in self._known:
            self._known[word] = self._wordpiece(word)
        return list(self._known[word])

    def _wordpiece(self, word: str) -> list[str]:
        if len(word) > self.max_chars:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            else:  # no piece fits here: the whole word is unknown
                return ["[UNK]"]
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        """The pieces of ``text``, with ``[CLS]`` in front and ``[SEP]`` at the end, cut to ``max_length``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        pieces = []
        for part in self._special_split.split(text):
            if part in self.vocab and part in self.special_tokens:
                pieces.append(part)
            elif part:
                pieces += [p for word in self.basic_tokenize(part) for p in self.wordpiece(word)]
        return ["[CLS]", *pieces[: self.max_length - 2], "[SEP]"]

    def encode(self, text: str) -> list[int]:
        """The ids of :meth:`tokenize`'s pieces."""
        return [self.vocab[p] for p in self.tokenize(text)]

    def batch(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(token_ids, padding_mask)``, both ``(B, T)``: ids padded with ``[PAD]`` to the longest text,
        ``padding_mask`` ``True`` where a position is padding (the model must not attend there)."""
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)) or not texts:
            raise TypeError("texts must be a non-empty list of str (one text: pass [text])")
        encoded = [self.encode(t) for t in texts]
        num_tokens = max(len(ids) for ids in encoded)
        token_ids = torch.full((len(texts), num_tokens), self.vocab["[PAD]"], dtype=torch.long)
        padding_mask = torch.ones(len(texts), num_tokens, dtype=torch.bool)
        for row, ids in enumerate(encoded):
            token_ids[row, : len(ids)] = torch.tensor(ids)
            padding_mask[row, : len(ids)] = False
        return token_ids, padding_mask


# Unicode scripts named by :func:`script_letters`, as they appear in the characters' Unicode names
SCRIPTS = {"LATIN": "Latin", "GREEK": "Greek", "CYRILLIC": "Cyrillic", "CJK": "CJK", "HIRAGANA": "Hiragana",
           "KATAKANA": "Katakana", "HANGUL": "Hangul", "HEBREW": "Hebrew", "ARABIC": "Arabic"}


def script_letters(texts: list[str]) -> dict[str, list[str]]:
    """What besides ASCII a set of texts holds: ``{kind: [its characters in each text that has some]}``.

    Every letter outside ASCII counts for the script its Unicode name names (``"Latin"`` for "é", "ß" or a
    full-width "Ａ", ``"Greek"``, ``"CJK"`` ideographs, ...), or for ``"other letters"`` ("µ", "ℓ"); besides,
    ``"emoji"`` (symbols from U+1F000 on), ``"control characters"`` (category Cc, tab and newlines excepted) and
    ``"other characters"`` (every other character outside ASCII: symbols such as "✓" or "€", punctuation, spaces).
    Each entry is one text's distinct characters of that kind, sorted, as a string; scripts in the order of
    :data:`SCRIPTS`, then the other kinds, each only if some text has it.
    """
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a list of str")
    kinds = [*SCRIPTS.values(), "other letters", "emoji", "control characters", "other characters"]
    found: dict[str, list[str]] = {kind: [] for kind in kinds}
    for text in texts:
        seen: dict[str, set[str]] = {}
        for char in set(text):
            category = unicodedata.category(char)
            if category == "Cc" and char not in "\t\n\r":
                kind = "control characters"
            elif ord(char) < 128:
                kind = None
            elif category.startswith("L"):
                words = unicodedata.name(char, "").split()
                kind = next((SCRIPTS[w] for w in words if w in SCRIPTS), "other letters")
            else:
                kind = "emoji" if category == "So" and ord(char) >= 0x1F000 else "other characters"
            if kind:
                seen.setdefault(kind, set()).add(char)
        for kind, chars in seen.items():
            found[kind].append("".join(sorted(chars)))
    return {kind: entries for kind, entries in found.items() if entries}
