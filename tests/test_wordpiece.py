"""The course's WordPiece gives the ids of the `tokenizers` library on thousands of texts.

helpers/data/wordpiece_reference.json.gz holds the texts (edge cases: accents, Greek capitals, CJK, control
characters, special tokens written in the text, over-long words; the notebooks' cells; the standard library's
docstrings) and the ids `tokenizers` gave them, written by scripts/make_minilm_reference.py in a throwaway
environment: the library never enters the course's.
"""

import gzip
import json
from pathlib import Path

import pytest

from helpers.pretrained import model_files
from helpers.wordpiece import WordPieceTokenizer

REFERENCE = Path(__file__).resolve().parents[1] / "helpers" / "data" / "wordpiece_reference.json.gz"


@pytest.fixture(scope="module")
def reference():
    with gzip.open(REFERENCE, "rt", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def ours():
    return WordPieceTokenizer.from_tokenizer_json(model_files()["tokenizer.json"])


def test_same_ids_as_the_tokenizers_library(ours, reference):
    texts, expected = reference["texts"], reference["ids"]
    assert len(texts) == len(expected) > 5000
    mismatches = [(t, ours.encode(t), e) for t, e in zip(texts, expected) if ours.encode(t) != e]
    assert not mismatches, mismatches[:3]
    assert sum(100 in ids for ids in expected) > 5  # the texts do reach [UNK]
    assert sum(len(ids) == 128 for ids in expected) > 5  # and truncation
    assert any(103 in ids for ids in expected)  # and [MASK] written in the text


def test_edge_cases_differ_from_a_naive_tokenizer(ours):
    # what a plain lower() + split would get wrong: final sigma, accents, CJK, punctuation, control characters
    assert ours.basic_tokenize("ΟΔΟΣ") == ["οδοσ"]
    assert ours.basic_tokenize("Café—naïve") == ["cafe", "—", "naive"]
    assert ours.basic_tokenize("東京is") == ["東", "京", "is"]
    assert ours.basic_tokenize("a\x00b\u200bc d") == ["abc", "d"]
    assert ours.tokenize("a [MASK] b")[1:-1] == ["a", "[MASK]", "b"]


def test_batch_pads_and_masks(ours):
    ids, padding = ours.batch(["a short one", "a somewhat longer sentence than that"])
    assert ids.shape == padding.shape and ids.shape[0] == 2
    assert ids[0, padding[0]].eq(0).all() and padding[0].sum() > 0 and not padding[1].any()
    assert ids[1].tolist() == ours.encode("a somewhat longer sentence than that")
    assert len(ours.encode(" ".join(f"word{i}" for i in range(400)))) == 128


def test_pieces():
    tok = WordPieceTokenizer({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "un": 4, "##aff": 5, "##able": 6,
                              "a": 7, ",": 8})
    assert tok.wordpiece("unaffable") == ["un", "##aff", "##able"]
    assert tok.wordpiece("unaffablex") == ["[UNK]"]
    assert tok.tokenize("Un-Aff, a") == ["[CLS]", "un", "[UNK]", "[UNK]", ",", "a", "[SEP]"]
    assert tok.basic_tokenize("Héllo,  WÖRLD!") == ["hello", ",", "world", "!"]


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="special tokens"):
        WordPieceTokenizer({"a": 0})
    with pytest.raises(TypeError, match="vocab"):
        WordPieceTokenizer(["a"])
    tok = WordPieceTokenizer({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3})
    with pytest.raises(ValueError, match="max_length"):
        WordPieceTokenizer(tok.vocab, max_length=2)
    with pytest.raises(TypeError, match="text must be a str"):
        tok.encode(b"bytes")
    with pytest.raises(TypeError, match="texts"):
        tok.batch("one text")
    with pytest.raises(ValueError, match="not a WordPiece"):
        bad = tmp_path / "not_wordpiece.json"
        bad.write_text('{"model": {"type": "BPE"}}')
        WordPieceTokenizer.from_tokenizer_json(bad)


def test_script_letters_names_each_kind_of_character():
    from helpers.wordpiece import script_letters
    found = script_letters(["Café au lait", "τ = 0.5", "東京は\u3000", "Москва", "한국어", "עברית ועربية", "１２３ ＡＢＣ ｱｲｳ",
                            "µ ℓ", "emoji 🙂 and ✓", "bell\x07 tab\t newline\n", "plain ASCII", "naïve café"])
    assert found == {"Latin": ["é", "ＡＢＣ", "éï"], "Greek": ["τ"], "Cyrillic": ["Мавкос"], "CJK": ["京東"],
                     "Hiragana": ["は"], "Katakana": ["ｱｲｳ"], "Hangul": ["국어한"], "Hebrew": ["בויערת"],
                     "Arabic": ["بةري"], "other letters": ["µℓ"], "emoji": ["🙂"], "control characters": ["\x07"],
                     "other characters": ["\u3000", "１２３", "✓"]}
    assert script_letters(["only ASCII, tab\t and newline\n"]) == {}   # tab and newlines are not controls here
    with pytest.raises(TypeError, match="list of str"):
        script_letters("one text")


def test_the_reference_texts_by_script(reference):
    from helpers.wordpiece import script_letters
    found = script_letters(reference["texts"])
    assert {kind: len(entries) for kind, entries in found.items()} == {
        "Latin": 17, "Greek": 8, "Cyrillic": 1, "CJK": 2, "Hiragana": 1, "Katakana": 1, "Hangul": 1, "Hebrew": 1,
        "Arabic": 1, "other letters": 10, "emoji": 1, "control characters": 2, "other characters": 192}
    assert found["Greek"].count("τ") == 7                      # the notebooks' temperature, and one Greek word
    assert sum(text.isascii() for text in reference["texts"]) == 6088
