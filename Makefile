# inferdeck — `make demo` and `make test` work on a fresh machine with Python 3.11+.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: demo test lint bench clean

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "inferdeck needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]'
	@touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/inferdeck demo

test: $(VENV)/.installed
	$(PY) -m ruff check console screens tests bench
	$(PY) -m pytest -q

lint: $(VENV)/.installed
	$(PY) -m ruff check console screens tests bench

bench: $(VENV)/.installed
	$(PY) bench/parser_speed.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
