"""What a view shows of a tool call: its one-line summary, its arguments as JSON, what it reported.

Helpers of the one fold (`view.fold`) and its renderers; pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from flue_nb.notebook.cells.view import call_summary
from flue_nb.notebook.view.parts import ImageRef, Namespace
from flue_nb.runtime import events as ev
from flue_nb.runtime.tools.summary import SUMMARY_CHARS
from flue_nb.runtime.tools.summary import summarize_call as runtime_summary

__all__ = ["SUMMARY_CHARS", "images_of", "input_text", "namespace_of", "call_line"]


def call_line(name: str, data: Mapping[str, Any] | None, limit: int = SUMMARY_CHARS) -> str:
    """A call in one line: a notebook tool's own line, else the runtime's summary of any call."""
    notebook = call_summary(name, data if isinstance(data, Mapping) else {})
    if notebook is not None:
        return notebook
    return runtime_summary(name, data, limit)


def _names(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [str(k) for k in value]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return []


def namespace_of(details: Any) -> Namespace | None:
    """The `python` tool's namespace diff, from its details' `variables` (created/changed/deleted)."""
    diff = details.get("variables") if isinstance(details, Mapping) else None
    if not isinstance(diff, Mapping):
        return None
    return Namespace(_names(diff.get("created")), _names(diff.get("changed")), _names(diff.get("deleted")))


def images_of(event: ev.ToolEnd) -> list[ImageRef]:
    return [ImageRef(i.digest, i.media_type, i.width, i.height, i.label) for i in event.images]


def input_text(data: Mapping[str, Any]) -> str:
    """A call's arguments as the JSON a card shows when no field is code."""
    try:
        return json.dumps(dict(data), ensure_ascii=False, indent=1, default=str)
    except (TypeError, ValueError):
        return str(data)
