# Two commands for a fresh machine:
#   make demo   creates .venv, installs pixelmill, generates demo data and runs the job on it
#   make test   creates .venv, installs pixelmill with test extras, runs the test suite
# and, for a developer's loop, make test-quick: the suite without its slow tier (tests/tiers.py),
# and make lint: ruff with the rules in ruff.toml (pyflakes, import order, bugbear)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
WORKDIR ?= demo_out

.PHONY: demo test test-quick lint bench venv clean

$(BIN)/.installed: setup.py transforms/offline/_analysis_kernel.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/pixelmill demo --workdir $(WORKDIR)

# The tests write bytecode caches (__pycache__, git-ignored) even where the environment sets
# PYTHONDONTWRITEBYTECODE (this workplace's machines do): the suite starts dozens of Python
# processes (workers, jobs, forkservers), and each compiled the project's 44,000 lines and
# pytest's rewrite of the test modules again (docs/benchmarks.md, thirty-sixth round).
test: $(BIN)/.installed
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 2 -q tests

lint: $(BIN)/.installed
	$(BIN)/ruff check .

test-quick: $(BIN)/.installed
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 2 -q -m "not slow" tests

bench: $(BIN)/.installed
	$(BIN)/pixelmill bench preprocess

clean:
	rm -rf $(VENV) $(WORKDIR) bench_out *.egg-info
