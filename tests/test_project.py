"""The set-up stays consistent: pins, environment.yml, the two commands, the notebooks' hygiene."""

import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge name -> PyPI name
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


LOCK = ROOT / "requirements-lock.txt"
# What a learner's environment provides (Colab, conda, a JupyterHub): never a requirement of the package.
FRONT_END = {"jupyterlab", "notebook", "ipykernel", "jupyter-client", "jupyter-server", "ipython"}


def _name(text):
    return re.sub(r"[-_.]+", "-", text).lower()


def _lock():
    pins = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"{line!r} in requirements-lock.txt is not pinned with =="
            pins[_name(name)] = version
    return pins


def _requirements(extras=("lab", "test")):
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = project["dependencies"] + [t for extra in extras for t in project["optional-dependencies"][extra]]
    return [Requirement(text) for text in texts]


def test_runtime_requirements_are_ranges_without_a_front_end():
    runtime = _requirements(extras=())
    assert {_name(r.name) for r in runtime} == {"torch", "numpy", "matplotlib", "ipywidgets", "safetensors"}
    for requirement in runtime:
        assert not any(spec.operator in ("==", "===") for spec in requirement.specifier), f"{requirement} is a pin"
    widgets = next(r for r in runtime if r.name == "ipywidgets").specifier
    assert widgets.contains("7.7.1") and widgets.contains("8.1.8") and not widgets.contains("9.0.0")
    assert not FRONT_END & {_name(r.name) for r in runtime}


# Releases that install but show no widget in a front end learners use, and why. The supported range and the
# lock must admit none of them (the stored outputs and `make` would otherwise hand them to learners).
KNOWN_NOT_TO_RENDER = {
    "ipywidgets": {
        "8.1.9": "VS Code's Jupyter extension renders no widget with it, silently "
                 "(microsoft/vscode-jupyter#17504, open since 2026-08-19); 8.1.8 renders",
    },
}


@pytest.mark.parametrize("package", sorted(KNOWN_NOT_TO_RENDER))
def test_range_and_lock_admit_no_release_known_not_to_render(package):
    requirement = next(r for r in _requirements() if _name(r.name) == package)
    lock = _lock()[package]
    for version, why in KNOWN_NOT_TO_RENDER[package].items():
        assert not requirement.specifier.contains(version), f"{requirement} admits {package} {version}: {why}"
        assert lock != version, f"requirements-lock.txt pins {package} {version}: {why}"
    environment = (ROOT / "environment.yml").read_text()
    pinned = re.search(rf"^\s*-\s*{package}=(\S+)\s*$", environment, re.M)
    assert pinned and pinned.group(1) == lock, f"environment.yml pins {package} {pinned and pinned.group(1)}, lock {lock}"


def test_lock_pins_every_requirement_inside_its_range():
    lock = _lock()
    for requirement in _requirements():
        version = lock.get(_name(requirement.name))
        assert version, f"{requirement.name} is missing from requirements-lock.txt"
        assert requirement.specifier.contains(version, prereleases=True), f"lock {version} outside {requirement}"


def test_environment_yml_matches_the_lock():
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert environment["channels"] == ["conda-forge"]
    conda_pins, pip_section = {}, []
    for entry in environment["dependencies"]:
        if isinstance(entry, dict):
            pip_section = entry["pip"]
            continue
        name, _, version = entry.partition("=")
        if name not in ("python", "pip"):
            conda_pins[_name(CONDA_NAMES.get(name, name))] = version
    lock = _lock()
    assert conda_pins == {_name(r.name): lock[_name(r.name)] for r in _requirements()}
    assert pip_section == ["-e ."]


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="checks the course's own .venv (make setup), not another environment")
def test_this_environment_is_the_lock():
    """Strict nbval compares with outputs made on the locked versions: the venv must hold exactly those."""
    from importlib import metadata

    from packaging.version import Version

    differs = {}
    for name, version in _lock().items():
        try:
            installed = Version(metadata.version(name)).public
        except metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            differs[name] = (version, installed)
    assert not differs, f"(lock, installed) differ: {differs}; run make setup (or scripts/lock.py after an upgrade)"


def test_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert readme.index("make lab") < 1500 and readme.index("make test") < 1500, "README shows both commands first"
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    makefile = (ROOT / "Makefile").read_text()
    # make lab sets up only what learning needs (its own stamp); make test sets up everything
    assert re.search(r"^lab: \$\(LAB_STAMP\)$", makefile, re.M)
    test_recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    # make test runs the suite and ends with one line: its wall time and CPU-seconds (scripts/cpu_by_process.py)
    assert re.search(r"cpu_by_process\.py --total \"make test\" -- \$\(MAKE\) --no-print-directory suite\b",
                     test_recipe), test_recipe
    suite_recipe = makefile.split("\nsuite:", 1)[1].split("\n\n", 1)[0]
    assert "$(MAKE) --no-print-directory setup" in suite_recipe, "make test sets up everything first"
    # the one-lesson loop: that notebook's strict nbval, its unit tests, its browser test
    check_recipe = makefile.split("\ncheck:", 1)[1].split("\n\n", 1)[0]
    assert "$(CHECK_NOTEBOOK) $(CHECK_TESTS)" in check_recipe and "run_e2e" in check_recipe
    assert "--ServerApp.ip=127.0.0.1" in makefile and "token=" not in makefile.replace("?token=", "")
    assert "-c requirements-lock.txt" in makefile, "make installs the locked versions"
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--nbval " in addopts + " " and "--nbval-lax" not in addopts


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_a_clean_run_all(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1)), "not a clean Restart & Run All"
    for cell in code:
        for output in cell["outputs"]:
            assert output["output_type"] != "error", "".join(cell["source"])[:80]
            assert output.get("name") != "stderr", f"stderr output in: {''.join(cell['source'])[:80]}"
    text = path.read_text()
    assert not re.search(r"/(?:tmp|root|home|work|Users)/[\w.-]+", text), "absolute machine path stored"
    assert "%pip" not in text and "!pip" not in text


# nbval's markers are cell tags, which learners do not see. Only the first code cell (versions, device) and
# cells that measure time may skip the comparison of their output.
IGNORE_TAGS = {"nbval-ignore-output", "nbval-skip"}
TIMES_SOMETHING = re.compile(r"perf_counter|timeit|benchmark|time_per_|measure_time", re.I)
# Words about the tests or the course's sources that must not appear in a lesson's text or code.
TEST_TALK = re.compile(r"nbval|NBVAL_|test suite|stored outputs?\b|so (?:that )?(?:this|the) notebook does not fail"
                       r"|source (?:document|notebook|material)|\bthe book\b(?! \*Build)", re.I)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_only_the_environment_and_timing_cells_ignore_their_output(path):
    nb = json.loads(path.read_text())
    # The Colab set-up cell (tests/test_colab_setup.py) comes first and prints nothing here; then the lesson's.
    code = [c for c in nb["cells"] if c["cell_type"] == "code"
            and not "".join(c["source"]).startswith("# @title Set-up for Colab")]
    first = "".join(code[0]["source"])
    assert "nbval-ignore-output" in code[0].get("metadata", {}).get("tags", []), "first cell: tag nbval-ignore-output"
    assert "environment_report()" in first and "manual_seed" in first, "first cell: imports, versions, seed"
    for cell in code[1:]:
        source = "".join(cell["source"])
        tags = set(cell.get("metadata", {}).get("tags", []))
        assert "nbval-skip" not in tags, source[:80]
        if "nbval-ignore-output" in tags:
            assert TIMES_SOMETHING.search(source), f"only cells that measure time may ignore their output: {source[:80]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_lessons_do_not_talk_about_the_tests_or_sources(path):
    nb = json.loads(path.read_text())
    for index, cell in enumerate(nb["cells"]):
        source = "".join(cell["source"])
        match = TEST_TALK.search(source)
        assert match is None, f"cell {index} says {match.group(0)!r}: {source[:80]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_live_figures_leave_a_static_picture(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            if "LiveFigure(" in "".join(output.get("data", {}).get("text/plain", "")):
                assert output["data"]["image/png"], "widget output without a static picture"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_ends_with_its_checked_exercises(path):
    """Every exercise of the notebook's lesson module is offered, and ships unsolved ('not done yet')."""
    import helpers.exercises as exercises

    lesson = f"lesson{path.name[:2]}"
    names = getattr(exercises, lesson).__all__
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    for name in names:
        checks = [c for c in cells if f"{lesson}.{name}.check(" in "".join(c["source"])]
        assert len(checks) == 1, f"{path.name}: expected one cell checking {lesson}.{name}"
        source = "".join(checks[0]["source"])
        assert "raise NotImplementedError" in source, f"{path.name}: {name} must ship as a placeholder"
        shown = "".join("".join(o.get("data", {}).get("text/plain", "")) for o in checks[0]["outputs"])
        assert "not done yet" in shown, f"{path.name}: the stored output of {name} is not the friendly 'not done yet'"
    assert 2 <= len(names) <= 4


def test_every_notebook_opens_with_the_course_map_of_all_lessons():
    """scripts/course_map.py holds the short titles; each notebook's first cell lists them all, bolding its own."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import course_map
    finally:
        sys.path.pop(0)
    assert sorted(course_map.SHORT_TITLES) == [p.name[:2] for p in NOTEBOOKS], "one short title per notebook"
    for path in NOTEBOOKS:
        first = "".join(json.loads(path.read_text())["cells"][0]["source"])
        line = course_map.LINE.search(first)
        assert line and line.group(0) == course_map.course_map_line(path.name[:2]), (
            f"{path.name}: run python3 scripts/course_map.py --write")
