# Two commands do all the set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m flue_nb.cli demo

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache build dist
