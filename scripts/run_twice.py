"""Run notebooks as a learner who presses Shift+Enter twice on every cell, and report what breaks.

    .venv/bin/python scripts/run_twice.py notebooks/04_causal_attention.ipynb [more notebooks]

Each code cell runs, is compared with its stored output (strict nbval), then runs a second time in the same
kernel; a second run that raises fails that cell, and a second run that changes what later cells print fails
those cells. `make test` does the same for every notebook (pytest's `--run-twice`, in pyproject's addopts, so
this is a shorthand for one notebook at a time on one worker).
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    command = [sys.executable, "-m", "pytest", "--run-twice", "-n", "0", "-q", *sys.argv[1:]]
    sys.exit(subprocess.call(command, cwd=ROOT))
