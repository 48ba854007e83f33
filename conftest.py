"""Settings for the whole test run (unit tests and nbval kernels alike)."""

import os

import pytest

# pytest runs two workers (-n 2), each with its own notebook kernel. If every process also let
# torch start one thread per core, the 2-core machines the course is tested on would run four
# busy threads on two cores, and small training loops slow down about threefold (measured: the
# notebook-03 tests took 31 s instead of 11 s). One thread per process; kernels inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_addoption(parser):
    parser.addoption(
        "--run-twice", action="store_true", default=False,
        help="nbval: after a notebook cell passes, run it a second time in the same kernel (a learner pressing "
             "Shift+Enter twice); fail if that run raises. The next cells are then compared with the stored "
             "outputs as usual, so a second run that changes what they print fails there.")


try:  # nbval is a test requirement; without it there are no notebook items to patch
    from nbval.plugin import IPyNbCell
except ImportError:  # pragma: no cover
    IPyNbCell = None


def _run_again(item) -> str | None:
    """Run the cell's source once more; return the error it raised, if any (its output is discarded)."""
    kernel = item.parent.kernel
    msg_id = kernel.execute_cell_input(item.cell.source, allow_stdin=False)
    timeout = item.config.option.nbval_cell_timeout
    while True:
        reply = kernel.get_message(stream="shell", timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    kernel.await_idle(msg_id, item.output_timeout)  # drain its output, so it is not read as the next cell's
    content = reply["content"]
    if content.get("status") == "error":
        return f"{content.get('ename')}: {content.get('evalue')}"
    return None


if IPyNbCell is not None:
    _runtest_once = IPyNbCell.runtest

    def _runtest(self):
        _runtest_once(self)
        if not self.config.getoption("run_twice") or self.options.get("skip") or self.options.get("check_exception"):
            return
        if not self.cell.source.strip():
            return
        error = _run_again(self)
        if error is not None:
            pytest.fail(f"The cell passed, but running it a second time in a row raised {error}. A learner who "
                        f"presses Shift+Enter twice meets this; make the cell safe to run again.", pytrace=False)

    IPyNbCell.runtest = _runtest
