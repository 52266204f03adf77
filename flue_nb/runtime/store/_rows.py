"""What both SQL stores share below the SQL: migrations' shape, JSON columns, updatable fields."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, get_args

from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.store import RecordKind, SubmissionState
from flue_nb.runtime.text import to_json

__all__ = [
    "BLOB_CHUNK",
    "FINAL",
    "RECORD_KINDS",
    "SETTLED",
    "UNSETTLED",
    "Migration",
    "assignments",
    "dump_json",
    "load_json",
]

SETTLED = SubmissionState.SETTLED.value
UNSETTLED = "state <> 'settled'"
"""The SQL condition of an unsettled submission, as the `submissions_unsettled` partial index
names it: a query spelling it so (not `state <> ?`) lets the planner use that index."""

BLOB_CHUNK = 512 * 1024
"""Bytes per `blobs` row: no single row or statement holds a whole large image."""

RECORD_KINDS: frozenset[str] = frozenset(get_args(RecordKind))
"""The record kinds `append` accepts."""

# Columns update_submission / SubmissionUpdate may set. Identity and admission columns never
# change, and outcome/settled_at are written only by settle() so the first outcome always wins.
_UPDATABLE = frozenset(
    {
        "state",
        "attempts",
        "started_at",
        "lease_owner",
        "lease_expires",
        "abort_requested",
        "joined_into",
        "result",
        "error",
    }
)

FINAL = frozenset({"state", "result", "error"})
"""What a settled submission keeps forever: its state, result and error (outcome is settle's)."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One step forward: the statements that take the schema from `version - 1` to `version`."""

    version: int
    statements: tuple[str, ...]


def dump_json(value: Any, what: str) -> str:
    """Serialize `value` as strict JSON text, or raise `StoreError` naming what it was."""
    try:
        # Strict JSON (no NaN/Infinity: they would fail json_valid() anyway) with lone
        # surrogates escaped, so text that is not valid UTF-8 never fails a write (runtime._text).
        return to_json(value)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"cannot store {what}: it is not JSON-serializable ({exc})") from exc


def load_json(text: str | None) -> Any:
    """Decode JSON text from a column (None stays None)."""
    return None if text is None else json.loads(text)


def assignments(fields: dict[str, Any]) -> list[tuple[str, Any]]:
    """Validate update fields as (column, value) pairs: the state's value, the error as JSON."""
    out: list[tuple[str, Any]] = []
    for name, value in fields.items():
        if name not in _UPDATABLE:
            raise TypeError(
                f"cannot update submission field {name!r}"
                + ("; use `settle()`" if name in ("outcome", "settled_at") else "")
            )
        if name == "state":
            value = SubmissionState(value).value
            if value == SETTLED:
                raise TypeError("cannot set state to 'settled' directly; use `settle()`")
        elif name == "abort_requested":
            value = bool(value)
        elif name == "error" and value is not None:
            value = dump_json(value, "a submission error")
        out.append((name, value))
    return out
