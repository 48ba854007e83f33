"""Which package index `make` takes torch from when TORCH_INDEX is not given: prints the index, or nothing.

    python3 scripts/torch_index.py 2.13.0     # prints https://download.pytorch.org/whl/cpu, or nothing

PyPI's torch for Linux on x86-64 is the CUDA build, several gigabytes with its NVIDIA libraries; on a machine
without an NVIDIA GPU none of that is ever used. There the CPU index is printed (and a note on stderr), unless

* the machine is not Linux on x86-64 (PyPI's wheels for macOS and Windows are CPU builds already),
* an NVIDIA driver is present (``nvidia-smi`` on the PATH, or ``/proc/driver/nvidia``): PyPI's CUDA build is
  the one to use there,
* or pip can install that torch without any index, from a wheel on local disk (pip's find-links): then that wheel
  is used, as before.

Nothing is printed in those cases, and `make` installs torch from wherever pip's own configuration says.
``make lab TORCH_INDEX=`` (empty) always takes PyPI's; ``make lab TORCH_INDEX=URL`` any other index.
Standard library only; it runs before the course's environment exists.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def has_nvidia_driver() -> bool:
    return shutil.which("nvidia-smi") is not None or os.path.exists("/proc/driver/nvidia")


def installable_without_index(version: str, python: str = sys.executable) -> bool:
    """True if pip finds ``torch==version`` on local disk alone (``--no-index``: find-links only)."""
    command = [python, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps", "--quiet",
               f"torch=={version}"]
    try:
        return subprocess.run(command, capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def torch_index(version: str, system: str | None = None, machine: str | None = None) -> str:
    system = platform.system() if system is None else system
    machine = platform.machine() if machine is None else machine
    if system != "Linux" or machine.lower() not in ("x86_64", "amd64"):
        return ""
    if has_nvidia_driver() or installable_without_index(version):
        return ""
    return CPU_INDEX


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0]:
        print("usage: python3 scripts/torch_index.py TORCH_VERSION", file=sys.stderr)
        return 2
    index = torch_index(argv[0])
    if index:
        print(f"[torch] no NVIDIA GPU here: torch {argv[0]} comes from {index}, the CPU build (about 200 MB "
              f"instead of PyPI's CUDA build); `TORCH_INDEX=` takes PyPI's", file=sys.stderr)
        print(index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
