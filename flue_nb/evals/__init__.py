"""Evals: measure an agent on notebook tasks, in a notebook and in CI.

A dataset is pydantic-evals' `Dataset` of `Case`s whose inputs are `NotebookTask`s (a prompt,
files, a starting notebook); `load_jsonl` and `load_dabench` read one from files. `run_eval`
runs each case in a fresh kernel with the model (and agent) under test and scores it with the
checks in `flue_nb.evals.checks`. Names load lazily: `import flue_nb.evals` imports neither
pydantic-evals nor Jupyter.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "CaseResult": "flue_nb.evals.report",
    "ClosedForm": "flue_nb.evals.checks",
    "EvalError": "flue_nb.evals.errors",
    "EvalReport": "flue_nb.evals.report",
    "ExactText": "flue_nb.evals.checks",
    "Judge": "flue_nb.evals.checks",
    "NormalizedText": "flue_nb.evals.checks",
    "NotebookTask": "flue_nb.evals.tasks",
    "Number": "flue_nb.evals.checks",
    "PythonCheck": "flue_nb.evals.checks",
    "Regex": "flue_nb.evals.checks",
    "arun_eval": "flue_nb.evals.runner",
    "load_dabench": "flue_nb.evals.tasks",
    "load_dataset": "flue_nb.evals.tasks",
    "load_jsonl": "flue_nb.evals.tasks",
    "model_under_test": "flue_nb.evals.model",
    "run_eval": "flue_nb.evals.runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'flue_nb.evals' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from flue_nb.evals.checks import ClosedForm, ExactText, Judge, NormalizedText, Number, PythonCheck, Regex
    from flue_nb.evals.errors import EvalError
    from flue_nb.evals.model import model_under_test
    from flue_nb.evals.report import CaseResult, EvalReport
    from flue_nb.evals.runner import arun_eval, run_eval
    from flue_nb.evals.tasks import NotebookTask, load_dabench, load_dataset, load_jsonl
