"""Fixtures of the browser check: a JupyterLab server on a copy of the notebooks, and headless Chromium.

Test parameters: ``live_notebook`` (each notebook that builds a LiveFigure) and ``slider_notebook``
(those whose code also builds a slider, under E2E_BURST=all; else none: see ``burst_in_lab_check``).

These tests only run when asked for with ``-m e2e``: ``make test`` runs them after the unit tests and
nbval (``make e2e`` runs them alone). Under a plain ``pytest`` run they are collected but skipped at
once: no server, no browser. Without Chromium or Playwright they are skipped, except under ``CI=true``,
where that is a failure.

Environment variables:
    E2E_NOTEBOOK_DIR      notebooks to check (default: the repository's ``notebooks/``); copied, never modified.
    E2E_SCREENSHOT_DIR    where screenshots and ``latency.json`` go (default: a fresh temporary directory).
    E2E_CHROMIUM          browser executable (default: ``/usr/bin/chromium``, Debian's package).
    E2E_README_SCREENSHOT where test_readme_screenshot also writes its picture (``make screenshot``).
    E2E_BURST             ``all``: the slider-burst test on every notebook with a slider (``make e2e``);
                          otherwise on the first one only, to keep ``make test`` short.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = Path(os.environ.get("E2E_NOTEBOOK_DIR", REPO / "notebooks")).resolve()
CHROMIUM = os.environ.get("E2E_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SERVER_START_TIMEOUT_S = 60
# How the kernels' live pictures reach the browser (helpers/widgets.py: choose_transport).
TRANSPORT_VARIABLE = "ATTENTION_COURSE_LIVE_TRANSPORT"

# Lab settings (JUPYTERLAB_SETTINGS_DIR): no "Select Kernel" dialog, no news/update popup,
# every cell in the DOM (no windowing), no autosave into the temporary copy.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings":
        {"autoStartDefaultKernel": True, "windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings":
        {"autosave": False},
}


# --------------------------------------------------------------------------- collection

# A slider built by the course helpers (float_slider, int_slider, steps_slider) or by ipywidgets
# directly (FloatSlider, IntSlider, SelectionSlider, ...).
SLIDER_CALL = re.compile(r"\b(?:float_slider|int_slider|steps_slider|\w*Slider)\(")


def _code_sources(path: Path) -> list[str]:
    """Source of each code cell of the notebook at ``path`` ([] if it cannot be read)."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return []
    sources = []
    for cell in cells:
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            sources.append("".join(source) if isinstance(source, list) else source)
    return sources


def _live_figure_reprs(path: Path) -> list[str]:
    """The stored ``text/plain`` of every LiveFigure the notebook at ``path`` displays (``LiveFigure(x=1, ...)``).

    The lessons build their live pictures with one call into ``helpers.live``, so the stored outputs, not the
    cell sources, say which notebooks show one.
    """
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return []
    reprs = []
    for cell in cells:
        for output in cell.get("outputs", []):
            text = output.get("data", {}).get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            if text.startswith("LiveFigure("):
                reprs.append(text)
    return reprs


# A control whose stored value is a number is a slider (float_slider, int_slider); the browser checks again.
NUMERIC_SETTING = re.compile(r"[(,]\s*\w+=-?\d")


def live_figure_notebooks(directory: Path = NOTEBOOK_DIR, *, with_slider: bool = False) -> list[Path]:
    """Notebooks in ``directory`` that display a ``LiveFigure`` (from their stored outputs, or a code cell that
    builds one).

    With ``with_slider``, only those with a slider (a numeric setting in a stored LiveFigure, or a slider built in
    their code); checked again in the browser: the test fails if no rendered LiveFigure of such a notebook has one.
    """
    found = []
    for path in sorted(directory.glob("*.ipynb")):
        sources, reprs = _code_sources(path), _live_figure_reprs(path)
        if not reprs and not any("LiveFigure(" in source for source in sources):
            continue
        if with_slider and not (any(NUMERIC_SETTING.search(r) for r in reprs)
                                or any(SLIDER_CALL.search(source) for source in sources)):
            continue
        found.append(path)
    return found


def burst_in_lab_check() -> str | None:
    """The notebook whose JupyterLab check (test_notebooks_in_lab.py) also runs the slider burst: without
    E2E_BURST=all (make test) the first notebook with a slider (the burst behaviour belongs to LiveFigure and
    ipywidgets, not to one notebook; one Run All less); with it (make e2e), none: the burst test takes each."""
    if os.environ.get("E2E_BURST", "").lower() == "all":
        return None
    found = live_figure_notebooks(with_slider=True)
    return found[0].name if found else None


def _burst_notebooks() -> list[Path]:
    """The burst test's own notebooks: all with a slider if E2E_BURST=all (make e2e), else none (above)."""
    return live_figure_notebooks(with_slider=True) if burst_in_lab_check() is None else []


# fixture name -> (which notebooks, what the skip says when there are none)
_NOTEBOOK_PARAMETERS = {
    "live_notebook": (lambda: sorted(NOTEBOOK_DIR.glob("*.ipynb")), lambda: f"no notebook in {NOTEBOOK_DIR}"),
    "slider_notebook": (lambda: _burst_notebooks(),
                        lambda: f"no notebook with a LiveFigure and a slider in {NOTEBOOK_DIR}"
                        if burst_in_lab_check() is None else
                        f"without E2E_BURST=all, the JupyterLab check of {burst_in_lab_check()} runs the burst"),
}


def pytest_generate_tests(metafunc):
    for fixture, (discover, what) in _NOTEBOOK_PARAMETERS.items():
        if fixture in metafunc.fixturenames:
            notebooks = discover()
            if notebooks:
                metafunc.parametrize(fixture, notebooks, ids=[p.name for p in notebooks])
            else:
                metafunc.parametrize(fixture, [pytest.param(None, marks=pytest.mark.skip(
                    reason=what()))], ids=[f"no-{fixture.replace('_', '-')}"])


def _missing_requirement() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install -e '.[e2e]')"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium; Playwright cannot download one here)"
    if not _jupyter_executable().exists():
        return f"no jupyter executable at {_jupyter_executable()}"
    return None


def _browser_tests_must_run() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _require() -> None:
    """Skip (fail under CI=true) when Playwright, Chromium or jupyter is missing."""
    reason = _missing_requirement()
    if reason:
        (pytest.fail if _browser_tests_must_run() else pytest.skip)(reason)


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    ours = [item for item in items if here in Path(str(item.path)).parents]
    if not ours:
        return
    if "e2e" not in (config.option.markexpr or ""):
        reason = "browser check, not part of the default run: use `make e2e` (pytest tests/e2e -m e2e ...)"
    else:  # under CI=true a missing browser is not skipped: the fixtures fail instead
        reason = None if _browser_tests_must_run() else _missing_requirement()
    if reason:
        for item in ours:
            item.add_marker(pytest.mark.skip(reason=reason))


# --------------------------------------------------------------------------- server

def _jupyter_executable() -> Path:
    beside_python = Path(sys.executable).with_name("jupyter")
    return beside_python if beside_python.exists() else REPO / ".venv" / "bin" / "jupyter"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def http_get(url: str, token: str | None = None, timeout: float = 5.0) -> tuple[int, dict, bytes]:
    """GET without following redirects; returns (status, headers, body)."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"token {token}")
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def http_delete(url: str, token: str, timeout: float = 10.0) -> int:
    request = urllib.request.Request(url, method="DELETE")
    request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@dataclass
class LabServer:
    url: str
    token: str
    root: Path
    log: Path
    pid: int

    def api(self, path: str):
        status, _, body = http_get(f"{self.url}{path}", self.token)
        assert status == 200, f"GET {path}: HTTP {status}"
        return json.loads(body)

    def shutdown_kernels(self) -> None:
        for session in self.api("/api/sessions"):
            http_delete(f"{self.url}/api/sessions/{session['id']}", self.token)


def _stop(process: subprocess.Popen) -> None:
    """Stop the server by its PID (SIGTERM: it shuts its kernels down), then its own process group."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    try:  # kernels left behind live in the group this fixture created (start_new_session)
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@pytest.fixture(scope="session")
def e2e_tmp():
    path = Path(tempfile.mkdtemp(prefix="attention-e2e-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def screenshot_dir(e2e_tmp) -> Path:
    path = Path(os.environ.get("E2E_SCREENSHOT_DIR") or tempfile.mkdtemp(prefix="attention-e2e-shots-"))
    path.mkdir(parents=True, exist_ok=True)
    print(f"\n[e2e] screenshots go to {path}")
    return path


def _write_latency(directory: Path, records: list[dict]) -> None:
    shown = sorted(r["picture_ms"] for r in records)
    summary = {"count": len(shown), "median_ms": statistics.median(shown),
               "p95_ms": shown[min(len(shown) - 1, round(0.95 * (len(shown) - 1)))], "max_ms": shown[-1]}
    (directory / "latency.json").write_text(
        json.dumps({"summary": summary, "records": records}, indent=1) + "\n", encoding="utf-8")
    print(f"\n[e2e] keypress -> picture: median {summary['median_ms']:.0f} ms, p95 {summary['p95_ms']:.0f} ms "
          f"over {len(shown)} slider steps ({directory / 'latency.json'})")


@pytest.fixture(scope="session")
def latency_log(screenshot_dir):
    """Slider keypress -> new picture times (ms) that tests append to; written to latency.json at the end.

    Under pytest-xdist (make test runs the browser tests on two workers) each worker writes its part, and the
    controlling process merges the parts into latency.json (pytest_sessionfinish below)."""
    records: list[dict] = []
    yield records
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        (screenshot_dir / f"latency-{worker}.part.json").write_text(json.dumps(records), encoding="utf-8")
    elif records:
        _write_latency(screenshot_dir, records)


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controlling process: no stale parts from an earlier run
        for part in _screenshot_parts():
            part.unlink()


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        return
    parts = _screenshot_parts()
    records = [r for part in parts for r in json.loads(part.read_text(encoding="utf-8"))]
    for part in parts:
        part.unlink()
    if records:
        _write_latency(parts[0].parent, records)


def _screenshot_parts() -> list[Path]:
    directory = os.environ.get("E2E_SCREENSHOT_DIR")
    return sorted(Path(directory).glob("latency-*.part.json")) if directory else []


@contextlib.contextmanager
def _start_lab(e2e_tmp, name: str, extra_env: dict[str, str]):
    """JupyterLab on a temporary copy of the notebooks (folder ``name``), token authentication on."""
    _require()
    base = e2e_tmp / name
    root = base / "notebooks"
    shutil.copytree(NOTEBOOK_DIR, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    env = {**os.environ, **extra_env}
    for variable in ("JUPYTERLAB_SETTINGS_DIR", "JUPYTERLAB_WORKSPACES_DIR", "JUPYTER_RUNTIME_DIR",
                     "JUPYTER_CONFIG_DIR"):
        (base / variable.lower()).mkdir()
        env[variable] = str(base / variable.lower())
    for relative, settings in LAB_SETTINGS.items():
        target = base / "jupyterlab_settings_dir" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(settings, indent=2), encoding="utf-8")

    token, port = secrets.token_hex(24), _free_port()
    url = f"http://127.0.0.1:{port}"
    log = base / "jupyterlab.log"
    command = [str(_jupyter_executable()), "lab", "--no-browser", "--allow-root",
               f"--config={REPO / 'scripts' / 'jupyter_server_config.py'}",  # as make lab
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--LabApp.expose_app_in_browser=True"]  # window.jupyterapp, for the text-transport check
    with serve_jupyter(command, root, env, log, url, token) as (process, up_in):
        print(f"\n[e2e] jupyter lab pid {process.pid} at {url} on {root} {extra_env or ''} "
              f"(up in {up_in:.1f} s, log {log})")
        yield LabServer(url=url, token=token, root=root, log=log, pid=process.pid)


@pytest.fixture(scope="session")
def lab_server(e2e_tmp):
    """JupyterLab whose kernels deliver live pictures the default way (binary buffers, ``widgets.Image``) until
    told otherwise (the text-transport check of test_notebooks_in_lab.py)."""
    with _start_lab(e2e_tmp, "lab", {TRANSPORT_VARIABLE: "image"}) as server:
        yield server


# What the text-transport checks run in the kernel of the notebook open in the browser: from then on, a LiveFigure
# built there sends its pictures as text only (helpers.widgets.choose_transport reads the variable each time).
TEXT_TRANSPORT_CODE = f"import os; os.environ[{TRANSPORT_VARIABLE!r}] = 'text'"


def transport_notebook(directory: Path = NOTEBOOK_DIR) -> Path:
    """The notebook both transports are checked on, in JupyterLab and classic Notebook: the first whose stored
    outputs hold a live figure with a slider and no cell meant to raise (classic Notebook stops Run All at the
    first error, tagged or not)."""
    for path in live_figure_notebooks(directory, with_slider=True):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        if not any("raises-exception" in c.get("metadata", {}).get("tags", []) for c in cells):
            return path
    pytest.skip(f"no notebook with a live figure and a slider, without a cell meant to raise, in {directory}")


@contextlib.contextmanager
def serve_jupyter(command: list[str], root: Path, env: dict, log: Path, url: str, token: str,
                  timeout_s: float = SERVER_START_TIMEOUT_S):
    """Start a Jupyter server (``command``), wait until ``url``/api/status answers, yield (process, seconds to
    start); stop it (its whole process group) on the way out. Its output goes to ``log``."""
    with open(log, "wb") as log_file:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        started = time.monotonic()
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command[1]} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                status, _, body = http_get(f"{url}/api/status", token, timeout=2)
                if status == 200:
                    json.loads(body)
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"{command[1]} did not answer within {timeout_s} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield process, time.monotonic() - started
    finally:
        _stop(process)


# --------------------------------------------------------------------------- browser

@pytest.fixture(scope="session")
def lab_browser(e2e_tmp):
    """A headless Chromium context (Debian's binary, driven by Playwright)."""
    _require()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(e2e_tmp / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 800})  # a laptop's window (and a third less to paint than 1400x1300)
        try:
            yield context
        finally:
            context.close()


def report_console_errors(errors: list[str]) -> None:
    """Print the browser console's errors of a test (the first ten)."""
    if errors:
        print(f"[e2e]   browser console errors ({len(errors)}):")
        for text in errors[:10]:
            print(f"[e2e]     {text[:300]}")


class LabApp:
    """One browser tab with a server's JupyterLab, reused by the tests one after another (on one worker).

    A test takes the tab (``start``), opens its notebook in it (``test_notebooks_in_lab._open_and_run_all``: by
    its URL the first time, then through File > Open from Path..., as a learner opens a second notebook) and
    gives it back (``finish``): the notebook's tab is closed without saving and its kernel shut down. Measured
    on the 2-core test machine, loading JupyterLab costs the browser about 6 CPU-seconds, opening a notebook in a
    loaded JupyterLab about 3. A test that ends with an exception leaves the tab in a state nobody checked: the
    tab is closed, and the next test loads JupyterLab in a new one.
    """

    def __init__(self, server: "LabServer", context):
        self.server, self.context = server, context
        self.page = None
        self.console_errors: list[str] = []

    def _on_console(self, message) -> None:
        if message.type == "error":
            self.console_errors.append(message.text)

    def _on_page_error(self, error) -> None:
        self.console_errors.append(f"pageerror: {error}")

    def start(self):
        """The tab for the next test, and whether JupyterLab is loaded in it already."""
        self.console_errors.clear()
        if self.page is not None and not self.page.is_closed():
            return self.page, True
        self.page = self.context.new_page()
        self.page.on("console", self._on_console)
        self.page.on("pageerror", self._on_page_error)
        self.page.set_default_timeout(15_000)
        return self.page, False

    def finish(self, name: str, clean: bool) -> None:
        """Report the console's errors; close the notebook ``name`` (or the whole tab unless ``clean``); shut
        its kernel down."""
        report_console_errors(self.console_errors)
        page = self.page
        if clean and page is not None and not page.is_closed():
            try:
                tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=name)
                tab.locator(".lm-TabBar-tabCloseIcon").click()
                discard = page.locator(".jp-Dialog button", has_text=re.compile(r"^Discard$"))
                deadline = time.monotonic() + 10
                while page.locator(".jp-NotebookPanel").count():
                    if discard.count():  # "Save your work": the outputs of Run All are not saved
                        discard.click()
                    assert time.monotonic() < deadline, f"{name} did not close"
                    time.sleep(0.1)
            except Exception as error:  # the next test loads JupyterLab afresh
                print(f"[e2e]   closing {name} failed ({str(error).splitlines()[0][:200]}): a new tab next time")
                clean = False
        if not clean and page is not None:
            page.close()
            self.page = None
        self.server.shutdown_kernels()


@pytest.fixture(scope="session")
def lab_app(lab_server, lab_browser):
    """The JupyterLab tab of ``lab_server``, reused from test to test."""
    app = LabApp(lab_server, lab_browser)
    yield app
    if app.page is not None:
        app.page.close()
