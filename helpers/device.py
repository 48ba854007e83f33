"""Device choice, seeding and the version report every notebook starts with.

Also the plumbing a lesson cell should not have to show: :func:`to_device` places tensors or modules on the
course's device, :func:`to_cpu` reads tensors back for printing, and :func:`run_on_device` does both around one
call of a module (inputs to the module's device, outputs back to the CPU).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from importlib import metadata
from typing import Any

import torch
from torch import nn

__all__ = ["get_device", "seed_everything", "environment_report", "to_device", "to_cpu", "run_on_device"]


def get_device() -> torch.device:
    """``cuda`` when a GPU is visible, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_everything(seed: int = 123) -> torch.Generator:
    """Seed PyTorch's CPU (and, if present, CUDA) random streams; return the CPU generator.

    Seeding is explicit: importing ``helpers`` never seeds anything.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    return torch.manual_seed(seed)


def environment_report(packages: tuple[str, ...] = ("torch", "matplotlib", "ipywidgets")) -> str:
    """One line per item: Python, each package's version, and the device in use."""
    lines = [f"python      {platform.python_version()}"]
    for name in packages:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "not installed"
        lines.append(f"{name:<11} {version}")
    lines.append(f"device      {get_device()}")
    return "\n".join(lines)


def _map_tensors(value: Any, convert, what: str) -> Any:
    """``convert`` applied to every tensor (or module) in ``value``: one, or a tuple, list or dict of them."""
    if isinstance(value, (torch.Tensor, nn.Module)):
        return convert(value)
    if isinstance(value, tuple):
        return tuple(_map_tensors(v, convert, what) for v in value)
    if isinstance(value, list):
        return [_map_tensors(v, convert, what) for v in value]
    if isinstance(value, Mapping):
        return {k: _map_tensors(v, convert, what) for k, v in value.items()}
    raise TypeError(f"{what} takes a tensor, a module, or a tuple, list or dict of them, got {type(value).__name__}")


def to_device(value: Any, device: torch.device | str | None = None) -> Any:
    """``value`` (a tensor, a module, or a tuple, list or dict of them) on ``device``: :func:`get_device` when None.

    Draw random numbers on the CPU first and move them here: every machine then starts from the same numbers.
    A module is moved in place (and returned), as ``module.to(device)`` does.
    """
    target = get_device() if device is None else torch.device(device)
    return _map_tensors(value, lambda v: v.to(target), "to_device")


def to_cpu(value: Any, decimals: int | None = None) -> Any:
    """Tensors read back for printing: detached, on the CPU, and rounded to ``decimals`` if given.

    ``value`` is a tensor or a tuple, list or dict of them. Rounding a GPU result to a few decimals hides the last
    digits in which GPU and CPU arithmetic may differ.
    """
    if decimals is not None and (isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0):
        raise ValueError(f"decimals must be a whole number >= 0 or None, got {decimals!r}")

    def read_back(tensor):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"to_cpu takes tensors, got {type(tensor).__name__}")
        tensor = tensor.detach().cpu()
        return tensor.round(decimals=decimals) if decimals is not None and tensor.is_floating_point() else tensor
    return _map_tensors(value, read_back, "to_cpu")


def run_on_device(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """``module(*args, **kwargs)`` without gradients, with every tensor argument moved to the module's device and
    every tensor of the result read back to the CPU (:func:`to_cpu`). For looking at what a model computes.

    The module's device is that of its first parameter or buffer (the CPU for a module with neither).
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    first = next(iter(module.parameters()), None)
    if first is None:
        first = next(iter(module.buffers()), None)
    device = first.device if first is not None else torch.device("cpu")
    move = (lambda v: to_device(v, device) if isinstance(v, torch.Tensor) else v)
    with torch.no_grad():
        result = module(*(move(a) for a in args), **{k: move(v) for k, v in kwargs.items()})
    return to_cpu(result)
