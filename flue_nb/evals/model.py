"""The model an eval runs with, for an `--agent` that should use it."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["model_under_test"]


def model_under_test(default: Any = None) -> Any:
    """In an eval's kernel, the `--model` of the run: a provider id as given, or the object a
    `module:attribute` names; elsewhere `default`. An agent calls
    `flue.use_model(model_under_test("anthropic/claude-sonnet-4-6"))` to be measured with it."""
    import importlib

    spec = os.environ.get("FLUE_EVAL_MODEL")
    if not spec:
        return default
    from flue_nb.evals.kernel_case import is_object_spec

    if not is_object_spec(spec):
        return spec
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)
