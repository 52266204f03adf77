"""`Dialect`: what differs between the SQL engines under `SQLStore`, and `Tx`, one open transaction.

SQL is written once with `?` placeholders and the dialect's pieces (clock, JSON parameters, row
locks); the dialect turns `?` into its engine's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from flue_nb.runtime.store._rows import dump_json, load_json

__all__ = ["Dialect", "Tx"]

_SUBMISSION_COLUMNS = (
    "id, conversation_id, seq, {text}, state, accepted_at, attempts, started_at, lease_owner,"
    " lease_expires, abort_requested, joined_into, outcome, {result}, {error}, settled_at, {settings}"
)


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between engines: placeholders, the clock, JSON and free-text columns, row locks."""

    name: str
    placeholder: str
    """What `?` becomes in this engine's SQL."""
    now: str
    """The database's clock in seconds since the epoch: leases are measured by it alone."""
    json_param: str
    """A parameter stored into a JSON column."""
    json_out: str
    """How a JSON column is selected as text (`{}` is the column)."""
    text_as_json: bool
    """Free text (`text`, `result`) is kept as a JSON string (PostgreSQL's `text` cannot hold NUL)."""
    row_lock: str
    """What a SELECT adds to lock the rows it reads until commit ("" where a write transaction
    already excludes every other writer, as SQLite's `BEGIN IMMEDIATE` does)."""
    notify: str = ""
    """A statement announcing, at commit, that the conversation `?` changed ("" where the engine
    cannot tell other processes: they poll)."""

    def sql(self, statement: str) -> str:
        """`statement` with this engine's placeholders."""
        return _translate(statement, self.placeholder)

    @property
    def text_param(self) -> str:
        """A parameter stored into a free-text column."""
        return self.json_param if self.text_as_json else "?"

    def text_out(self, column: str) -> str:
        """How a free-text column is selected."""
        return self.json_out.format(column) if self.text_as_json else column

    def encode_text(self, value: str | None, what: str) -> str | None:
        """Free text as its column takes it."""
        return dump_json(value, what) if self.text_as_json and value is not None else value

    def decode_text(self, value: str | None) -> str | None:
        """Free text as its column gave it."""
        decoded = load_json(value) if self.text_as_json else value
        return None if decoded is None else str(decoded)

    @property
    def submission_columns(self) -> str:
        """The SELECT list `SQLStore._submission` decodes."""
        j = self.json_out.format
        return _SUBMISSION_COLUMNS.format(
            text=self.text_out("text"), result=self.text_out("result"), error=j("error"), settings=j("settings")
        )

    @property
    def record_columns(self) -> str:
        """The SELECT list `SQLStore._record` decodes."""
        return f"seq, conversation_id, submission_id, kind, {self.json_out.format('data')}, created_at"


@lru_cache(maxsize=512)
def _translate(statement: str, placeholder: str) -> str:
    return statement if placeholder == "?" else statement.replace("?", placeholder)


class Tx:
    """One open transaction: statements in `?` form, run with the dialect's placeholders."""

    __slots__ = ("conn", "d")

    def __init__(self, conn: Any, dialect: Dialect) -> None:
        self.conn = conn
        self.d = dialect

    def run(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Execute one statement; its rows (all read, so a RETURNING statement is finished)."""
        cur = self.conn.execute(self.d.sql(statement), tuple(params))
        return [tuple(r) for r in cur.fetchall()] if cur.description is not None else []

    def one(self, statement: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row, or None."""
        rows = self.run(statement, params)
        return rows[0] if rows else None

    def many(self, statement: str, rows: Iterable[Sequence[Any]]) -> None:
        """Execute one statement once per row of parameters."""
        cur = self.conn.cursor()
        try:
            cur.executemany(self.d.sql(statement), [tuple(r) for r in rows])
        finally:
            cur.close()
