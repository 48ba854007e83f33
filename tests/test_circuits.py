"""Notebook 12's circuits: QK/OV matrices against the model's own scores, composition scores, path ablation, DLA."""

import math

import numpy as np
import pytest
import torch

from helpers.circuits import (composed_qk_circuit, composition_score, composition_scores, copying_eigenvalue_score,
                              direct_logit_attribution, head_outputs, ov_circuit, ov_matrix, path_ablated_forward,
                              positional_qk_circuit, qk_circuit, qk_matrix)
from helpers.induction import InductionModel, knocked_out, repeated_sequences


@pytest.fixture
def model():
    torch.manual_seed(0)
    return InductionModel(17, 12, d_model=16, num_heads=2, num_layers=2).eval()


@pytest.fixture
def ids():
    return repeated_sequences(5, 12, 17, 3, 5, torch.Generator().manual_seed(1))[0]


def test_qk_circuit_times_the_embeddings_gives_the_models_weights_without_positions(model, ids):
    with torch.no_grad():
        model.position_embedding.weight.zero_()   # tokens only: the stream entering layer 0 is E[ids]
        _, weights = model(ids, return_weights=True)
    for head in range(2):
        scores = qk_circuit(model, 0, head)[ids[:, :, None], ids[:, None, :]]   # (B, T, T): s_ij of the tokens
        scores = scores.masked_fill(torch.ones(12, 12, dtype=torch.bool).triu(1), float("-inf"))
        torch.testing.assert_close(scores.softmax(dim=-1), weights[0][:, head])


def test_positional_qk_circuit_gives_the_weights_when_the_tokens_are_silent(model, ids):
    with torch.no_grad():
        model.token_embedding.weight.zero_()
        _, weights = model(ids, return_weights=True)
    scores = positional_qk_circuit(model, 0, 1)   # (T, T), nan above the diagonal
    assert torch.isnan(scores.triu(1)[torch.ones(12, 12, dtype=torch.bool).triu(1)]).all()
    torch.testing.assert_close(scores.nan_to_num(float("-inf")).softmax(dim=-1).expand(5, 12, 12), weights[0][:, 1])


def test_ov_circuit_is_the_logits_a_head_writes_by_attending_to_one_token(model):
    # query 0 sees only key 0, so at position 0 head h adds exactly W_OV x_0; with positions and the other head
    # silenced and no biases, the logits are E[t] W_U^T (direct) plus row t of the OV circuit
    with torch.no_grad():
        model.position_embedding.weight.zero_()
        for layer in model.layers:
            layer.out_proj.bias.zero_()
            layer.out_proj.weight[:, :8] = 0.0   # head 0 writes nothing
        model.layers[1].out_proj.weight.zero_()
        model.unembed.bias.zero_()
        tokens = torch.arange(17)[:, None]   # (17, 1): every token alone
        logits = model(tokens)[:, 0]
        direct = model.token_embedding.weight @ model.unembed.weight.T
    torch.testing.assert_close(logits - direct, ov_circuit(model, 0, 1))


def test_composition_score_is_one_when_a_rank_one_head_reads_what_the_other_writes():
    u, v, a, w = torch.randn(4, 10, dtype=torch.float64).unbind()
    writes = torch.outer(v, u)                 # y W_OV = (y . v) u: writes along u
    reads_u = torch.outer(u, a)                # x W_QK = (x . u) a: the query side reads along u
    assert float(composition_score(writes, reads_u)) == pytest.approx(1.0)
    other = w - (w @ u) / (u @ u) * u          # a direction orthogonal to u
    assert float(composition_score(writes, torch.outer(other, a))) == pytest.approx(0.0, abs=1e-12)
    written, read = torch.randn(10, 10, dtype=torch.float64), torch.randn(10, 10, dtype=torch.float64)
    score = float(composition_score(written, read))
    expected = np.linalg.norm(written.numpy() @ read.numpy()) / (np.linalg.norm(written.numpy()) *
                                                                 np.linalg.norm(read.numpy()))
    assert score == pytest.approx(expected) and 0 < score < 1
    assert float(composition_score(3 * written, 0.5 * read)) == pytest.approx(score), "scale does not matter"


def test_composition_scores_follow_elhage_et_al_for_q_k_and_v(model):
    # Elhage et al. write vectors as columns: W_QK = W_Q^T W_K and W_OV = W_O W_V, from PyTorch's weights directly
    scores = composition_scores(model)
    assert set(scores) == {"Q", "K", "V"} and all(s.shape == (2, 2) for s in scores.values())
    norm = np.linalg.norm

    def weights(layer, head):
        attention, rows = model.layers[layer], slice(8 * head, 8 * head + 8)
        return [w.detach().numpy() for w in (attention.W_query.weight[rows], attention.W_key.weight[rows],
                                             attention.W_value.weight[rows], attention.out_proj.weight[:, rows])]

    for h0 in range(2):
        _, _, v0, o0 = weights(0, h0)
        w_ov0 = o0 @ v0
        for h1 in range(2):
            q1, k1, v1, o1 = weights(1, h1)
            w_qk, w_ov1 = q1.T @ k1, o1 @ v1
            expected = {"Q": norm(w_qk.T @ w_ov0) / (norm(w_qk) * norm(w_ov0)),
                        "K": norm(w_qk @ w_ov0) / (norm(w_qk) * norm(w_ov0)),
                        "V": norm(w_ov1 @ w_ov0) / (norm(w_ov1) * norm(w_ov0))}
            for side in "QKV":
                assert float(scores[side][h0, h1]) == pytest.approx(expected[side], rel=1e-5)


def test_qk_matrix_gives_the_scaled_score_of_two_stream_vectors(model):
    x_q, x_k = torch.randn(2, 16)
    layer = model.layers[1]
    with torch.no_grad():
        q, k = layer.W_query(x_q)[8:], layer.W_key(x_k)[8:]   # head 1's features
    assert float(x_q @ qk_matrix(model, 1, 1) @ x_k) == pytest.approx(float(q @ k) / math.sqrt(8), rel=1e-5)
    with torch.no_grad():   # a key that holds only what L0H1 writes when it attends to token 3 with weight 1
        written = model.layers[0].out_proj.weight[:, 8:] @ model.layers[0].W_value.weight[8:] \
            @ model.token_embedding.weight[3]
        query = model.layers[1].W_query(model.token_embedding.weight[5])[:8]
        key = model.layers[1].W_key(written)[:8]
    assert float(composed_qk_circuit(model, 1, 0)[5, 3]) == pytest.approx(float(query @ key) / math.sqrt(8), rel=1e-4)


def test_copying_eigenvalue_score_is_one_for_a_copy_and_minus_one_for_its_negative():
    assert float(copying_eigenvalue_score(torch.eye(5) * 2)) == pytest.approx(1.0)
    assert float(copying_eigenvalue_score(-torch.eye(5))) == pytest.approx(-1.0)
    rotation = torch.tensor([[0.0, -1.0], [1.0, 0.0]])   # eigenvalues ±i: no copying
    assert float(copying_eigenvalue_score(rotation)) == pytest.approx(0.0, abs=1e-7)
    with pytest.raises(ValueError, match="square"):
        copying_eigenvalue_score(torch.ones(2, 3))


def test_head_outputs_add_up_to_the_layer(model, ids):
    with torch.no_grad():
        x = model.token_embedding(ids) + model.position_embedding.weight[:12]
        outputs, weights = head_outputs(model, 0, x)
        layer_out, layer_weights = model.layers[0](x, return_weights=True)
    torch.testing.assert_close(outputs.sum(dim=1) + model.layers[0].out_proj.bias, layer_out)
    torch.testing.assert_close(weights, layer_weights)


def test_direct_logit_attribution_sums_to_the_logits(model, ids):
    names, parts = direct_logit_attribution(model, ids)
    assert names == ["embeddings", "L0H0", "L0H1", "L1H0", "L1H1", "biases"]
    assert parts.shape == (6, 5, 12, 17)
    with torch.no_grad():
        torch.testing.assert_close(parts.sum(dim=0), model(ids), atol=1e-5, rtol=1e-5)


def test_path_ablation_on_no_side_is_the_model_and_on_every_side_with_zeros_is_the_knock_out(model, ids):
    with torch.no_grad():
        plain_logits, plain_weights = model(ids, return_weights=True)
        with knocked_out(model, [(0, 1)]):
            out_logits, out_weights = model(ids, return_weights=True)
    logits, weights = path_ablated_forward(model, ids, 1, ())
    torch.testing.assert_close(logits, plain_logits)
    torch.testing.assert_close(weights, plain_weights[1])
    logits, weights = path_ablated_forward(model, ids, 1, ("query", "key", "value", "residual"), mode="zero")
    torch.testing.assert_close(logits, out_logits)
    torch.testing.assert_close(weights, out_weights[1])


def test_path_ablation_changes_only_the_reads_it_names(model, ids):
    _, plain = path_ablated_forward(model, ids, 0, ())
    _, values_only = path_ablated_forward(model, ids, 0, ("value", "residual"))
    torch.testing.assert_close(values_only, plain)   # values and the residual path cannot move the pattern
    _, keys_only = path_ablated_forward(model, ids, 0, ("key",))
    assert not torch.allclose(keys_only, plain)
    # mean-ablation over one sequence is that sequence's own output: nothing changes
    logits, _ = path_ablated_forward(model, ids[:1], 0, ("query", "key", "value", "residual"), mode="mean")
    with torch.no_grad():
        torch.testing.assert_close(logits, model(ids[:1]))


@pytest.mark.parametrize("call, error, match", [
    (lambda m, i: path_ablated_forward(m, i, 2, ("key",)), ValueError, "head"),
    (lambda m, i: path_ablated_forward(m, i, 0, "key"), ValueError, "sides"),
    (lambda m, i: path_ablated_forward(m, i, 0, ("keys",)), ValueError, "sides"),
    (lambda m, i: path_ablated_forward(m, i, 0, ("key",), mode="resample"), ValueError, "mode"),
    (lambda m, i: path_ablated_forward(m, i.float(), 0, ("key",)), TypeError, "token_ids"),
    (lambda m, i: qk_circuit(m, 2, 0), ValueError, "layer"),
    (lambda m, i: ov_circuit(m, 0, -1), ValueError, "head"),
    (lambda m, i: positional_qk_circuit(m, 0, 0, num_tokens=13), ValueError, "num_tokens"),
    (lambda m, i: qk_circuit(torch.nn.Linear(2, 2), 0, 0), TypeError, "InductionModel"),
    (lambda m, i: composition_score(torch.zeros(3, 3), torch.ones(3, 3)), ValueError, "written"),
    (lambda m, i: composition_score(torch.ones(3, 2), torch.ones(3, 3)), ValueError, "multiplied"),
    (lambda m, i: composition_score(torch.ones(3, 3), torch.ones(3)), TypeError, "read"),
    (lambda m, i: direct_logit_attribution(m, i[:, None]), TypeError, "token_ids"),
])
def test_bad_input_is_named(model, ids, call, error, match):
    with pytest.raises(error, match=match):
        call(model, ids)


def test_composition_scores_need_two_layers():
    with pytest.raises(ValueError, match="two layers"):
        composition_scores(InductionModel(17, 12, d_model=16, num_heads=2, num_layers=1))


def test_q_and_k_labels_follow_what_path_ablation_shows():
    # a rank-1 circuit built by hand: L0H1 writes along u; L1H0's key reads along u, its query along a ⊥ u. Then
    # K-composition is 1 and Q-composition 0, and removing L0H1 moves L1H0's pattern from the keys only. Swapping
    # the Q and K labels (or transposing W_QK between the two conventions) fails here.
    torch.manual_seed(0)
    model = InductionModel(17, 12, d_model=16, num_heads=2, num_layers=2).eval()
    u, a, v, b = torch.randn(4, 16).unbind()
    a = a - (a @ u) / (u @ u) * u                      # the query side reads a direction L0H1 never writes
    with torch.no_grad():
        for attention in model.layers:
            for linear in (attention.W_query, attention.W_key, attention.W_value, attention.out_proj):
                linear.weight.zero_()
        model.layers[0].W_value.weight[8] = v          # L0H1: y W_OV = (y . v) u, rank 1
        model.layers[0].out_proj.weight[:, 8] = u
        model.layers[1].W_query.weight[0] = a          # L1H0: x W_QK y^T = (x . a)(y . u) / sqrt(D), rank 1
        model.layers[1].W_key.weight[0] = u
        for layer, head, reads, writes in ((0, 0, v, b), (1, 1, b, a)):   # the other heads, nonzero but not used
            model.layers[layer].W_query.weight[8 * head] = reads
            model.layers[layer].W_key.weight[8 * head] = writes
        for layer in (0, 1):
            model.layers[layer].W_value.weight[0] = v
            model.layers[layer].out_proj.weight[:, 0] = b
        model.layers[1].W_value.weight[8] = v
        model.layers[1].out_proj.weight[:, 8] = a
    scores = composition_scores(model)
    assert float(scores["K"][1, 0]) == pytest.approx(1.0, abs=1e-5)
    assert float(scores["Q"][1, 0]) == pytest.approx(0.0, abs=1e-5)
    ids = repeated_sequences(6, 12, 17, 3, 5, torch.Generator().manual_seed(1))[0]
    _, plain = path_ablated_forward(model, ids, 1, ())
    _, queries_only = path_ablated_forward(model, ids, 1, ("query",))
    _, keys_only = path_ablated_forward(model, ids, 1, ("key",))
    torch.testing.assert_close(queries_only[:, 0], plain[:, 0])
    assert (keys_only[:, 0] - plain[:, 0]).abs().max() > 1e-2


def test_a_layer_1_heads_attribution_is_its_direct_path_plus_its_value_path_pair_terms(model, ids):
    """The L1H0 piece splits into the embeddings, each layer-0 head and layer 0's bias, each read through L1H0's
    values with L1H0's actual weights: nothing else (the key and query paths only set those weights)."""
    names, parts = direct_logit_attribution(model, ids)
    with torch.no_grad():
        x0 = model.token_embedding(ids) + model.position_embedding.weight[:12]
        outputs0, _ = head_outputs(model, 0, x0)                                   # (B, H, T, d_model)
        bias0 = model.layers[0].out_proj.bias
        _, weights1 = model(ids, return_weights=True)
        a = weights1[1][:, 0]                                                      # (B, T, T): L1H0's weights
        read = lambda stream: a @ stream @ ov_matrix(model, 1, 0) @ model.unembed.weight.T   # (B, T, V)
        terms = [read(x0), read(outputs0[:, 0]), read(outputs0[:, 1]), read(bias0.expand_as(x0))]
    torch.testing.assert_close(sum(terms), parts[names.index("L1H0")], atol=1e-5, rtol=1e-5)
    assert terms[2].abs().max() > 1e-3   # a pair term is really there (L0H1 read through L1H0's values)
