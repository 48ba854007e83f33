"""The package installs cleanly anywhere, and the notebooks' Colab set-up block does what it says.

The block is the text scripts/colab_setup.py generates; these tests run that very text, with its install
source pointed at a wheel built from the working tree (ATTENTION_COURSE_SOURCE), as Colab would run it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import colab_setup  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# Set to "later" by `make test`, which runs scripts/colab_stack.py after the unit tests.
COLAB_STACK_VARIABLE = "ATTENTION_COURSE_COLAB_STACK"
PACKAGES = sorted(str(p.parent.relative_to(ROOT)).replace(os.sep, ".") for p in (ROOT / "helpers").rglob("__init__.py"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_first_code_cell_is_the_current_setup_cell_collapsed(path):
    """Fix with: python3 scripts/colab_setup.py --write (then re-execute the notebooks)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    cell = colab_setup.first_code_cell(nb)
    assert colab_setup._cell_source(cell) == colab_setup.setup_block(), "run python3 scripts/colab_setup.py --write"
    assert cell["metadata"] == colab_setup.SETUP_METADATA  # collapsed in JupyterLab, a form in Colab
    assert not any("".join(o.get("text", "")) for o in cell["outputs"]), "prints nothing where helpers imports"
    assert sum(colab_setup.is_setup_cell(c) for c in nb["cells"]) == 1
    assert not colab_setup.with_setup_cell(nb, colab_setup.setup_block())  # stamping again changes nothing


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_only_the_setup_cell_installs_anything(path):
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    for cell in cells:
        if not colab_setup.is_setup_cell(cell):
            source = colab_setup._cell_source(cell)
            assert "pip" not in source and "subprocess" not in source, source[:120]


def test_readme_links_come_from_pyproject():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert colab_setup.readme_with_links(readme, colab_setup.colab_links()) == readme, \
        "run python3 scripts/colab_setup.py --write"


def test_an_address_gives_a_git_source_and_one_colab_link_per_notebook():
    url = "https://github.com/someone/attention-course"
    assert '"git+https://github.com/someone/attention-course")' in colab_setup.setup_block(url)
    links = colab_setup.colab_links(url)
    for path in NOTEBOOKS:
        assert (f"https://colab.research.google.com/github/someone/attention-course/blob/main/notebooks/{path.name}"
                in links)
    assert "No public repository address" in colab_setup.colab_links("")
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# Title"]},
                    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": ["import torch\n"]}]}
    assert colab_setup.with_setup_cell(nb, colab_setup.setup_block(url))  # inserted before the first code cell
    assert colab_setup._cell_source(nb["cells"][1]) == colab_setup.setup_block(url)
    assert colab_setup.with_setup_cell(nb, colab_setup.setup_block(None))  # a new address replaces the old block
    assert [colab_setup._cell_source(c) for c in nb["cells"][1:]] == [colab_setup.setup_block(None), "import torch\n"]


def _run_block(block: str, python: str = sys.executable, cwd: Path = ROOT, source: str | None = None):
    env = {**os.environ}
    env.pop(colab_setup.SOURCE_VARIABLE, None)
    if source is not None:
        env[colab_setup.SOURCE_VARIABLE] = source
    return subprocess.run([python, "-c", block], cwd=cwd, env=env, capture_output=True, text=True)


def test_block_does_nothing_where_helpers_imports():
    result = _run_block(colab_setup.setup_block(), source="/nonexistent/never-installed.whl")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def _raised_by(block: str, monkeypatch, source: str | None):
    """Run ``block`` in this process as if `helpers` were not installed; return the error it raised."""
    monkeypatch.setitem(sys.modules, "helpers", None)  # `import helpers` -> ModuleNotFoundError(name="helpers")
    if source is None:
        monkeypatch.delenv(colab_setup.SOURCE_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(colab_setup.SOURCE_VARIABLE, source)
    with pytest.raises(Exception) as raised:
        exec(compile(block, "<first cell>", "exec"), {})
    return raised.value


def test_without_an_address_the_cell_says_what_to_do(monkeypatch):
    error = _raised_by(colab_setup.setup_block(None, from_pyproject=False), monkeypatch, source=None)
    (paragraph,) = error._render_traceback_()  # what Jupyter shows instead of a traceback
    assert paragraph == colab_setup.NO_ADDRESS and "\n" not in paragraph
    assert "pip install ." in paragraph
    assert "[project.urls]" not in paragraph and "aintainer" not in paragraph  # a learner needs only what to do


def test_a_failed_install_is_explained_not_a_traceback(monkeypatch, tmp_path):
    error = _raised_by(colab_setup.setup_block(), monkeypatch, source=str(tmp_path / "missing.whl"))
    (message,) = error._render_traceback_()
    assert message.startswith("The course's helpers package could not be installed from ")
    assert "pip said:" in message


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(ROOT)], check=True, capture_output=True)
    (built,) = out.glob("attention_course_helpers-*.whl")
    return built


def test_wheel_ships_every_subpackage(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for package in PACKAGES:
        assert f"{package.replace('.', '/')}/__init__.py" in names, f"{package} is missing from the wheel"
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "helpers").rglob("*.py")}
    assert modules <= set(names)
    assert "helpers.exercises" in PACKAGES and "helpers.live" in PACKAGES


VERSIONS = ("import json; from importlib import metadata; print(json.dumps({d.metadata['Name']: d.version "
            "for d in metadata.distributions()}))")


def test_setup_block_installs_the_wheel_into_a_fresh_environment_changing_nothing(wheel, tmp_path):
    """A new virtual environment that sees this environment's packages (through a folder of links, without
    the course itself) stands in for Colab: the block must install the wheel, keep every package's version,
    and then every module of helpers must import. scripts/colab_stack.py does the same on real Colab versions
    (its step 3), so `make test`, which runs that, skips this one."""
    if os.environ.get(COLAB_STACK_VARIABLE) == "later":
        pytest.skip("make test installs the wheel with the set-up block on the Colab-like stack later "
                    "(scripts/colab_stack.py, step 3)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    visible = tmp_path / "preinstalled"
    visible.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(("attention_course_helpers", "__editable__", "helpers", "_virtualenv")):
            (visible / entry.name).symlink_to(entry)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "preinstalled.pth").write_text(str(visible) + "\n")
    before = json.loads(subprocess.run([python, "-c", VERSIONS], cwd=tmp_path, check=True, capture_output=True,
                                       text=True).stdout)
    assert "attention-course-helpers" not in before and "torch" in before

    result = _run_block(colab_setup.setup_block(), python=python, cwd=tmp_path, source=str(wheel))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"Installed the course's helpers package from {wheel}.\n"

    after = json.loads(subprocess.run([python, "-c", VERSIONS], cwd=tmp_path, check=True, capture_output=True,
                                      text=True).stdout)
    assert {name: after.get(name) for name in before} == before, "the install changed a package"
    assert set(after) - set(before) == {"attention-course-helpers"}
    check = ("import importlib, helpers; "
             f"[importlib.import_module(m) for m in {PACKAGES!r}]; "
             "import pkgutil; mods = [m.name for m in pkgutil.walk_packages(helpers.__path__, 'helpers.')]; "
             "[importlib.import_module(m) for m in mods]; print(helpers.__file__)")
    imported = subprocess.run([python, "-c", check], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "MPLBACKEND": "agg"})
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip().startswith(site), "helpers must come from the installed wheel"


def test_notebooks_open_unmodified_on_any_python(tmp_path):
    """make lab's contents manager hands JupyterLab the notebook with the local Python's version in
    language_info, so the kernel's report changes nothing and the notebook does not open "modified"."""
    import asyncio
    import platform
    import runpy

    from traitlets.config import Config

    config = Config()
    namespace = runpy.run_path(str(ROOT / "scripts" / "jupyter_server_config.py"), init_globals={"c": config})
    manager_class = namespace["CourseContentsManager"]
    assert config.ServerApp.contents_manager_class is manager_class
    notebook = json.loads(NOTEBOOKS[0].read_text(encoding="utf-8"))
    notebook["metadata"]["language_info"]["version"] = "3.0.1"
    (tmp_path / "lesson.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    model = asyncio.run(manager_class(root_dir=str(tmp_path)).get("lesson.ipynb"))
    assert model["content"]["metadata"]["language_info"]["version"] == platform.python_version()
    assert json.loads((tmp_path / "lesson.ipynb").read_text())["metadata"]["language_info"]["version"] == "3.0.1"


def test_make_test_skips_the_fresh_install_only_because_it_runs_the_colab_stack():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    # make test runs the recipe "suite" (wrapped to report its time and CPU-seconds).
    assert "$(MAKE) --no-print-directory suite" in makefile.split("\ntest:\n", 1)[1].split("\n\n", 1)[0]
    recipe = makefile.split("\nsuite:\n", 1)[1].split("\n\n", 1)[0]
    assert f"suite: export {COLAB_STACK_VARIABLE} := later" in makefile
    assert "scripts/colab_stack.py" in recipe and "colab=0; wait $$stack || colab=$$?" in recipe
