"""Shared test setup: no real model requests, no secrets, no writes to $HOME's Jupyter dirs."""

from __future__ import annotations

import os
import tempfile

import pytest

# Jupyter and IPython write to ~ unless told otherwise; every kernel and shell a test starts
# inherits these (quality.md: tests isolate Jupyter's dirs).
_JUPYTER_HOME = tempfile.mkdtemp(prefix="flue-test-jupyter-")
for _var, _sub in (
    ("IPYTHONDIR", "ipython"),
    ("JUPYTER_CONFIG_DIR", "config"),
    ("JUPYTER_DATA_DIR", "data"),
    ("JUPYTER_RUNTIME_DIR", "runtime"),
):
    os.environ.setdefault(_var, os.path.join(_JUPYTER_HOME, _sub))
    os.makedirs(os.environ[_var], exist_ok=True)

# No test may reach a paid API: real keys are removed, and the provider refuses non-loopback
# hosts while ALLOW_MODEL_REQUESTS is off (see flue_nb.runtime.providers).
for _var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "FLUE_MODEL"):
    os.environ.pop(_var, None)
os.environ["FLUE_ALLOW_MODEL_REQUESTS"] = "0"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A temporary working directory that is also the process's cwd."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- a throwaway PostgreSQL server, shared by the whole run (tests/pg.py) ------------------------


@pytest.fixture(scope="session")
def pg_server():
    """A running throwaway PostgreSQL server; skips (fails under CI=true) when none can be had."""
    from tests.pg import PgServer, unavailable

    why = unavailable()
    if why is None:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            why = "psycopg is not installed (pip install 'flue_nb[postgres]')"
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL tests must run under CI: {why}")
        pytest.skip(f"no PostgreSQL server: {why}")
    server = PgServer().start()
    yield server
    server.destroy()


@pytest.fixture
def pg_url(pg_server):
    """The URL of a fresh, empty database on the throwaway server."""
    return pg_server.create_database()
