"""How the notebook tools read in a transcript: lines a person understands, not the model's text.

`call_summary` is the tool line's short argument; `result_lines` what follows it when the call
ends: the cell's source as code for the writing tools (for `edit_cell`, the change as a diff:
`edit_change`), what happened to the document (a live edit names the cell and the path it took),
the run's outcome in one line. `cells` stays one line (the count), never the listing the model got.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Shown", "call_summary", "edit_change", "result_lines"]

_CODE_LINES = 12
_DIFF_LINES = 40
"""Most diff lines a card shows; the rest are counted in a last line."""
_WHOLE_CELL = 40
"""A cell up to this many lines is diffed whole (every line as context): the card then shows the
new cell in full, its changes marked."""


@dataclass(frozen=True, slots=True)
class Shown:
    """What a notebook tool's line shows under it."""

    code: str = ""
    """The cell source written or run ("" for the read tools), or an edit's diff."""
    lines: tuple[str, ...] = ()
    lang: str = "python"
    """`code`'s language: `diff` for an edit."""


def call_summary(name: str, args: Mapping[str, Any]) -> str | None:
    """The tool line's argument for a notebook tool (None: not one of them)."""
    if name == "cells":
        return "document order" if args.get("order") == "document" else "execution order"
    if name == "cell":
        if args.get("last_error"):
            return "the last error"
        if args.get("execution_count") is not None:
            return f"[{args['execution_count']}]"
        return str(args.get("id") or "")
    if name == "variables":
        return str(args.get("name") or "all")
    if name in ("insert_cell", "run_cell"):
        return "" if args.get("source") is None else f"{args.get('kind', 'code')} cell"
    if name in ("edit_cell", "delete_cell", "move_cell"):
        return f"cell {args.get('id', '')}"
    return None


def edit_change(name: str, details: Mapping[str, Any] | None) -> list[str]:
    """An `edit_cell` that landed, as unified diff lines of the cell's old and new source (`@@`,
    `+`, `-`, ` ` prefixed; bounded); [] for any other call or an edit that did not land."""
    d = details or {}
    old, new = d.get("old_source"), d.get("source")
    if (
        name != "edit_cell"
        or not d.get("written", d.get("live"))
        or not isinstance(old, str)
        or not isinstance(new, str)
    ):
        return []
    a, b = old.splitlines(), new.splitlines()
    context = max(len(a), len(b)) if max(len(a), len(b)) <= _WHOLE_CELL else 3
    lines = list(difflib.unified_diff(a, b, lineterm="", n=context))[2:]  # no ---/+++ file header
    if not lines:
        return [" " + x for x in b] or ["(the source did not change)"]
    if len(lines) > _DIFF_LINES:
        lines = [*lines[:_DIFF_LINES], f"… ({len(lines) - _DIFF_LINES} more diff lines)"]
    return lines


def result_lines(name: str, args: Mapping[str, Any], details: Mapping[str, Any] | None, ok: bool) -> Shown | None:
    """What to show under a finished notebook tool call (None: nothing beyond its line)."""
    d = details or {}
    if name == "insert_cell":
        if d.get("written", d.get("live")):  # records before `written` say `live`
            where = d.get("where_text")
            what = f"inserted as {where}" if where else f"inserted into the notebook as cell {d.get('cell_id')}"
        elif d.get("proposed"):
            what = "proposed below this cell (appears when the cell finishes)"
        else:
            what = _not_written("not inserted", d, "no notebook to insert into")
        return Shown(_clip(str(args.get("source", ""))), (what,))
    if name == "edit_cell":
        if not (ok and d.get("written", d.get("live"))):
            return Shown("", (_not_written("not edited", d, "no live notebook document"),))
        change = edit_change(name, d)
        if not change:  # a record without the old source: the new source alone
            return Shown(_clip(str(args.get("source", ""))), (f"cell {args.get('id')} changed in the notebook",))
        return Shown("\n".join(change), (f"edited {d.get('where_text') or 'cell ' + str(args.get('id'))}",), "diff")
    if name in ("delete_cell", "move_cell"):
        if not (ok and d.get("written")):
            verb = "not deleted" if name == "delete_cell" else "not moved"
            return Shown("", (_not_written(verb, d, "no open notebook"),))
        if name == "delete_cell":
            return Shown(_clip(str(d.get("old_source", ""))), (f"deleted {d.get('where_text')}",))
        return Shown("", (f"moved from position {int(d.get('index_before', 0)) + 1} to {d.get('where_text')}",))
    if name == "run_cell":
        if "run" not in d:
            return None
        where = f"in cell {d['cell_id']} of the notebook" if d.get("written") else "in the kernel only"
        head = f"ran as [{d.get('execution_count')}] {where}: {d.get('outcome')}"
        return Shown(_clip(str(d.get("source", ""))), (head, f"→ {d.get('summary', '')}"))
    return None


def _not_written(what: str, d: Mapping[str, Any], otherwise: str) -> str:
    """Why a write did not happen, as the details say: refused, no tab, or `otherwise`."""
    if d.get("where") == "refused":
        return f"{what}: the cell changed since the agent read it (the user's text is kept)"
    if d.get("reach") in ("no_front_end", "not_open"):
        return f"{what}: no front end is connected"
    if d.get("reach") == "no_answer":
        return f"{what}: the open tab did not answer in time"
    if d.get("reach"):
        return f"{what}: the write failed"
    return f"{what}: {otherwise}"


def _clip(source: str) -> str:
    lines = source.rstrip("\n").splitlines()
    if len(lines) <= _CODE_LINES:
        return "\n".join(lines)
    return "\n".join([*lines[:_CODE_LINES], f"… ({len(lines) - _CODE_LINES} more lines)"])
