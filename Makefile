# Two commands do everything, from a fresh clone:
#   make lab    set up, then open the course in JupyterLab
#   make test   set up, then run the whole test suite (unit tests + strict nbval)
# Other targets: setup, notebooks (refresh stored outputs), e2e (browser check), clean.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Optional package index for torch, e.g. https://download.pytorch.org/whl/cpu on a
# CPU-only CI runner that has no local CPU wheel (see README, "Run the tests in your CI").
TORCH_INDEX ?=
# JupyterLab refuses to run as root without this flag (containers, CI images).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
FIRST_NOTEBOOK := $(notdir $(firstword $(NOTEBOOKS)))

.PHONY: setup lab test notebooks e2e clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(if $(TORCH_INDEX),$(BIN)/pip install --index-url $(TORCH_INDEX) torch==2.13.0)
	$(BIN)/pip install -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

# Token authentication stays on (JupyterLab's default): open the URL with ?token=... it prints.
lab: setup
	cd notebooks && ../$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 $(ROOT_FLAG) $(FIRST_NOTEBOOK)

test: setup
	$(BIN)/python -m pytest

# Re-execute every notebook in place to refresh its stored outputs (then review the diff).
notebooks: setup
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.kernel_name=python3 --ExecutePreprocessor.store_widget_state=False --ExecutePreprocessor.record_timing=False \
	    $(NOTEBOOKS)

# Drive JupyterLab in headless Chromium: Run All, move each slider, check the picture changes.
# Needs Debian's chromium (apt-get install chromium); Playwright does not download a browser here.
e2e: setup
	$(BIN)/pip install -e ".[test,e2e]"
	$(BIN)/python -m pytest tests/e2e -p no:nbval -n 0 -o addopts="" -m e2e -v

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
