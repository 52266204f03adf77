# Two commands do all the set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench browser clean

# uv installs in seconds what pip takes minutes of a 2-core machine for; the tests install their
# own venvs (the browser's, jupyter-ai's, ...) with this one's uv too (tests/venvs.py).
# uv takes the system's certificates, as pip does here (PIP_CERT); pip stays the fallback.
UV     := $(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY)
export UV_NATIVE_TLS := 1

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv || true
	$(UV) -e '.[test]' || $(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m flue_nb.cli demo

# Lint, format and types first, then every test, TEST_WORKERS at a time (pytest-xdist): most
# tests wait on kernels, servers and child processes, not on the CPU. tests/conftest.py keeps a
# module's tests on one worker (they may share a kernel or server) and starts the longest first.
# The checkout's bytecode is compiled first: every kernel and child process the tests start imports
# flue_nb, and where PYTHONDONTWRITEBYTECODE is set (as here, and for the tests' kernels) each one
# compiled it again. (mypy beside pytest, niced, was tried: its one full run was no faster.)
# Meanwhile tests/prepare.py gets what the tests fetch from outside (Debian's packages, their venvs)
# and caches pytest's rewritten test modules, on the core that ruff and mypy leave idle; the tests
# wait for a step it has not finished.
TEST_WORKERS ?= 4

test: $(STAMP)
	$(PY) tests/prepare.py & prepared=$$!; \
	$(PY) -m ruff check . && $(PY) -m ruff format --check . && $(PY) -m compileall -q flue_nb tests \
	  && $(PY) -m mypy && $(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder; \
	rc=$$?; wait $$prepared; exit $$rc

# The browser test (tests/browser) gets these itself when missing: Debian's chromium-headless-shell
# (apt-get, as root) and .venv-browser (JupyterLab, Notebook 7, Playwright), kept out of .venv's imports.
browser: $(STAMP)
	$(PY) -c "import sys; sys.path.insert(0, 'tests/browser'); import _lab; print(_lab.chromium(), _lab.browser_venv())"

bench: $(STAMP)
	$(UV) -e '.[bench]' || $(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .venv-browser .venv-live .venv-jupyter-ai .venv-browser.lock .venv-live.lock .venv-jupyter-ai.lock .mcp-servers .pytest_cache build dist
