"""Settings for the whole test run (unit tests and nbval kernels alike)."""

import os

# pytest runs two workers (-n 2), each with its own notebook kernel. If every process also let
# torch start one thread per core, the 2-core machines the course is tested on would run four
# busy threads on two cores, and small training loops slow down about threefold (measured: the
# notebook-03 tests took 31 s instead of 11 s). One thread per process; kernels inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
