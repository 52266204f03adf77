"""A pytest fixture that fails a test (and so a CI job) when an eval's score drops.

Enable it in a `conftest.py` with `pytest_plugins = ["flue_nb.evals.pytest_plugin"]`, then:

    def test_analyst_holds_up(flue_eval):
        flue_eval("evals/tasks.jsonl", model="anthropic/claude-haiku-4-5", min_score=0.8)

The test fails below `min_score`, its message the summary table; it returns the `EvalReport`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from flue_nb.evals.report import EvalReport

__all__ = ["flue_eval"]


@pytest.fixture
def flue_eval(tmp_path: Any) -> Callable[..., EvalReport]:
    """`flue_eval(dataset, model=..., min_score=..., **run_eval options)`: run it, fail below the score."""
    from flue_nb.evals.runner import run_eval

    def run(dataset: Any, *, model: str, min_score: float, **options: Any) -> EvalReport:
        options.setdefault("db", str(tmp_path / "evals.sqlite"))
        report = run_eval(dataset, model=model, **options)
        if report.score < min_score:
            pytest.fail(f"eval score {report.score:.2f} is below {min_score:g}:\n{report.table()}", pytrace=False)
        return report

    return run
