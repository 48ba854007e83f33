"""The notebook runner: runs one submission's notebook top to bottom in a fresh kernel, inside its sandbox.

    python worker.py submission.ipynb --timeout 300 --max-output 5000000 --result-fd 3

Started by the grader (never by hand), in the submission's working folder. It writes one JSON object to the file
descriptor ``--result-fd`` (a pipe to the grader): for every code cell that raised or calls a check, its index,
the checks it calls and its error; which cell was stopped by the time limit; output dropped. That descriptor is
not inherited by the kernel, and this process makes itself non-dumpable, so that the kernel (same user) cannot
open ``/proc/<this pid>/fd/...`` to write there. Nothing it reports is a verdict: verdicts come from the check
runner (``checkrun.py``). Needs nbclient and ipykernel; nothing of the grader.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

CHECK_CALL = re.compile(r"\b(lesson\d\d)\.(\w+)\.check\(")
TIME_LIMIT = "time limit reached"


def not_dumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0): other processes of the same user can no longer open /proc/<pid>/fd or ptrace."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def cpu_seconds() -> float:
    """CPU time of this process and of the children it waited for (the kernel, once shut down)."""
    import resource
    return sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))


def kernelspec(home: Path) -> None:
    folder = home / "jupyter" / "kernels" / "grading"
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("tmp", "ipython", "matplotlib", "runtime", "config"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "grading", "language": "python"}
    (folder / "kernel.json").write_text(json.dumps(spec))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--max-output", type=int, required=True)
    parser.add_argument("--result-fd", type=int, required=True)
    options = parser.parse_args()
    result_fd = options.result_fd
    os.set_inheritable(result_fd, False)
    not_dumpable()
    kernelspec(Path(os.environ["HOME"]))

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    state = {"running": None, "problem": None, "stopped_cell": None}
    kernels: list = []

    class Client(NotebookClient):
        dropped = 0
        kept = 0

        async def async_start_new_kernel(self, **kwargs):
            await super().async_start_new_kernel(**kwargs)
            kernels.append(getattr(getattr(self.km, "provisioner", None), "process", None))

        async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
            state["running"] = cell_index
            try:
                return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
            except CellTimeoutError:
                state["stopped_cell"] = cell_index
                raise
            finally:
                state["running"] = None

        def output(self, outs, msg, display_id, cell_index):
            size = len(json.dumps(msg.get("content", {})))
            if self.kept + size > options.max_output:
                self.dropped += size
                return None
            self.kept += size
            return super().output(outs, msg, display_id, cell_index)

    notebook = nbformat.read(options.notebook, as_version=4)
    started = time.monotonic()
    client = Client(notebook, timeout=max(1, int(options.timeout)), allow_errors=True, kernel_name="grading",
                    interrupt_on_timeout=False, record_timing=False, store_widget_state=False,
                    resources={"metadata": {"path": str(options.notebook.parent)}})

    def report() -> None:
        cells = []
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            errors = [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]
            calls = [f"{lesson}.{name}" for lesson, name in CHECK_CALL.findall(cell.source)]
            error = f"{errors[0].get('ename')}: {str(errors[0].get('evalue'))[:200]}" if errors else None
            if index == state["stopped_cell"]:
                error = TIME_LIMIT
            if calls or error:
                cells.append({"index": index, "checks": calls, "error": error})
        text = json.dumps({"cells": cells, "problem": state["problem"], "stopped_cell": state["stopped_cell"],
                           "dropped_output_bytes": client.dropped, "seconds": time.monotonic() - started,
                           "cpu": cpu_seconds()})
        os.write(result_fd, text.encode())

    def stop(signum, frame):  # the whole notebook's time limit (SIGALRM) or the grader's SIGTERM
        state["stopped_cell"] = state["running"]
        state["problem"] = f"{TIME_LIMIT} ({options.timeout:g} s)"
        for process in filter(None, kernels):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                process.kill()
        report()
        os._exit(124)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(max(1, int(options.timeout)))
    try:
        client.execute()
    except CellTimeoutError:
        state["problem"] = f"{TIME_LIMIT} ({options.timeout:g} s)"
    except DeadKernelError:
        state["problem"] = "the kernel died (the notebook exited Python or ran out of memory)"
    except Exception as error:  # the kernel did not start, a broken notebook file, ...
        state["problem"] = f"{type(error).__name__}: {str(error)[:200]}"
    signal.alarm(0)
    try:
        client.km.shutdown_kernel(now=True)  # waited for: its CPU time counts in cpu_seconds()
    except Exception:
        pass
    report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
