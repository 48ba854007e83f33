"""train_toy_model(device=...): every device starts from the same numbers, and what it keeps comes back on the CPU."""

import pytest
import torch

from helpers.toy_model import FetchTask, train_step, train_toy_model


@pytest.fixture(scope="module")
def small():
    task = FetchTask.reversal(num_tokens=4, vocab_size=5)
    watch_ids = task.sample(3, torch.Generator().manual_seed(1))
    test_ids = task.sample(50, torch.Generator().manual_seed(2))
    return task, watch_ids, test_ids


def _train(small, **kwargs):
    task, watch_ids, test_ids = small
    return train_toy_model(task, watch_ids=watch_ids, test_ids=test_ids, num_steps=6, batch_size=8, d_model=8,
                           checkpoint_every=3, **kwargs)


@pytest.mark.parametrize("device", [None, "cpu", torch.device("cpu")])
def test_every_way_of_naming_the_cpu_gives_the_same_run(small, device):
    reference = _train(small)
    run = _train(small, device=device)
    assert run.losses == reference.losses
    assert torch.equal(run.weights, reference.weights)
    assert next(run.model.parameters()).device == torch.device("cpu")


def test_checkpoints_are_kept_on_the_cpu_and_the_inputs_are_left_alone(small):
    task, watch_ids, test_ids = small
    before = watch_ids.clone()
    run = _train(small, device="cpu")
    assert run.weights.device.type == "cpu" and run.predictions.device.type == "cpu"
    assert torch.equal(watch_ids, before) and watch_ids.device.type == "cpu"


def test_the_global_random_stream_and_the_thread_count_are_untouched(small):
    threads = torch.get_num_threads()
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    _train(small, device="cpu")
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize("bad", ["not-a-device", 3.5, ["cpu"]])
def test_a_bad_device_is_a_clear_error(small, bad):
    with pytest.raises(ValueError, match="device must be"):
        _train(small, device=bad)


def test_train_step_uses_the_model_s_device_and_returns_the_loss(small):
    task, _, _ = small
    torch.manual_seed(0)
    run = _train(small)
    optimizer = torch.optim.Adam(run.model.parameters(), lr=0.01)
    loss = train_step(run.model.train(), optimizer, task, torch.Generator().manual_seed(0), batch_size=4)
    assert isinstance(loss, float) and loss > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_run_starts_from_the_cpu_run_s_numbers(small):
    cpu = _train(small, device="cpu")
    cuda = _train(small, device="cuda")
    assert next(cuda.model.parameters()).device.type == "cuda"
    assert cuda.weights.device.type == "cpu"
    torch.testing.assert_close(cuda.weights[0], cpu.weights[0], atol=1e-5, rtol=1e-4)   # the same start
    torch.testing.assert_close(torch.tensor(cuda.losses), torch.tensor(cpu.losses), atol=1e-3, rtol=1e-3)
