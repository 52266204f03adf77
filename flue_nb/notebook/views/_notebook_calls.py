"""How the notebook tools read in a transcript: lines a person understands, not the model's text.

`call_summary` is the tool line's short argument; `result_lines` what follows it when the call
ends: the cell's source as code for the writing tools, what happened to the document (a live
edit names the cell), the run's outcome in one line. `cells` stays one line (the count), never
the listing the model got.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Shown", "call_summary", "result_lines"]

_CODE_LINES = 12


@dataclass(frozen=True, slots=True)
class Shown:
    """What a notebook tool's line shows under it."""

    code: str = ""
    """The cell source written or run ("" for the read tools)."""
    lines: tuple[str, ...] = ()


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
    if name == "edit_cell":
        return f"cell {args.get('id', '')}"
    return None


def result_lines(name: str, args: Mapping[str, Any], details: Mapping[str, Any] | None, ok: bool) -> Shown | None:
    """What to show under a finished notebook tool call (None: nothing beyond its line)."""
    d = details or {}
    if name == "insert_cell":
        if d.get("live"):
            what = f"inserted into the notebook as cell {d.get('cell_id')}"
        elif d.get("proposed"):
            what = "proposed below this cell (appears when the cell finishes)"
        else:
            what = "not inserted: no notebook to insert into"
        return Shown(_clip(str(args.get("source", ""))), (what,))
    if name == "edit_cell":
        if not (ok and d.get("live")):
            return Shown("", ("not edited: no live notebook document",))
        return Shown(_clip(str(args.get("source", ""))), (f"cell {args.get('id')} changed in the notebook",))
    if name == "run_cell":
        if "run" not in d:
            return None
        where = f"in cell {d['cell_id']} of the notebook" if d.get("written") else "in the kernel only"
        head = f"ran as [{d.get('execution_count')}] {where}: {d.get('outcome')}"
        return Shown(_clip(str(d.get("source", ""))), (head, f"→ {d.get('summary', '')}"))
    return None


def _clip(source: str) -> str:
    lines = source.rstrip("\n").splitlines()
    if len(lines) <= _CODE_LINES:
        return "\n".join(lines)
    return "\n".join([*lines[:_CODE_LINES], f"… ({len(lines) - _CODE_LINES} more lines)"])
