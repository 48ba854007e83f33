"""The toy fetch tasks, the attention-only model and its short, reproducible training run (notebook 08)."""

import pytest
import torch

from helpers.attention import scaled_dot_product_attention
from helpers.modules import MultiHeadAttention
from helpers.toy_model import (
    AttentionOnlyModel,
    BidirectionalAttention,
    FetchTask,
    accuracy,
    train_toy_model,
)


# --- the task -------------------------------------------------------------------------------------------------

def test_reversal_targets_are_the_input_backwards():
    task = FetchTask.reversal(num_tokens=5, vocab_size=7)
    token_ids = task.sample(20, torch.Generator().manual_seed(0))
    assert token_ids.shape == (20, 5) and token_ids.dtype == torch.long
    assert 0 <= int(token_ids.min()) and int(token_ids.max()) < 7
    assert torch.equal(task.targets(token_ids), token_ids.flip(-1))
    assert task.labels(torch.tensor([0, 1, 2, 3, 6])) == ["A", "B", "C", "D", "G"]


def test_rotation_targets_shift_and_wrap():
    task = FetchTask.rotation(num_tokens=6, offset=2)
    token_ids = torch.arange(6).unsqueeze(0)  # (1, 6)
    assert task.targets(token_ids).tolist() == [[4, 5, 0, 1, 2, 3]]
    assert torch.equal(task.targets(token_ids), token_ids.roll(2, dims=-1))


def test_sample_is_reproducible_with_a_generator():
    task = FetchTask.reversal()
    first = task.sample(4, torch.Generator().manual_seed(3))
    again = task.sample(4, torch.Generator().manual_seed(3))
    other = task.sample(4, torch.Generator().manual_seed(4))
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_ideal_pattern_of_reversal_is_the_anti_diagonal():
    task = FetchTask.reversal(num_tokens=6)
    assert torch.equal(task.ideal_pattern(), torch.eye(6).flip(-1))


def test_ideal_pattern_picks_each_outputs_source():
    task = FetchTask.rotation(num_tokens=7, offset=3)
    token_ids = task.sample(5, torch.Generator().manual_seed(0))
    one_hot = torch.nn.functional.one_hot(token_ids, task.vocab_size).float()  # (B, T, V)
    fetched = task.ideal_pattern() @ one_hot  # (T, T) @ (B, T, V) -> (B, T, V): ideal attention copies the source
    assert torch.equal(fetched.argmax(dim=-1), task.targets(token_ids))
    assert torch.equal(task.ideal_pattern().sum(dim=-1), torch.ones(7))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"source_positions": [0, 3]}, ValueError, "source_positions"),
        ({"source_positions": [0]}, ValueError, "source_positions"),
        ({"source_positions": "01"}, TypeError, "source_positions"),
        ({"source_positions": [0, 1.0]}, TypeError, "source_positions"),
        ({"source_positions": [1, 0], "vocab_size": 27}, ValueError, "vocab_size"),
        ({"source_positions": [1, 0], "vocab_size": 2.0}, TypeError, "vocab_size"),
    ],
)
def test_bad_task_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        FetchTask(**kwargs)


def test_bad_token_ids_and_sample_arguments():
    task = FetchTask.reversal(num_tokens=4, vocab_size=5)
    with pytest.raises(TypeError, match="token_ids"):
        task.targets(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="token_ids"):
        task.targets(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="token_ids"):
        task.targets(torch.full((2, 4), 5))
    with pytest.raises(ValueError, match="token_ids"):
        task.labels(torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="batch_size"):
        task.sample(0)
    with pytest.raises(TypeError, match="generator"):
        task.sample(2, generator=0)
    with pytest.raises(TypeError, match="offset"):
        FetchTask.rotation(offset=1.5)


# --- the model ------------------------------------------------------------------------------------------------

def test_bidirectional_attention_is_multi_head_attention_without_the_mask():
    torch.manual_seed(0)
    causal = MultiHeadAttention(8, 8, 5, 0.0, 2)
    torch.manual_seed(0)
    encoder = BidirectionalAttention(8, 8, 5, 0.0, 2)
    x = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(1))  # (B, T, d_in)
    with torch.no_grad():
        context_vecs, attn_weights = encoder(x, return_weights=True)
        _, causal_weights = causal(x, return_weights=True)
        # The same computation by hand, with no mask: split heads, attend, merge, project.
        split = lambda t: t.view(3, 5, 2, 4).transpose(1, 2)  # (B, T, d_out) -> (B, H, T, D)  # noqa: E731
        expected, expected_weights = scaled_dot_product_attention(
            split(encoder.W_query(x)), split(encoder.W_key(x)), split(encoder.W_value(x)))
        expected = encoder.out_proj(expected.transpose(1, 2).reshape(3, 5, 8))
    torch.testing.assert_close(attn_weights, expected_weights)
    torch.testing.assert_close(context_vecs, expected)
    above = torch.ones(5, 5).triu(diagonal=1).bool()
    assert attn_weights[..., above].min() > 0 and causal_weights[..., above].max() == 0
    assert "mask" not in encoder.state_dict()
    with pytest.raises(RuntimeError, match="mask"):
        encoder.load_state_dict(causal.state_dict())


def test_model_shapes_and_weights():
    torch.manual_seed(0)
    model = AttentionOnlyModel(vocab_size=6, num_tokens=5, d_model=12, num_heads=3)
    token_ids = torch.randint(0, 6, (4, 5), generator=torch.Generator().manual_seed(0))
    logits, attn_weights = model(token_ids, return_weights=True)
    assert logits.shape == (4, 5, 6) and attn_weights.shape == (4, 3, 5, 5)
    torch.testing.assert_close(attn_weights.sum(dim=-1), torch.ones(4, 3, 5))
    assert torch.equal(model(token_ids), logits)
    # Small initial embeddings: the untrained attention is close to uniform.
    assert (attn_weights - 1 / 5).abs().max() < 0.05


def test_without_positions_the_model_cannot_tell_positions_apart():
    torch.manual_seed(0)
    model = AttentionOnlyModel(vocab_size=6, num_tokens=5, use_positions=False)
    token_ids = torch.randint(0, 6, (4, 5), generator=torch.Generator().manual_seed(0))
    shuffle = torch.tensor([3, 0, 4, 1, 2])
    with torch.no_grad():
        torch.testing.assert_close(model(token_ids[:, shuffle]), model(token_ids)[:, shuffle])
        model.use_positions = True  # the same weights, now with positions added: shuffling matters
        assert not torch.allclose(model(token_ids[:, shuffle]), model(token_ids)[:, shuffle])


def test_bad_model_input():
    model = AttentionOnlyModel(vocab_size=6, num_tokens=5, d_model=8, num_heads=2)
    with pytest.raises(TypeError, match="token_ids"):
        model(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="token_ids"):
        model(torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="token_ids"):
        model(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="token_ids"):
        model(torch.full((2, 5), 6))
    with pytest.raises(ValueError, match="d_out must be divisible by num_heads"):
        AttentionOnlyModel(vocab_size=6, num_tokens=5, d_model=8, num_heads=3)
    with pytest.raises(TypeError, match="use_positions"):
        AttentionOnlyModel(vocab_size=6, num_tokens=5, use_positions=1)
    with pytest.raises(ValueError, match="vocab_size"):
        AttentionOnlyModel(vocab_size=0, num_tokens=5)


def test_accuracy():
    logits = torch.tensor([[[0.0, 2.0], [3.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])  # (2, 2, V=2)
    assert accuracy(logits, torch.tensor([[1, 0], [1, 1]])) == 0.75
    with pytest.raises(ValueError, match="targets"):
        accuracy(logits, torch.tensor([1, 0]))


# --- training ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reversal_data():
    task = FetchTask.reversal(num_tokens=8, vocab_size=10)
    watch_ids = task.sample(8, torch.Generator().manual_seed(1))
    test_ids = task.sample(1000, torch.Generator().manual_seed(2))
    return task, watch_ids, test_ids


@pytest.fixture(scope="module")
def notebook_run(reversal_data):
    """The run notebook 08 makes (same task, data, seed and settings)."""
    task, watch_ids, test_ids = reversal_data
    return train_toy_model(task, watch_ids=watch_ids, test_ids=test_ids, num_steps=100, lr=0.01, seed=0,
                           checkpoint_every=4)


def test_training_reaches_the_notebooks_threshold_and_learns_the_anti_diagonal(reversal_data, notebook_run):
    task, _, _ = reversal_data
    run = notebook_run
    assert run.steps == list(range(0, 101, 4))
    assert run.weights.shape == (26, 8, 2, 8, 8) and run.predictions.shape == (26, 8, 8)
    assert len(run.losses) == 100 and len(run.accuracies) == 26
    assert run.accuracies[0] < 0.2 and run.accuracies[-1] >= 0.99  # what the notebook claims
    on_mirror = (run.weights[-1] * task.ideal_pattern()).sum(dim=-1).mean(dim=(0, 2))  # (H,)
    assert (on_mirror > 0.9).all()
    assert not run.model.training


def test_training_is_reproducible_and_leaves_global_state_alone(reversal_data, notebook_run):
    task, watch_ids, test_ids = reversal_data
    threads = torch.get_num_threads()
    torch.manual_seed(42)
    expected_draw = torch.rand(3)
    torch.manual_seed(42)
    again = train_toy_model(task, watch_ids=watch_ids, test_ids=test_ids, num_steps=100, lr=0.01, seed=0,
                            checkpoint_every=4)
    assert torch.equal(torch.rand(3), expected_draw), "training must not consume the caller's random stream"
    assert torch.get_num_threads() == threads
    assert again.losses == notebook_run.losses
    assert torch.equal(again.weights, notebook_run.weights)
    other = train_toy_model(task, watch_ids=watch_ids, test_ids=test_ids, num_steps=5, seed=1)
    assert other.losses != notebook_run.losses[:5]


def test_training_without_positions_stays_far_below(reversal_data):
    task, watch_ids, test_ids = reversal_data
    run = train_toy_model(task, watch_ids=watch_ids, test_ids=test_ids, num_steps=100, lr=0.01, seed=0,
                          checkpoint_every=50, use_positions=False)
    assert 0.1 < run.accuracies[-1] < 0.5


def test_checkpoint_lookup_and_bad_training_arguments(reversal_data, notebook_run):
    task, watch_ids, test_ids = reversal_data
    assert notebook_run.checkpoint(36) == 9
    with pytest.raises(ValueError, match="no checkpoint at step 35"):
        notebook_run.checkpoint(35)
    with pytest.raises(TypeError, match="task"):
        train_toy_model("reversal", watch_ids=watch_ids, test_ids=test_ids)
    with pytest.raises(ValueError, match="watch_ids|token_ids"):
        train_toy_model(task, watch_ids=watch_ids[:, :3], test_ids=test_ids)
    with pytest.raises(ValueError, match="num_steps"):
        train_toy_model(task, watch_ids=watch_ids, test_ids=test_ids, num_steps=0)
    with pytest.raises(ValueError, match="lr"):
        train_toy_model(task, watch_ids=watch_ids, test_ids=test_ids, lr=-1.0)
    with pytest.raises(TypeError, match="seed"):
        train_toy_model(task, watch_ids=watch_ids, test_ids=test_ids, seed="0")
