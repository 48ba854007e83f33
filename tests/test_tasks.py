"""The toy task of notebook 03 and its training loop (helpers.tasks)."""

import pytest
import torch

import helpers
from helpers import PreviousTokenTask, TrainingRun, train_attention, weight_on_target


@pytest.fixture(scope="module")
def task():
    return PreviousTokenTask()


@pytest.fixture(scope="module")
def notebook_run(task):
    """The run notebook 03 trains and prints (same arguments)."""
    return train_attention(task, helpers.SelfAttention_v2, num_steps=200, lr=0.02, seed=123, snapshot_every=5)


def test_public_names_are_reexported():
    for name in ("PreviousTokenTask", "TrainingRun", "train_attention", "weight_on_target"):
        assert name in helpers.__all__ and hasattr(helpers, name)


def test_target_positions_point_at_the_previous_token(task):
    assert task.target_positions().tolist() == [0, 0, 1, 2, 3, 4]
    pattern = task.target_pattern()
    assert pattern.shape == (6, 6)
    torch.testing.assert_close(pattern.sum(dim=-1), torch.ones(6))
    assert pattern[0, 0] == 1 and all(pattern[i, i - 1] == 1 for i in range(1, 6))


def test_targets_are_the_previous_words(task):
    token_ids = task.sample(50, torch.Generator().manual_seed(7))
    targets = task.targets(token_ids)
    assert torch.equal(targets[:, 0], token_ids[:, 0])
    assert torch.equal(targets[:, 1:], token_ids[:, :-1])


def test_the_target_pattern_solves_the_task(task):
    # Attention with exactly the target pattern, over values that carry the word, retrieves every answer.
    token_ids = task.sample(50, torch.Generator().manual_seed(8))
    word_values = torch.nn.functional.one_hot(token_ids, len(task.vocab)).float()  # (B, T, V)
    retrieved = task.target_pattern() @ word_values  # (T, T) @ (B, T, V) -> (B, T, V)
    assert torch.equal(retrieved.argmax(dim=-1), task.targets(token_ids))


def test_no_position_blind_attention_solves_the_task(task):
    # Uniform attention (what a module ignoring positions would give on average) gets most answers wrong.
    token_ids = task.sample(200, torch.Generator().manual_seed(9))
    word_values = torch.nn.functional.one_hot(token_ids, len(task.vocab)).float()
    uniform = torch.full((6, 6), 1 / 6) @ word_values
    accuracy = (uniform.argmax(dim=-1) == task.targets(token_ids)).float().mean()
    assert accuracy < 0.5


def test_embeddings_are_fixed_positive_and_summed(task):
    assert task.word_embeddings.shape == (6, 32) and task.position_embeddings.shape == (6, 32)
    assert (task.word_embeddings >= 0).all() and (task.word_embeddings < 1).all()
    torch.testing.assert_close(PreviousTokenTask().word_embeddings, task.word_embeddings)
    assert not torch.equal(PreviousTokenTask(seed=1).word_embeddings, task.word_embeddings)
    token_ids = torch.tensor([[2, 2, 0, 1, 5, 3]])
    x = task.embed(token_ids)
    assert x.shape == (1, 6, 32)
    torch.testing.assert_close(x[0, 1], task.word_embeddings[2] + task.position_embeddings[1])


def test_sampling_is_reproducible(task):
    first = task.sample(4, torch.Generator().manual_seed(0))
    again = task.sample(4, torch.Generator().manual_seed(0))
    assert first.shape == (4, 6) and first.dtype == torch.long and torch.equal(first, again)
    assert 0 <= int(first.min()) and int(first.max()) < 6


def test_probe_is_the_journey_sentence(task):
    labels, ids = task.probe()
    assert labels == ["Your", "journey", "starts", "with", "one", "step"]
    assert ids.tolist() == list(range(6))


def test_weight_on_target_matches_a_loop():
    weights = torch.softmax(torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(1)), dim=-1)
    targets = torch.tensor([0, 0, 1, 2])
    picked = weight_on_target(weights, targets)
    assert picked.shape == (3, 4)
    for b in range(3):
        for i in range(4):
            assert picked[b, i] == weights[b, i, targets[i]]


def test_training_reaches_what_the_notebook_prints(notebook_run):
    run = notebook_run
    assert isinstance(run, TrainingRun)
    assert f"{run.losses[0]:.2f}" == "1.86" and f"{run.losses[-1]:.2f}" == "0.02"
    assert f"{run.target_weights[0]:.2f}" == "0.17" and f"{run.target_weights[-1]:.2f}" == "1.00"
    final = weight_on_target(run.snapshots[-1], torch.tensor([0, 0, 1, 2, 3, 4]))
    assert (final > 0.9).all()
    assert round(run.steps_to_reach(0.9), -1) == 60


def test_trained_module_generalises_to_fresh_sentences(task, notebook_run):
    test_ids = task.sample(1000, torch.Generator().manual_seed(2024))
    with torch.no_grad():
        logits, weights = notebook_run.model(task.embed(test_ids), return_weights=True)
    accuracy = (logits.argmax(dim=-1) == task.targets(test_ids)).float().mean()
    assert accuracy > 0.99
    assert weight_on_target(weights, task.target_positions()).mean() > 0.99


def test_snapshots_losses_and_steps_line_up(notebook_run):
    run = notebook_run
    assert run.steps == list(range(0, 201, 5))
    assert run.snapshots.shape == (41, 6, 6)
    torch.testing.assert_close(run.snapshots.sum(dim=-1), torch.ones(41, 6))
    assert len(run.losses) == 200 and len(run.target_weights) == 201
    assert run.probe_labels[1] == "journey"
    assert not run.model.training


def test_training_is_reproducible_and_leaves_the_global_rng_alone(task):
    state = torch.get_rng_state()
    first = train_attention(task, num_steps=20, seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    second = train_attention(task, num_steps=20, seed=5)
    assert first.losses == second.losses and torch.equal(first.snapshots, second.snapshots)
    assert first.steps == [0, 5, 10, 15, 20]


def test_torch_rand_init_stays_stuck(task):
    # The notebook's claim: SelfAttention_v1 (all-positive init) never reaches 0.9; SelfAttention_v2 does.
    for seed in (0, 1, 2):
        stuck = train_attention(task, helpers.SelfAttention_v1, seed=seed)
        assert stuck.steps_to_reach(0.9) is None and stuck.target_weights[-1] < 0.5
        assert train_attention(task, helpers.SelfAttention_v2, seed=seed).steps_to_reach(0.9) is not None


def test_steps_to_reach():
    run = TrainingRun(None, [0], torch.zeros(1, 2, 2), [1.0], [0.1, 0.5, 0.95, 0.97], ["a", "b"])
    assert run.steps_to_reach(0.9) == 2 and run.steps_to_reach(0.99) is None


@pytest.mark.parametrize("kwargs, error, word", [
    ({"vocab": "abc"}, TypeError, "vocab"),
    ({"vocab": ("a", 1)}, TypeError, "vocab"),
    ({"vocab": ("a", "a")}, ValueError, "vocab"),
    ({"num_tokens": 1}, ValueError, "num_tokens"),
    ({"num_tokens": 2.5}, TypeError, "num_tokens"),
    ({"d_in": 0}, ValueError, "d_in"),
    ({"seed": "0"}, TypeError, "seed"),
])
def test_task_rejects_bad_arguments(kwargs, error, word):
    with pytest.raises(error, match=word):
        PreviousTokenTask(**kwargs)


def test_task_rejects_bad_token_ids(task):
    with pytest.raises(TypeError, match="token_ids"):
        task.embed(torch.zeros(1, 6))
    with pytest.raises(ValueError, match="token_ids"):
        task.embed(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="token_ids"):
        task.targets(torch.full((1, 6), 6))
    with pytest.raises(TypeError, match="generator"):
        task.sample(2, generator=0)
    with pytest.raises(ValueError, match="batch_size"):
        task.sample(0)


@pytest.mark.parametrize("kwargs, error, word", [
    ({"task": "task"}, TypeError, "task"),
    ({"attention_cls": helpers.SelfAttention_v2(32, 6)}, TypeError, "attention_cls"),
    ({"num_steps": 0}, ValueError, "num_steps"),
    ({"batch_size": 1.5}, TypeError, "batch_size"),
    ({"lr": 0.0}, ValueError, "lr"),
    ({"lr": "0.02"}, TypeError, "lr"),
    ({"snapshot_every": -1}, ValueError, "snapshot_every"),
    ({"seed": None}, TypeError, "seed"),
])
def test_training_rejects_bad_arguments(task, kwargs, error, word):
    arguments = {"task": task, **kwargs}
    with pytest.raises(error, match=word):
        train_attention(**arguments)


def test_weight_on_target_rejects_bad_input():
    with pytest.raises(ValueError, match="attn_weights"):
        weight_on_target(torch.ones(3, 4), torch.tensor([0, 1, 2, 3]))
    with pytest.raises(TypeError, match="target_positions"):
        weight_on_target(torch.ones(4, 4), torch.tensor([0.0, 1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="target_positions"):
        weight_on_target(torch.ones(4, 4), torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="attn_weights"):
        weight_on_target(torch.ones(4, 4, dtype=torch.long), torch.tensor([0, 1, 2, 3]))
