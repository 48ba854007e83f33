"""helpers.device: placing tensors and modules on the course's device and reading results back for printing."""

import pytest
import torch
from torch import nn

import helpers
from helpers.device import get_device, run_on_device, to_cpu, to_device

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def test_the_new_names_are_exported_and_the_old_ones_unchanged():
    for name in ("to_device", "to_cpu", "run_on_device", "get_device", "seed_everything", "environment_report"):
        assert name in helpers.__all__ and callable(getattr(helpers, name))
    assert get_device() == torch.device("cuda" if torch.cuda.is_available() else "cpu")


def test_to_device_defaults_to_the_course_device_and_keeps_values():
    x = torch.rand(3, 4, generator=torch.Generator().manual_seed(0))
    moved = to_device(x)
    assert moved.device.type == get_device().type
    assert torch.equal(moved.cpu(), x)
    assert to_device(x, "cpu") is x  # already there: no copy, as Tensor.to


def test_to_device_moves_modules_and_containers():
    layer = nn.Linear(3, 2)
    assert to_device(layer, "cpu") is layer
    a, b = torch.ones(2), torch.zeros(3)
    pair = to_device((a, b), "cpu")
    assert isinstance(pair, tuple) and torch.equal(pair[0], a) and torch.equal(pair[1], b)
    assert isinstance(to_device([a, b], "cpu"), list)
    assert set(to_device({"a": a, "b": b}, torch.device("cpu"))) == {"a", "b"}


@pytest.mark.parametrize("bad", [3, "text", None, [torch.ones(1), 2]])
def test_to_device_names_what_it_takes(bad):
    with pytest.raises(TypeError, match="to_device takes a tensor, a module"):
        to_device(bad, "cpu")


def test_to_cpu_detaches_and_rounds():
    x = torch.tensor([0.123456, -1.987654], requires_grad=True) * 1.0
    back = to_cpu(x)
    assert back.device.type == "cpu" and not back.requires_grad
    assert torch.equal(back, x.detach())
    assert torch.equal(to_cpu(x, decimals=2), torch.tensor([0.12, -1.99]))
    ids = torch.tensor([1, 2, 3])
    assert torch.equal(to_cpu(ids, decimals=2), ids)  # integers are left as they are
    context, weights = to_cpu((x, x * 2), decimals=1)
    assert torch.equal(weights, torch.tensor([0.2, -4.0]))


@pytest.mark.parametrize("decimals", [-1, 1.5, True, "2"])
def test_to_cpu_rejects_odd_decimals(decimals):
    with pytest.raises(ValueError, match="decimals"):
        to_cpu(torch.ones(2), decimals=decimals)


def test_to_cpu_takes_only_tensors():
    with pytest.raises(TypeError, match="to_cpu takes tensors"):
        to_cpu(nn.Linear(2, 2))
    with pytest.raises(TypeError):
        to_cpu(3.0)


class _Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 2)

    def forward(self, x, scale=1.0, return_both=False):
        out = self.layer(x) * scale
        return (out, out.sum(dim=-1)) if return_both else out


def test_run_on_device_gives_what_the_module_gives_without_gradients():
    torch.manual_seed(0)
    module = _Pair()
    x = torch.rand(4, 3)
    with torch.no_grad():
        expected = module(x, return_both=True)
    out, sums = run_on_device(module, x, scale=1.0, return_both=True)
    assert out.device.type == "cpu" and not out.requires_grad
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(sums, expected[1])
    assert module.layer.weight.grad is None


def test_run_on_device_checks_its_module_and_takes_parameter_free_modules():
    with pytest.raises(TypeError, match="module must be an nn.Module"):
        run_on_device(lambda x: x, torch.ones(2))
    torch.testing.assert_close(run_on_device(nn.ReLU(), torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 2.0]))


@CUDA
def test_on_a_gpu_inputs_follow_the_module_and_results_come_back():
    torch.manual_seed(0)
    module = to_device(_Pair(), "cuda")
    x = torch.rand(4, 3)
    out = run_on_device(module, x)
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, module.cpu()(x).detach(), atol=1e-5, rtol=1e-4)
