"""scripts/torch_index.py: where `make` takes torch from when TORCH_INDEX is not given."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import torch_index  # noqa: E402


@pytest.fixture
def machine(monkeypatch):
    """A Linux x86-64 machine whose driver and local wheels the test decides."""
    state = {"driver": False, "local": False}
    monkeypatch.setattr(torch_index, "has_nvidia_driver", lambda: state["driver"])
    monkeypatch.setattr(torch_index, "installable_without_index", lambda version: state["local"])
    return state


def test_linux_without_a_gpu_or_a_local_wheel_takes_the_cpu_index(machine):
    assert torch_index.torch_index("2.13.0", "Linux", "x86_64") == torch_index.CPU_INDEX


def test_a_driver_or_a_local_wheel_keeps_pips_own_sources(machine):
    machine["driver"] = True
    assert torch_index.torch_index("2.13.0", "Linux", "x86_64") == ""
    machine.update(driver=False, local=True)
    assert torch_index.torch_index("2.13.0", "Linux", "x86_64") == ""


@pytest.mark.parametrize("system, arch", [("Darwin", "arm64"), ("Windows", "AMD64"), ("Linux", "aarch64")])
def test_other_machines_keep_pypi(machine, system, arch):
    assert torch_index.torch_index("2.13.0", system, arch) == ""


def test_a_version_no_source_has_is_not_installable_without_an_index():
    assert not torch_index.installable_without_index("0.0.0.dev0")


def test_the_script_prints_the_index_or_nothing_and_the_makefile_asks_it_only_when_not_given():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "torch_index.py"), "2.13.0"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() in ("", torch_index.CPU_INDEX), result
    assert subprocess.run([sys.executable, str(ROOT / "scripts" / "torch_index.py")],
                          capture_output=True).returncode == 2
    makefile = (ROOT / "Makefile").read_text()
    assert "ifeq ($(origin TORCH_INDEX),undefined)" in makefile
    assert "scripts/torch_index.py $(TORCH_VERSION)" in makefile
