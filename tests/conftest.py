"""Shared test setup: no real model requests, no secrets, no writes to $HOME's Jupyter dirs."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any

import pytest

# Jupyter and IPython write to ~ unless told otherwise; every kernel and shell a test starts
# inherits these (quality.md: tests isolate Jupyter's dirs). A pytest-xdist worker inherits the
# controller's environment, so it sets its own: workers share no IPython history database.
_JUPYTER_HOME = tempfile.mkdtemp(prefix="flue-test-jupyter-")
atexit.register(shutil.rmtree, _JUPYTER_HOME, True)  # every run left one per process in /tmp
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
for _var, _sub in (
    ("IPYTHONDIR", "ipython"),
    ("JUPYTER_CONFIG_DIR", "config"),
    ("JUPYTER_DATA_DIR", "data"),
    ("JUPYTER_RUNTIME_DIR", "runtime"),
):
    if _WORKER:
        os.environ[_var] = os.path.join(_JUPYTER_HOME, _sub)
    else:
        os.environ.setdefault(_var, os.path.join(_JUPYTER_HOME, _sub))
    os.makedirs(os.environ[_var], exist_ok=True)

# No test may reach a paid API: real keys are removed, and the provider refuses non-loopback
# hosts while ALLOW_MODEL_REQUESTS is off (see flue_nb.runtime.providers).
for _var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "FLUE_MODEL"):
    os.environ.pop(_var, None)
os.environ["FLUE_ALLOW_MODEL_REQUESTS"] = "0"


@pytest.fixture(autouse=True)
def _chats_closed() -> Any:
    """Close the chat widgets a test left open in this process: a chat left open goes on reading
    its store from its follower's thread, into the next test of the worker (which once counted
    another store's statements as its own)."""
    yield
    import sys

    widget = sys.modules.get("flue_nb.notebook.views.chat.widget")
    for w in widget.open_widgets() if widget is not None else ():
        try:
            w.close()
        except Exception:  # noqa: BLE001 - a test may have closed its comm already
            pass


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


# -- the crash matrix (tests/runtime/test_crash.py) goes in pytest's summary, not its progress ----
# Under pytest-xdist the worker that ran the crash tests hands its lines to the controller, which
# prints the summary; this conftest is the one the controller loads (it collects nothing).

_CRASH_MATRIX = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def crash_summary(pytestconfig: pytest.Config) -> list[str]:
    """Lines to print after the test results, under "crash matrix": a heading of two lines, then
    one line per row."""
    return pytestconfig.stash.setdefault(_CRASH_MATRIX, [])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    lines = getattr(node, "workeroutput", {}).get("crash_matrix")
    if lines:  # each worker ran some rows: one heading, every worker's rows
        merged = node.config.stash.setdefault(_CRASH_MATRIX, [])
        merged.extend(lines[:2] if not merged else [])
        merged.extend(line for line in lines[2:] if line not in merged)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(_CRASH_MATRIX, None)
    if lines:
        terminalreporter.section("crash matrix (SIGKILL, then a new process recovers)")
        for line in lines:
            terminalreporter.write_line(line)


# -- parallel runs (pytest-xdist, `make test`): what runs together, and the long ones first ------
# A module's tests stay on one worker, in their order: many share a module-scoped kernel or server
# and build on each other's cells. Modules whose tests are independent and long (`_SPLIT`) send
# each test alone. On a worker the units are ordered longest first, and `--no-loadscope-reorder`
# keeps that order, so that no long test starts last. A test's time is its last run's (pytest's
# cache), else a guess from the kind of test. A run without xdist keeps the collection order.
# (xdist's own `--dist loadgroup` cannot be used: it renames tests through `item._nodeid`, which
# pytest 9 no longer reads.)

_SPLIT = ("tests/runtime/test_crash.py",)
_DURATIONS = "flue/durations"
_TIMES: dict[str, float] = {}


def _unit(nodeid: str) -> str:
    """What runs on one worker: the test's module, or the test alone in a `_SPLIT` module."""
    module = nodeid.split("::")[0]
    return nodeid if module in _SPLIT else module


# Tests known to be long (seconds per test), for a clean clone (CI) that has no cache of the last
# run's times: the fast-agent test builds its own venv first (160 s), which a 5 s guess started
# last, at the tail. The others wait on leases, servers and timeouts rather than compute, and a
# 0.1 s guess started them last: in one clean run the lease tests (47 s in all) ran alone for the
# last 25 s. Per-test times from that run (a fresh clone, 4 workers).
_LONG = {
    "test_acp_fast_agent.py": 180.0,
    "test_live_document.py": 20.0,
    "test_two_owners.py": 6.0,
    "test_mcp_real_everything.py": 1.7,
    "test_acp.py": 1.7,
    "test_mcp_hardening.py": 1.7,
    "test_mcp.py": 1.0,
    "test_scale.py": 1.0,
    "test_mcp_real_servers.py": 0.8,
    "test_postgres_store.py": 1.0,
}


def _guess(item: pytest.Item) -> float:
    if item.path.name in _LONG:
        return _LONG[item.path.name]
    if "browser" in item.path.parts:
        return 60.0
    if item.get_closest_marker("kernel") or item.get_closest_marker("crash"):
        return 5.0
    return 0.1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return
    cache = getattr(config, "cache", None)
    known: dict[str, float] = cache.get(_DURATIONS, {}) if cache is not None else {}
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(_unit(item.nodeid), []).append(item)

    def cost(unit: list[pytest.Item]) -> float:
        return sum(known.get(i.nodeid, _guess(i)) for i in unit)

    items[:] = [i for unit in sorted(units.values(), key=cost, reverse=True) for i in unit]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadscope` with `_unit` as the scope."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class _Units(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return _Units(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _TIMES[report.nodeid] = _TIMES.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    workeroutput = getattr(config, "workeroutput", None)  # set on an xdist worker only
    if workeroutput is not None:
        if config.stash.get(_CRASH_MATRIX, None):
            workeroutput["crash_matrix"] = config.stash[_CRASH_MATRIX]
        return
    cache = getattr(config, "cache", None)
    if cache is not None and _TIMES:
        known = cache.get(_DURATIONS, {})
        known.update({k: round(v, 3) for k, v in _TIMES.items()})
        cache.set(_DURATIONS, known)
