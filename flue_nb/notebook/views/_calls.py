"""What a view shows of a tool call: its one-line summary, its arguments as JSON, what it reported.

Helpers of the one fold (`views.fold`) and its renderers; pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from flue_nb.notebook.views._notebook_calls import call_summary
from flue_nb.notebook.views.parts import ImageRef
from flue_nb.runtime import events as ev
from flue_nb.runtime.tools.summary import SUMMARY_CHARS, Summaries

__all__ = ["SUMMARY_CHARS", "images_of", "input_text", "call_line"]


def call_line(name: str, data: Mapping[str, Any] | None, summaries: Summaries, limit: int = SUMMARY_CHARS) -> str:
    """A call in one line: a notebook tool's own line, else as the agent's tools sum it up."""
    notebook = call_summary(name, data if isinstance(data, Mapping) else {})
    if notebook is not None:
        return notebook
    return summaries.line(name, data, limit)


def images_of(event: ev.ToolEnd) -> list[ImageRef]:
    return [ImageRef(i.digest, i.media_type, i.width, i.height, i.label) for i in event.images]


def input_text(data: Mapping[str, Any]) -> str:
    """A call's arguments as the JSON a card shows when no field is code."""
    try:
        return json.dumps(dict(data), ensure_ascii=False, indent=1, default=str)
    except (TypeError, ValueError):
        return str(data)
