# popcon emoji pipeline: `make demo` runs a demo set end to end, `make test` runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
GPU_STAMP := $(VENV)/.installed-gpu
# sam2 builds an optional CUDA post-processing extension by default; the engines do not need it.
export SAM2_BUILD_CUDA := 0

.PHONY: install install-gpu chromium demo test test-fast lint dev stop status bench clean

# --no-compile: byte-compiling every installed module costs about 30 s of a fresh install on two cores; Python
# compiles the modules a process imports on first use instead.
PIP_INSTALL := $(BIN)/python -m pip install --quiet --no-compile

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	$(PIP_INSTALL) -e '.[dev]'
	touch $@

# The model engines' runtimes (torch, onnxruntime-gpu, transformers, sam2: several GB, from the machine's own files).
# onnxruntime and onnxruntime-gpu install the same `onnxruntime` package: the CPU wheel an older gpu extra installed is
# removed first (with the GPU wheel, whose files it shares), so the GPU wheel's files are the ones left.
$(GPU_STAMP): $(STAMP)
	$(BIN)/python -m pip uninstall --quiet --yes onnxruntime onnxruntime-gpu
	$(PIP_INSTALL) -e '.[dev,gpu]'
	touch $@

install: $(STAMP)

install-gpu: $(GPU_STAMP)

# Debian's Chromium for the browser tests (Playwright cannot download its own browser here); CI runs as root. Does
# nothing once /usr/bin/chromium exists.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@echo "installing Debian chromium for the browser tests"
	@DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null \
		|| { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			chromium fonts-liberation >/dev/null; }

chromium: $(CHROMIUM)

demo: install  ## Start the local stack if needed and run a demo set into out/demo (CPU matting, no model weights)
	$(BIN)/popcon demo --out out/demo

test: install-gpu chromium  ## Run the whole test suite, model engines and browser tests included (starts its own Temporal servers)
	TESTS_REQUIRE_GPU_EXTRA=1 TESTS_REQUIRE_BROWSER=1 $(BIN)/python -m pytest

test-fast: install  ## The quick tier: no model engines (no GPU extra needed), no process-level end-to-end tests
	$(BIN)/python -m pytest -m "not gpu and not slow"

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
