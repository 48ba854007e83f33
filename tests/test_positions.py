"""helpers.positions and helpers.position_model: the encodings, RoPE (two formulations, two pairings, the offset
property), the learned table's limit, the position model and its training, and clear errors on bad input."""

import math

import pytest
import torch

from helpers.attention import scaled_dot_product_attention
from helpers.position_model import (POSITION_KINDS, PositionModel, PositionTask, accuracy_table, position_accuracy,
                                   train_position_model)
from helpers.positions import (LearnedPositions, angular_frequencies, apply_rope, halves_to_adjacent, rope_angles,
                               sinusoidal_positions)


# --- frequencies and sinusoidal encodings -----------------------------------------------------------------------
def test_angular_frequencies_follow_the_card():
    omega = angular_frequencies(8)
    torch.testing.assert_close(omega, torch.tensor([1.0, 10000 ** -0.25, 10000 ** -0.5, 10000 ** -0.75]))
    assert angular_frequencies(512)[-1] < 1.1e-4   # the slowest pair of a wide vector turns about 1/10000
    torch.testing.assert_close(angular_frequencies(4, base=100.0), torch.tensor([1.0, 0.1]))


def test_sinusoidal_positions_match_the_formula_of_vaswani_et_al():
    num_tokens, d_in = 50, 12
    expected = torch.zeros(num_tokens, d_in, dtype=torch.float64)
    for i in range(num_tokens):
        for r in range(d_in // 2):
            expected[i, 2 * r] = math.sin(i / 10000 ** (2 * r / d_in))
            expected[i, 2 * r + 1] = math.cos(i / 10000 ** (2 * r / d_in))
    encoding = sinusoidal_positions(num_tokens, d_in)
    assert encoding.dtype == torch.float32 and encoding.shape == (num_tokens, d_in)
    torch.testing.assert_close(encoding.double(), expected, atol=1e-5, rtol=0)


def test_sinusoidal_dot_products_depend_on_the_distance_only():
    encoding = sinusoidal_positions(40, 16).double()
    dots = encoding @ encoding.T                                     # (T, T)
    torch.testing.assert_close(dots[1:, 1:], dots[:-1, :-1], atol=1e-4, rtol=0)
    torch.testing.assert_close(encoding.norm(dim=-1), torch.full((40,), math.sqrt(8), dtype=torch.float64))


def test_sinusoidal_positions_are_all_distinct():
    encoding = sinusoidal_positions(512, 32)
    distances = torch.cdist(encoding, encoding) + torch.eye(512) * 100
    assert distances.min() > 0.1


@pytest.mark.parametrize("call, error, words", [
    (lambda: sinusoidal_positions(8, 7), ValueError, "d_in must be even|dim must be even"),
    (lambda: sinusoidal_positions(0, 8), ValueError, "num_tokens must be at least 1"),
    (lambda: sinusoidal_positions(8.0, 8), TypeError, "num_tokens must be an int"),
    (lambda: sinusoidal_positions(8, 8, base=1), ValueError, "base must be a number above 1"),
    (lambda: angular_frequencies(5), ValueError, "must be even"),
])
def test_sinusoidal_bad_input_gets_a_clear_error(call, error, words):
    with pytest.raises(error, match=words):
        call()


# --- the learned table -------------------------------------------------------------------------------------------
def test_learned_positions_return_their_first_rows_and_refuse_more():
    torch.manual_seed(0)
    table = LearnedPositions(8, 4)
    assert table(5).shape == (5, 4)
    torch.testing.assert_close(table(5), table.weight[:5])
    assert table.weight.requires_grad and 0.05 < float(table.weight.detach().std()) < 0.2
    with pytest.raises(ValueError, match="beyond the table's length.*0 to 7"):
        table(9)
    with pytest.raises(TypeError, match="num_tokens must be an int"):
        table(torch.tensor(3))
    table(8).sum().backward()
    assert table.weight.grad is not None and float(table.weight.grad.abs().sum()) == 32.0


# --- RoPE ----------------------------------------------------------------------------------------------------------
def _complex_rope(x, positions):
    """RoPE as complex multiplication, the way Meta's Llama code writes it (adjacent pairs)."""
    head_dim = x.shape[-1]
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], head_dim // 2, 2))   # (..., T, D/2)
    omega = 10000.0 ** (-2 * torch.arange(head_dim // 2, dtype=torch.float64) / head_dim)
    turns = torch.polar(torch.ones(len(positions), head_dim // 2, dtype=torch.float64),
                        positions.double()[:, None] * omega)                              # (T, D/2)
    return torch.view_as_real(pairs * turns).flatten(-2).to(x.dtype)


@pytest.mark.parametrize("shape", [(5, 4), (2, 3, 7, 8), (1, 33, 16)])
def test_rope_equals_complex_multiplication(shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(shape[-2])
    torch.testing.assert_close(apply_rope(x), _complex_rope(x, positions), atol=1e-5, rtol=1e-5)
    later = torch.arange(shape[-2]) + 100            # as for tokens further on in a text
    torch.testing.assert_close(apply_rope(x, later), _complex_rope(x, later), atol=1e-4, rtol=1e-4)


def test_rope_equals_rotation_matrices_pair_by_pair():
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    turned = apply_rope(x)
    for i in range(6):
        for r in range(2):
            t = i * 10000 ** (-2 * r / 4)
            rotation = torch.tensor([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]], dtype=torch.float64)
            torch.testing.assert_close(turned[i, 2 * r: 2 * r + 2], rotation @ x[i, 2 * r: 2 * r + 2],
                                       atol=1e-6, rtol=0)


def test_rope_scores_depend_on_the_offset_only_and_keep_lengths():
    generator = torch.Generator().manual_seed(2)
    queries, keys = torch.randn(1, 2, 20, 8, generator=generator), torch.randn(1, 2, 20, 8, generator=generator)
    same_q, same_k = queries[..., :1, :].expand_as(queries), keys[..., :1, :].expand_as(keys)
    scores = apply_rope(same_q) @ apply_rope(same_k).transpose(-2, -1)                  # (B, H, T, T)
    torch.testing.assert_close(scores[..., 1:, 1:], scores[..., :-1, :-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(apply_rope(queries).norm(dim=-1), queries.norm(dim=-1))
    # shifting every position by the same amount leaves every score unchanged
    shifted = torch.arange(20) + 7
    torch.testing.assert_close(apply_rope(queries, shifted) @ apply_rope(keys, shifted).transpose(-2, -1),
                               apply_rope(queries) @ apply_rope(keys).transpose(-2, -1), atol=1e-4, rtol=1e-4)
    # ... while turning only the queries does not
    moved = apply_rope(queries, shifted) @ apply_rope(keys).transpose(-2, -1)
    assert not torch.allclose(moved, apply_rope(queries) @ apply_rope(keys).transpose(-2, -1), atol=1e-3)


def test_rope_at_position_zero_is_the_identity_and_gradients_flow():
    x = torch.randn(3, 1, 6, generator=torch.Generator().manual_seed(3), requires_grad=True)
    torch.testing.assert_close(apply_rope(x), x)
    y = torch.randn(4, 6, generator=torch.Generator().manual_seed(4), requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: apply_rope(t), (y.double().detach().requires_grad_(),))
    apply_rope(y).sum().backward()
    assert y.grad is not None and y.grad.shape == y.shape


def test_the_two_pairings_are_the_same_up_to_a_permutation():
    x = torch.randn(2, 3, 5, 12, generator=torch.Generator().manual_seed(5))
    perm = halves_to_adjacent(12)
    assert perm.tolist() == [0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11]
    torch.testing.assert_close(apply_rope(x, pairs="halves")[..., perm], apply_rope(x[..., perm]))
    assert not torch.allclose(apply_rope(x, pairs="halves"), apply_rope(x), atol=1e-3)   # they do differ unordered


def test_rope_halves_equals_the_rotate_half_formula():
    x = torch.randn(7, 8, generator=torch.Generator().manual_seed(6))
    angles = rope_angles(torch.arange(7), 8)                              # (T, D/2)
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    rotate_half = torch.cat((-x[..., 4:], x[..., :4]), dim=-1)
    torch.testing.assert_close(apply_rope(x, pairs="halves"), x * cos + rotate_half * sin)


def test_rope_keeps_dtype_and_device():
    x = torch.randn(4, 8, dtype=torch.float64)
    assert apply_rope(x).dtype == torch.float64
    assert apply_rope(x.half()).dtype == torch.float16


@pytest.mark.parametrize("call, error, words", [
    (lambda: apply_rope(torch.randn(4, 7)), ValueError, "head_dim must be even"),
    (lambda: apply_rope(torch.arange(8).view(2, 4)), TypeError, "floating-point"),
    (lambda: apply_rope([[1.0, 2.0]]), TypeError, "torch.Tensor"),
    (lambda: apply_rope(torch.randn(4)), ValueError, r"\(\.\.\., num_tokens, head_dim\)"),
    (lambda: apply_rope(torch.randn(4, 8), torch.arange(5)), ValueError, "one entry per token"),
    (lambda: apply_rope(torch.randn(4, 8), torch.arange(4.0)), TypeError, "integer positions"),
    (lambda: apply_rope(torch.randn(4, 8), torch.tensor([0, 1, -1, 2])), ValueError, "0 or more"),
    (lambda: apply_rope(torch.randn(4, 8), pairs="interleaved"), ValueError, "pairs must be one of"),
    (lambda: halves_to_adjacent(5), ValueError, "head_dim must be even"),
    (lambda: rope_angles(torch.arange(6).view(2, 3), 4), ValueError, r"shape \(num_tokens,\)"),
])
def test_rope_bad_input_gets_a_clear_error(call, error, words):
    with pytest.raises(error, match=words):
        call()


# --- the position model and its tasks -----------------------------------------------------------------------------
def test_tasks_give_the_right_targets():
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    assert PositionTask("reversal").targets(ids).tolist() == [[5, 4, 3, 2, 1]]
    assert PositionTask("copy_back", offset=2).targets(ids).tolist() == [[-100, -100, 1, 2, 3]]
    sample = PositionTask("copy_back").sample(3, 12, torch.Generator().manual_seed(0))
    assert sample.shape == (3, 12) and sample.dtype == torch.long and int(sample.max()) < 10
    with pytest.raises(ValueError, match="kind must be"):
        PositionTask("rotation")
    with pytest.raises(ValueError, match="num_tokens must be more than offset"):
        PositionTask("copy_back", offset=3).sample(1, 3)
    with pytest.raises(TypeError, match="torch.long"):
        PositionTask("reversal").targets(torch.zeros(2, 3))


@pytest.mark.parametrize("kind", POSITION_KINDS)
def test_position_model_shapes_and_which_lengths_it_reads(kind):
    torch.manual_seed(0)
    model = PositionModel(10, kind, max_tokens=8)
    logits, weights = model(torch.randint(0, 10, (3, 8)), return_weights=True)
    assert logits.shape == (3, 8, 10) and weights.shape == (3, 2, 8, 8)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2, 8))
    assert model.supports(8) and model.supports(20) == (kind != "learned")
    if kind == "learned":
        with pytest.raises(ValueError, match="beyond the table's length"):
            model(torch.randint(0, 10, (1, 9)))
    else:
        assert model(torch.randint(0, 10, (1, 20))).shape == (1, 20, 10)


def test_without_positions_the_model_is_permutation_equivariant_and_with_them_it_is_not():
    ids = torch.randint(0, 10, (4, 8), generator=torch.Generator().manual_seed(0))
    shuffle = torch.randperm(8, generator=torch.Generator().manual_seed(1))
    for kind in POSITION_KINDS:
        torch.manual_seed(0)
        model = PositionModel(10, kind).eval()
        with torch.no_grad():
            model.position_embedding.weight.normal_()   # large enough to matter
            same = torch.allclose(model(ids[:, shuffle]), model(ids)[:, shuffle], atol=1e-5)
        assert same == (kind == "none"), kind


def test_models_of_every_kind_start_from_the_same_weights_but_positions():
    torch.manual_seed(0)
    models = {kind: train_position_model(PositionTask("reversal"), kind, num_steps=1, lr=1e-12) for kind in
              POSITION_KINDS}
    for kind in POSITION_KINDS[1:]:
        for (name, p), q in zip(models["none"].named_parameters(), models[kind].parameters()):
            torch.testing.assert_close(p, q, msg=name)


def test_training_is_reproducible_and_learns_copy_back_with_rope():
    task = PositionTask("copy_back", offset=2)
    test_ids = task.sample(300, 8, torch.Generator().manual_seed(2))
    first = train_position_model(task, "rope", num_steps=120, seed=0)
    again = train_position_model(task, "rope", num_steps=120, seed=0)
    for p, q in zip(first.parameters(), again.parameters()):
        torch.testing.assert_close(p, q)
    assert position_accuracy(first, task, test_ids) > 0.9
    blind = train_position_model(task, "none", num_steps=120, seed=0)
    assert position_accuracy(blind, task, test_ids) < 0.5


def test_accuracy_per_position_averages_to_the_accuracy_and_skips_outputs_without_a_target():
    task = PositionTask("copy_back", offset=2)
    model = train_position_model(task, "rope", num_steps=20, seed=0)
    ids = task.sample(40, 8, torch.Generator().manual_seed(1))
    per_output = position_accuracy(model, task, ids, per_position=True)
    assert per_output.shape == (8,) and per_output[:2].isnan().all() and not per_output[2:].isnan().any()
    assert math.isclose(float(per_output[2:].mean()), position_accuracy(model, task, ids), rel_tol=1e-6)
    with torch.no_grad():
        answers = model(ids).argmax(-1)
    assert math.isclose(float(per_output[5]), float((answers[:, 5] == ids[:, 3]).float().mean()), rel_tol=1e-6)


def test_accuracy_table_scores_every_model_and_says_when_a_length_cannot_be_read():
    task = PositionTask("copy_back", offset=2)
    models = {("copy", kind): train_position_model(task, kind, num_steps=5, seed=0) for kind in ("none", "learned")}
    test_ids = {T: task.sample(50, T, torch.Generator().manual_seed(1)) for T in (8, 16)}
    table = accuracy_table(models, {"copy": task}, test_ids, [("copy", 8), ("copy", 16)]).splitlines()
    assert len(table) == 3 and "copy, T=8" in table[0] and "copy, T=16" in table[0]
    assert table[1].split()[0] == "none" and f"{position_accuracy(models[('copy', 'none')], task, test_ids[16]):.0%}" \
        in table[1]
    assert table[2].split()[0] == "learned" and table[2].endswith("not defined")
    assert "not defined" not in table[1]
    with pytest.raises(ValueError, match="columns"):
        accuracy_table(models, {"copy": task}, test_ids, [("copy", 32)])


@pytest.mark.parametrize("call, error, words", [
    (lambda: PositionModel(10, "alibi"), ValueError, "position must be one of"),
    (lambda: PositionModel(10, "rope", d_model=12, num_heads=4), ValueError, "even width"),
    (lambda: PositionModel(10, "none", d_model=10, num_heads=3), ValueError, "divisible"),
    (lambda: PositionModel(10)(torch.zeros(2, 8)), TypeError, "torch.long"),
    (lambda: PositionModel(10)(torch.full((2, 8), 10)), ValueError, r"\[0, 10\)"),
    (lambda: train_position_model("reversal", "rope"), TypeError, "PositionTask"),
    (lambda: train_position_model(PositionTask("reversal"), "rope", lr=0), ValueError, "lr must be"),
])
def test_model_bad_input_gets_a_clear_error(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_rope_model_attention_equals_scaled_dot_product_on_turned_queries_and_keys():
    torch.manual_seed(0)
    model = PositionModel(10, "rope").eval()
    ids = torch.randint(0, 10, (2, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        _, weights = model(ids, return_weights=True)
        x = model.token_embedding(ids)
        queries = model.W_query(x).view(2, 6, 2, 16).transpose(1, 2)
        keys = model.W_key(x).view(2, 6, 2, 16).transpose(1, 2)
        values = model.W_value(x).view(2, 6, 2, 16).transpose(1, 2)
        _, expected = scaled_dot_product_attention(apply_rope(queries), apply_rope(keys), values)
        reference = torch.nn.functional.scaled_dot_product_attention(apply_rope(queries), apply_rope(keys), values)
        context, _ = scaled_dot_product_attention(apply_rope(queries), apply_rope(keys), values)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(context, reference, atol=1e-5, rtol=1e-5)
