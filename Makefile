# popcon emoji pipeline: `make demo` runs a demo set end to end, `make test` runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint dev stop status bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(STAMP)

demo: install  ## Start the local stack if needed and run a demo set into out/demo
	$(BIN)/popcon demo --out out/demo

test: install  ## Run the whole test suite (starts its own Temporal servers)
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

dev: install  ## Dev server + both workers in the background (logs in .popcon/logs)
	$(BIN)/popcon dev start

stop:  ## Stop the background stack
	$(BIN)/popcon dev stop

status:
	$(BIN)/popcon dev status

bench: install  ## GPU-queue dispatch benchmark
	$(BIN)/python -m benchmarks.dispatch

clean: stop
	rm -rf .popcon out
