"""`make lab` installs what learning needs only: no test tool is reachable from the course's "lab" extra."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEST_TOOLS = {"nbval", "pytest", "pytest-xdist", "playwright"}


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _reachable(requirements: list[str]) -> set[str]:
    """Every installed distribution these requirements pull in, following the installed packages' own requirements
    (with their extras, and skipping those whose environment marker is false here)."""
    from packaging.requirements import Requirement

    seen: set[tuple[str, frozenset]] = set()
    names: set[str] = set()
    todo = [Requirement(text) for text in requirements]
    while todo:
        requirement = todo.pop()
        key = (_name(requirement.name), frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        names.add(key[0])
        try:
            distribution = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            continue
        for text in distribution.requires or []:
            child = Requirement(text)
            if child.marker is None or any(child.marker.evaluate({"extra": extra}) for extra in
                                           (requirement.extras or {""})):
                todo.append(child)
    return names


def test_the_lab_extra_pulls_in_no_test_tool_and_the_test_extra_does():
    pytest.importorskip("packaging")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    lab = _reachable(project["dependencies"] + extras["lab"])
    assert "jupyterlab" in lab and "ipykernel" in lab and "nbclient" in lab, "lab: a front end, a kernel, the grader"
    assert not lab & TEST_TOOLS, f"make lab would install test tools: {sorted(lab & TEST_TOOLS)}"
    assert TEST_TOOLS <= _reachable(extras["test"])


def test_make_lab_installs_the_lab_extra_with_the_lock():
    makefile = (ROOT / "Makefile").read_text()
    lab_rule = makefile.split("$(LAB_STAMP): ", 1)[1].split("\n\n", 1)[0]
    assert 'pip install $(PIP_COMPILE) -c requirements-lock.txt -e ".[lab]"' in lab_rule and "test" not in lab_rule
    assert re.search(r"^lab: \$\(LAB_STAMP\)$", makefile, re.M)
