"""`%flue verify [--timeout S] [--total-timeout S]` and `%flue materialize [SUBMISSION]`: the line
magic's side of `notebook.verify`."""

from __future__ import annotations

import argparse
import os
import shlex
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from flue_nb.notebook.magics._line import FlueCellError

if TYPE_CHECKING:
    from flue_nb.notebook.magics.flue import FlueMagics

__all__ = ["materialize_command", "verify_command"]

VERIFY_USAGE = "%flue verify [--timeout S] [--total-timeout S] [-c ID] [--db PATH]"
MATERIALIZE_USAGE = "%flue materialize [SUBMISSION] [-c ID] [--db PATH]"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # a usage line in the cell, never SystemExit
        raise UsageError(f"{message}\nusage: {self.usage}")


def _parse(usage: str, line: str, *, submission: bool) -> argparse.Namespace:
    p = _Parser(prog="%flue", usage=usage, add_help=False)
    if submission:
        p.add_argument("submission", nargs="?")
    else:
        p.add_argument("--timeout", type=int, default=120)
        p.add_argument("--total-timeout", type=float, default=600)
    p.add_argument("-c", "--conversation")
    p.add_argument("--db")
    try:
        return p.parse_args(shlex.split(line))
    except ValueError as exc:
        raise UsageError(f"{exc}\nusage: {usage}") from None


def _context(magics: FlueMagics, args: argparse.Namespace) -> tuple[str, str | None, Any]:
    """The conversation, the store's location (absolute, for another process) and the open store."""
    from flue_nb.runtime.store.url import store_key

    ns = argparse.Namespace(conversation=args.conversation, db=args.db, new=False)
    cid = magics._conversation(ns)
    db = magics._db(ns)
    store = magics._store(db, create=False)
    where = store_key(db, os.getcwd()) if db != ":memory:" else None
    return cid, where, store


def verify_command(magics: FlueMagics, line: str) -> None:
    """`%flue verify`: rerun the saved notebook in a fresh kernel and compare it with this one."""
    from flue_nb.notebook.celllog.log import cell_log
    from flue_nb.notebook.document.saved import notebook_path
    from flue_nb.notebook.verify.live import VerifyError, verify_live

    args = _parse(VERIFY_USAGE, line, submission=False)
    path = notebook_path(magics._ns)
    if path is None or not os.path.exists(path):
        raise FlueCellError(
            "flue verify: no saved notebook to rerun (the front end did not say which notebook this kernel "
            "runs, or it is not saved yet); from a terminal: flue-nb verify NOTEBOOK.ipynb"
        )
    cid, where, store = _context(magics, args)
    try:
        report = verify_live(
            magics._ns, path, db=where if where and (os.path.exists(where) or "://" in where) else None,
            store=store, conversations=[cid], log=cell_log(magics.shell), timeout=args.timeout,
            total_timeout=args.total_timeout,
        )  # fmt: skip
    except VerifyError as exc:
        raise FlueCellError(f"flue verify: {exc}") from None
    print(report.text())


def materialize_command(magics: FlueMagics, line: str) -> None:
    """`%flue materialize`: write the agent's state-changing python calls into the notebook."""
    from flue_nb.notebook.document.saved import find_document
    from flue_nb.notebook.verify.materialize import materialize
    from flue_nb.runtime.coordinator import coordinator

    args = _parse(MATERIALIZE_USAGE, line, submission=True)
    cid, _where, store = _context(magics, args)
    if store is None:
        raise FlueCellError(f"flue materialize: conversation `{cid}` has nothing stored yet")

    async def go() -> Any:
        doc = await find_document(magics._ns)
        return await materialize(store, cid, args.submission, doc)

    co = coordinator()
    done = co.wait(co.submit(go()), timeout=60)
    if done.written == "shown" and magics.shell is not None and _can_propose(magics):
        # As `insert_cell` does without a live document: one cell below this one, not yet run.
        magics.shell.set_next_input("\n\n".join(source for source, _m in done.cells), replace=False)
        done.written = "proposed"
    print(done.text())


def _can_propose(magics: FlueMagics) -> bool:
    """Whether a front end shows a cell proposed with `set_next_input` (not VS Code, not headless)."""
    if magics._ns.get("__vsc_ipynb_file__"):
        return False
    if getattr(magics.shell, "kernel", None) is None:
        return True  # terminal IPython: the next prompt
    return bool(os.environ.get("JPY_SESSION_NAME")) and not os.environ.get("FLUE_VERIFY_PLAN")
