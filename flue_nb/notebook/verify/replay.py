"""The fresh kernel's side of `verify`: a `%%flue` cell shows its stored answer instead of
calling the model, and runs no tool.

The verifier (`rerun`) writes a plan (`PLAN_ENV` names its file): for each code cell of the
notebook, by index, the answers its `%flue` messages got when it ran (the output bundles rebuilt
from the store, or the saved outputs where the store holds none). Before each cell runs, the
verifier writes the cell's index to the plan's `current` file (nbclient runs one cell at a time),
so a message sent from that cell takes that cell's next answer. A message with no answer (the
cell never ran) fails its cell: verify never calls a model.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["PLAN_ENV", "ReplayError", "active", "answer", "write_plan"]

PLAN_ENV = "FLUE_VERIFY_PLAN"
"""The environment variable naming the plan file in a kernel that `verify` started."""

_taken: dict[str, int] = {}


class ReplayError(Exception):
    """A message the rerun has no stored answer for (shown as the cell's one-line error)."""


def active() -> bool:
    """Whether this kernel reruns a notebook for `verify` (messages replay, never reach a model)."""
    return bool(os.environ.get(PLAN_ENV))


def write_plan(path: str, current: str, cells: Mapping[int, list[dict[str, Any]]]) -> None:
    """Write the plan: `cells[index]` is that cell's answers in order, each `{"submission_id",
    "bundles": [[data, metadata], ...]}`."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"current": current, "cells": {str(k): v for k, v in cells.items()}}, f)


def answer(message: str) -> None:
    """Show the running cell's next stored answer; `ReplayError` when it has none."""
    from IPython.display import publish_display_data

    with open(os.environ[PLAN_ENV], encoding="utf-8") as f:
        plan = json.load(f)
    try:
        with open(plan["current"], encoding="utf-8") as f:
            cell = f.read().strip()
    except OSError:
        cell = ""
    answers = plan["cells"].get(cell, [])
    n = _taken.get(cell, 0)
    if n >= len(answers):
        first = (message.strip().splitlines() or [""])[0][:60]
        raise ReplayError(
            f"flue verify: no stored answer for the message {first!r} (this cell's message never ran, "
            "so the notebook cannot be rerun without calling the model, which verify never does)"
        )
    _taken[cell] = n + 1
    for data, metadata in answers[n]["bundles"]:
        stream = metadata.get("flue_stream")
        if stream in ("stdout", "stderr"):
            out = getattr(sys, stream)
            out.write(data.get("text/plain", ""))
            out.flush()
        else:
            publish_display_data(data, metadata=metadata)
    if answers[n].get("error"):
        raise ReplayError(str(answers[n]["error"]))
