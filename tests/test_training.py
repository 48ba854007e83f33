"""The course's one training loop: seeded, one thread, a fresh batch every step, checkpoints in memory."""

import sys
import types

import pytest
import torch
from torch import nn

from helpers.training import one_thread, remembered, seeded, train_loop


def _regression_loss(model, generator):
    inputs = torch.randn(16, 3, generator=generator)  # a fresh batch from the seeded generator
    return ((model(inputs) - inputs.sum(dim=-1, keepdim=True)) ** 2).mean()


def test_seeded_builds_the_same_weights_and_leaves_the_callers_stream_alone():
    torch.manual_seed(5)
    expected_next = torch.rand(3)
    torch.manual_seed(5)
    first = seeded(lambda: nn.Linear(3, 1), seed=1)
    assert torch.equal(torch.rand(3), expected_next), "seeded() must not move the caller's random stream"
    second = seeded(lambda: nn.Linear(3, 1), seed=1)
    assert torch.equal(first.weight, second.weight)
    assert not torch.equal(first.weight, seeded(lambda: nn.Linear(3, 1), seed=2).weight)


def test_train_loop_is_reproducible_and_learns():
    runs = []
    for _ in range(2):
        model = seeded(lambda: nn.Linear(3, 1), seed=0)
        runs.append((train_loop(model, _regression_loss, num_steps=60, lr=0.05, seed=0), model.weight.detach()))
    (losses_a, weight_a), (losses_b, weight_b) = runs
    assert losses_a == losses_b and torch.equal(weight_a, weight_b)
    assert len(losses_a) == 60 and losses_a[-1] < losses_a[0] / 10


def test_record_is_called_at_0_every_k_and_at_the_end_in_eval_mode_without_gradients():
    model = seeded(lambda: nn.Sequential(nn.Linear(3, 1), nn.Dropout(0.5)), seed=0)
    seen = []

    def record(step):
        seen.append((step, model.training, torch.is_grad_enabled()))

    def loss(model, generator):
        assert model.training, "training steps run in train() mode"
        return _regression_loss(model, generator)

    train_loop(model, loss, num_steps=25, lr=0.01, seed=0, record=record, record_every=10)
    assert [step for step, _, _ in seen] == [0, 10, 20, 25]
    assert not any(training or grad for _, training, grad in seen)
    assert not model.training


def test_one_thread_restores_the_thread_count():
    before = torch.get_num_threads()
    with one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(num_steps=0), ValueError, "num_steps"),
    (dict(lr=0), ValueError, "lr"),
    (dict(seed=1.5), TypeError, "seed"),
    (dict(optimizer=torch.optim.Adam([torch.zeros(1, requires_grad=True)])), TypeError, "optimizer"),
    (dict(record=3), TypeError, "record"),
])
def test_bad_arguments_are_named(kwargs, error, match):
    arguments = dict(num_steps=2, lr=0.1, seed=0) | kwargs
    with pytest.raises(error, match=match):
        train_loop(nn.Linear(3, 1), _regression_loss, **arguments)


def _counting_trainer():
    calls = []

    @remembered
    def train(num_steps: int = 30, *, lr: float = 0.05, seed: int = 0, weights=None):
        calls.append((num_steps, lr, seed))
        model = seeded(lambda: nn.Linear(3, 1), seed=seed)
        return model, train_loop(model, _regression_loss, num_steps=num_steps, lr=lr, seed=seed)

    return train, calls


def test_remembered_trains_once_per_plain_call_and_hands_out_independent_copies():
    train, calls = _counting_trainer()
    first_model, first_losses = train(30)
    again_model, again_losses = train(num_steps=30, lr=0.05)  # the same call, spelled differently
    assert len(calls) == 1, "a repeated call with the same arguments must not train again"
    assert again_losses == first_losses and torch.equal(again_model.weight, first_model.weight)
    assert again_model is not first_model
    with torch.no_grad():
        again_model.weight.add_(1.0)  # a learner changing the copy leaves the remembered run alone
    assert torch.equal(train(30)[0].weight, first_model.weight)
    fresh_model, fresh_losses = seeded(lambda: nn.Linear(3, 1), seed=0), None
    fresh_losses = train_loop(fresh_model, _regression_loss, num_steps=30, lr=0.05, seed=0)
    assert fresh_losses == first_losses, "the remembered result is what training again gives"
    train(31)
    train(30, seed=1)
    assert len(calls) == 3
    train.forget()
    train(30)
    assert len(calls) == 4


def test_remembered_compares_tensors_by_value_and_trains_again_for_other_objects_and_dtypes():
    train, calls = _counting_trainer()
    weights = torch.zeros(3)
    train(10, weights=weights)
    train(10, weights=torch.zeros(3))  # another tensor with the same values: the same call
    assert len(calls) == 1
    weights[0] = 1.0  # changed in place since the first call: a different call
    train(10, weights=weights)
    assert len(calls) == 2
    train(10, weights=[torch.zeros(3), "a"])
    train(10, weights=[torch.zeros(3), "a"])
    assert len(calls) == 3

    class Defined(nn.Linear):  # a class of the caller's (a notebook's) could change behind the same name
        pass

    train(10, weights=Defined)
    train(10, weights=Defined)
    train(10, weights=object())
    train(10, weights=torch.empty(2, device="meta"))  # no values to compare
    train(10, weights=torch.empty(2, device="meta"))
    assert len(calls) == 8
    train(10, weights=nn.Linear)  # torch's own classes are compared by name
    train(10, weights=nn.Linear)
    assert len(calls) == 9
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        train(10)
    finally:
        torch.set_default_dtype(previous)
    train(10)
    train(10)
    assert len(calls) == 11, "float64 and float32 each trained once"


def test_remembered_compares_the_courses_task_objects_by_their_state():
    from helpers.toy_model import FetchTask

    train, calls = _counting_trainer()
    train(5, weights=FetchTask.rotation(num_tokens=6, offset=3, vocab_size=10))
    train(5, weights=FetchTask.rotation(num_tokens=6, offset=3, vocab_size=10))
    assert len(calls) == 1
    train(5, weights=FetchTask.rotation(num_tokens=6, offset=2, vocab_size=10))
    assert len(calls) == 2


class _KernelApp:
    @staticmethod
    def initialized():
        return True


def _as_a_kernel(monkeypatch):
    """Make remembered() see a running Jupyter kernel (the only kind of process that uses the shared cache)."""
    monkeypatch.setitem(sys.modules, "ipykernel.kernelapp", types.SimpleNamespace(IPKernelApp=_KernelApp))


def test_the_training_cache_is_only_for_notebook_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_COURSE_TRAINING_CACHE", str(tmp_path))
    monkeypatch.delitem(sys.modules, "ipykernel.kernelapp", raising=False)
    train, calls = _counting_trainer()
    train(5)
    train.forget()
    train(5)
    assert len(calls) == 2 and not list(tmp_path.iterdir()), "a unit test's training is neither saved nor loaded"


def test_the_training_cache_is_shared_through_its_directory(tmp_path, monkeypatch):
    """With ATTENTION_COURSE_TRAINING_CACHE set, another kernel (here: the memory forgotten) loads the saved run."""
    _as_a_kernel(monkeypatch)
    monkeypatch.setenv("ATTENTION_COURSE_TRAINING_CACHE", str(tmp_path / "cache"))
    train, calls = _counting_trainer()
    first_model, first_losses = train(20, weights=torch.ones(2))
    (saved,) = (tmp_path / "cache").glob("*.pt")
    assert "train" in saved.name and not list((tmp_path / "cache").glob("*.part"))
    train.forget()
    model, losses = train(20, weights=torch.ones(2))
    assert len(calls) == 1, "a saved run is loaded, not trained again"
    assert losses == first_losses and torch.equal(model.weight, first_model.weight)
    train(21, weights=torch.ones(2))
    assert len(calls) == 2 and len(list((tmp_path / "cache").glob("*.pt"))) == 2

    saved.write_bytes(b"not a saved run")  # a damaged file: trained again and saved anew
    train.forget()
    assert train(20, weights=torch.ones(2))[1] == first_losses and len(calls) == 3
    train.forget()
    train(20, weights=torch.ones(2))
    assert len(calls) == 3

    monkeypatch.delenv("ATTENTION_COURSE_TRAINING_CACHE")
    train.forget()
    train(20, weights=torch.ones(2))
    assert len(calls) == 4, "without the variable nothing is loaded"


def test_a_run_that_cannot_be_saved_is_still_returned(tmp_path, monkeypatch):
    _as_a_kernel(monkeypatch)
    monkeypatch.setenv("ATTENTION_COURSE_TRAINING_CACHE", str(tmp_path))

    @remembered
    def unpicklable(n: int):
        return lambda: n

    assert unpicklable(3)() == 3
    assert not list(tmp_path.iterdir()), "nothing, not even a partial file, is left behind"


def test_remembered_keeps_only_the_last_runs():
    train, calls = _counting_trainer()
    for steps in range(1, 19):  # eighteen different calls; sixteen are kept
        train(steps)
    train(18)
    train(3)
    assert len(calls) == 18
    train(1)
    assert len(calls) == 19
