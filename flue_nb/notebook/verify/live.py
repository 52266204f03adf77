"""`%flue verify`: rerun the saved notebook in a separate process (`flue-nb verify`, so the live
kernel is never touched and a runaway rerun can be killed), then compare the fresh namespace with
the live one and give each difference its origin from the records: the agent's steps in the store
(which call changed the name), and the cell log in true execution order (a cell run here whose
source is in no saved cell: edited or deleted since; cells run out of document order).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

from flue_nb.notebook.verify.digest import VarDiff, compare, summarize
from flue_nb.notebook.verify.report import Report
from flue_nb.notebook.verify.steps import AgentStep, agent_steps

__all__ = ["VerifyError", "origins", "verify_live"]

_GRACE_S = 30.0
"""Seconds past the rerun's own total timeout before the process is killed."""


class VerifyError(Exception):
    """The rerun could not be made at all (one line, for the cell)."""


def verify_live(
    ns: Mapping[str, Any],
    path: str,
    *,
    db: str | None,
    store: Any,
    conversations: Iterable[str],
    log: Any = None,
    timeout: int = 120,
    total_timeout: float = 600,
) -> Report:
    """Rerun the notebook saved at `path` and compare it with `ns` (the live namespace).

    `db` is passed to the rerun (the store's path or URL), `store` (open, or None) and
    `conversations` (this kernel's, besides those the notebook names) give the agent's steps,
    `log` (the cell log) the cells as they ran here.
    """
    report = _rerun(path, db, timeout, total_timeout)
    report.compared_live = report.fresh is not None
    if report.fresh is None:
        report.not_compared.append("the live namespace (the rerun did not reach its end)")
        return report
    diffs, undigested = compare(summarize(ns), report.fresh)
    if undigested:
        report.not_compared.append(
            "compared by type and shape only (no digest within the bound): " + ", ".join(f"`{n}`" for n in undigested)
        )
    cids = [*conversations, *(s.conversation_id for s in report.hidden)]
    steps = agent_steps(store, [c for c in dict.fromkeys(cids) if c]) if store is not None and cids else []
    saved = _saved_sources(path)
    runs = list(log.records()) if log is not None else []
    for diff in diffs:
        report.live.append((diff, origins(diff, steps, runs, saved)))
    report.notes += _order_notes(runs, saved)
    return report


def _rerun(path: str, db: str | None, timeout: int, total_timeout: float) -> Report:
    with tempfile.TemporaryDirectory(prefix="flue-verify-") as tmp:
        out = os.path.join(tmp, "report.json")
        argv = [sys.executable, "-m", "flue_nb.cli", "verify", path, "--json", out]
        argv += ["--timeout", str(timeout), "--total-timeout", str(total_timeout)]
        if db:
            argv += ["--db", db]
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=total_timeout + _GRACE_S,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise VerifyError(f"the rerun did not end within {total_timeout + _GRACE_S:g} s and was stopped") from None
        if not os.path.exists(out):
            why = (proc.stderr.strip().splitlines() or ["no report"])[-1]
            raise VerifyError(why.removeprefix("flue-nb verify: "))
        with open(out, encoding="utf-8") as f:
            return Report.from_dict(json.load(f))


def origins(diff: VarDiff, steps: list[AgentStep], runs: list[Any], saved: list[str]) -> list[str]:
    """Where a difference comes from, most recent first, from the agent's steps and the cell log."""
    name = diff.name
    found = []
    for step in reversed(steps):
        if name in step.names:
            found.append(f"{_verb(step, name)} by {step.where()}, in no cell")
    for run in reversed(runs):
        if run.kind == "flue" or name not in _assigned(run.source):
            continue
        count = f"[{run.execution_count}]" if run.execution_count is not None else f"#{run.number}"
        if run.kind == "agent":
            found.append(f"set by a cell the agent ran with run_cell ({count}), in no saved cell")
        elif _normal(run.source) not in saved:
            found.append(f"set by a cell run as {count} that is in no saved cell (edited or deleted since it ran)")
    if not found and diff.kind == "missing":
        found.append("no cell of the saved notebook makes it, and no recorded agent step did")
    return found or ["no recorded agent step or edited cell explains it (see the notes on cell order)"]


def _verb(step: AgentStep, name: str) -> str:
    if name in step.diff.added:
        return "created"
    return "deleted" if name in step.diff.removed else "changed"


def _assigned(source: str) -> set[str]:
    """Names a cell binds or mutates at its top level (assignments, `del`, `x.attr = `, `x[...] =`,
    `x.method(...)` calls), best effort; IPython's magics make some cells unparsable."""
    try:
        tree = ast.parse("\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            base = node.value
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name):
                names.add(base.id)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
        ):
            names.add(node.func.value.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def _normal(source: str) -> str:
    return "\n".join(ln.rstrip() for ln in source.strip().splitlines())


def _saved_sources(path: str) -> list[str]:
    import nbformat

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001 - the rerun read it a moment ago; a rewrite since is its own note
        return []
    return [_normal(c.source) if c.cell_type == "code" else "" for c in nb.cells]


def _order_notes(runs: list[Any], saved: list[str]) -> list[str]:
    """Cells run here out of the saved notebook's order (each cell's last run counts)."""
    last_run: dict[int, int] = {}
    for n, run in enumerate(runs):
        if run.kind == "user" and run.source.strip() and _normal(run.source) in saved:
            last_run[saved.index(_normal(run.source))] = n
    order = sorted(last_run, key=lambda i: last_run[i])
    for a, b in zip(order, order[1:]):
        if b < a:
            return [
                f"cells ran out of order here: cell {b + 1} of the saved notebook last ran after cell {a + 1}, "
                "which is below it (the cell log's true execution order)"
            ]
    return []
