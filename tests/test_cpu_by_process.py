"""scripts/cpu_by_process.py: the CPU time of a command's processes, by kind."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import cpu_by_process  # noqa: E402


@pytest.mark.parametrize("command, group", [
    ("/r/build/colab-stack/bin/python -m ipykernel_launcher -f /k.json", "kernel, Colab-like stack"),
    ("/r/.venv/bin/python -m ipykernel_launcher -f /k.json", "kernel"),
    ("/usr/lib/chromium/chromium --type=renderer --lang=en", "Chromium"),
    ("/r/.venv/bin/python /r/.venv/bin/jupyter-lab --no-browser", "JupyterLab server"),
    ("/r/.venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", "pytest worker"),
    ("/r/build/colab-stack/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))",
     "pytest worker, Colab-like stack"),
    ("/usr/bin/git status", "other: git"),
])
def test_processes_are_grouped_by_their_command_line(command, group):
    assert cpu_by_process.group_of(command) == group


def test_a_busy_child_is_counted_and_its_exit_status_returned(capsys, tmp_path):
    spin = "import time\nend = time.process_time() + 2.5\nwhile time.process_time() < end: pass\nraise SystemExit(3)"
    report = tmp_path / "cpu.json"
    assert cpu_by_process.main(["--json", str(report), "--", sys.executable, "-c", spin]) == 3
    out = capsys.readouterr().out
    assert "exit 3" in out and "cores busy per 30 s" in out
    import json
    spun = [p for p in json.loads(report.read_text())["processes"] if "process_time" in p["command"]]
    assert len(spun) == 1 and 1.5 <= spun[0]["cpu_s"] <= 3.0, spun


def test_total_counts_every_process_started_orphans_included_in_one_line(tmp_path):
    """--total (what `make test` prints at its end): a busy grandchild whose parent has exited is counted too."""
    import subprocess
    def spin(seconds):
        code = f"import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass"
        return f"{sys.executable} -c '{code}'"
    # A subshell starts a spinner in the background and exits at once: that spinner is orphaned. It ends before the
    # command does (1.0 CPU-s against the command's 1.5 CPU-s and a 2 s sleep).
    command = f"({spin(1.0)} &) ; {spin(1.5)}; sleep 2; exit 4"
    script = Path(cpu_by_process.__file__)
    result = subprocess.run([sys.executable, str(script), "--total", "make demo", "--", "sh", "-c", command],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 4, result
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[make demo] exit 4, "), lines
    cpu = float(lines[0].split(" s, ", 1)[1].split(" CPU-s", 1)[0].replace(",", ""))
    if sys.platform.startswith("linux"):  # the orphan is handed to the script (a subreaper) and counted
        assert 2.5 <= cpu <= 4.5, lines[0]
    else:
        assert 1.0 <= cpu <= 4.5, lines[0]
