"""The course's WordPiece gives the ids of the `tokenizers` library (a test-only dependency) on thousands of texts."""

import importlib
import json
from pathlib import Path

import pytest

from helpers.pretrained import model_files
from helpers.wordpiece import WordPieceTokenizer

tokenizers = pytest.importorskip("tokenizers", reason="tokenizers is in the test extra (pip install -e '.[test]')")

ROOT = Path(__file__).resolve().parents[1]

EDGE_CASES = [
    "", " ", "\t\n", "Hello, world!", "HELLO World", "don't stop-believing...", "e-mail: a.b@c.com (2024)",
    "3.14159 is pi; 1,000,000 > 999_999", "Café naïve résumé Ångström façade coöperate", "ÀÉÎÕÜ àéîõü ñ ç ß",
    "ΣΊΣΥΦΟΣ Σίσυφος ΟΔΟΣ", "Москва — столица России.", "東京は日本の首都です。", "北京欢迎你！", "한국어 텍스트",
    "עברית ועربية", "emoji 🙂👍🏽 and ✓ ★ ♥", "zero\u200bwidth\u200djoiner", "non\u00a0breaking\u2009thin\u3000ideo",
    "tab\tvertical\x0bform\x0cfeed\x1cfs\x85nel", "ctrl\x00\x07\x1b[0m\ufffd", "İstanbul ǅ ǈ ﬁ ﬂ ligatures",
    "x" * 99, "y" * 100, "z" * 101, "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "[CLS] a [SEP] b [MASK] c [PAD] [UNK] [cls] [ MASK ]", "a[MASK]b", "#hashtag ##piece @user $5 %20 ^_^ ~tilde~",
    "«quotes» „German“ “curly” ‘single’ ¿Qué? ¡Sí!", "½ ¼ ² ³ µ ° ± × ÷ ∑ ∞ √", "１２３ ＡＢＣ ｱｲｳ", "\u0301\u0301",
    "camelCaseWord snake_case_word kebab-case-word PascalCase", "https://example.org/path?q=1&r=2#frag",
    "C++ C# F# .NET Node.js", "The animal didn't cross the street because it was too tired.",
]


def corpus() -> list[str]:
    """Edge cases, the notebooks' cells (whole and line by line) and the standard library's docstring lines."""
    texts = list(EDGE_CASES)
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])
            texts += [source, *(line for line in source.splitlines() if line.strip())]  # whole cells get truncated
    for name in ("json", "re", "textwrap", "pathlib", "collections", "functools", "itertools", "unicodedata",
                 "string", "argparse", "logging", "email", "http.client", "urllib.parse", "statistics", "decimal"):
        module = importlib.import_module(name)
        for obj in [module, *vars(module).values()]:
            doc = getattr(obj, "__doc__", None)
            texts += [line for line in doc.splitlines() if line.strip()] if isinstance(doc, str) else []
    return list(dict.fromkeys(texts))


@pytest.fixture(scope="module")
def both():
    path = model_files()["tokenizer.json"]
    reference = tokenizers.Tokenizer.from_file(str(path))
    reference.no_padding()
    return WordPieceTokenizer.from_tokenizer_json(path), reference


def test_same_ids_as_the_tokenizers_library(both):
    ours, reference = both
    texts = corpus()
    assert len(texts) > 5000
    expected = [e.ids for e in reference.encode_batch(texts)]
    mismatches = [(t, ours.encode(t), e) for t, e in zip(texts, expected) if ours.encode(t) != e]
    assert not mismatches, mismatches[:3]
    assert sum(100 in ids for ids in expected) > 5  # the corpus does reach [UNK]
    assert any(len(ids) == 128 for ids in expected)  # and truncation


def test_long_text_truncated_like_the_library(both):
    ours, reference = both
    text = " ".join(f"word{i}" for i in range(400))
    assert ours.encode(text) == reference.encode(text).ids
    assert len(ours.encode(text)) == 128


def test_batch_pads_and_masks(both):
    ours, reference = both
    ids, padding = ours.batch(["a short one", "a somewhat longer sentence than that"])
    assert ids.shape == padding.shape and ids.shape[0] == 2
    assert ids[0, padding[0]].eq(0).all() and padding[0].sum() > 0 and not padding[1].any()
    assert ids[1].tolist() == reference.encode("a somewhat longer sentence than that").ids


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
