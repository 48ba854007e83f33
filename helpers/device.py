"""Device choice, seeding and the version report every notebook starts with."""

from __future__ import annotations

import platform
from importlib import metadata

import torch

__all__ = ["get_device", "seed_everything", "environment_report"]


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
