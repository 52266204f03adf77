"""Runtime tests' shared reporting: the crash matrix goes in pytest's summary, not its progress."""

from __future__ import annotations

from typing import Any

import pytest

_CRASH_MATRIX = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def crash_summary(pytestconfig: pytest.Config) -> list[str]:
    """Lines to print after the test results, under "crash matrix" (tests/runtime/test_crash.py)."""
    return pytestconfig.stash.setdefault(_CRASH_MATRIX, [])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(_CRASH_MATRIX, None)
    if lines:
        terminalreporter.section("crash matrix (SIGKILL, then a new process recovers)")
        for line in lines:
            terminalreporter.write_line(line)
