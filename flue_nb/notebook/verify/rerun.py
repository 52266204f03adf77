"""Rerun a saved notebook top to bottom in a fresh kernel (nbclient, headless) and say whether it
reproduces: which cells fail, which outputs differ from the saved ones, which agent steps changed
state that no cell recreates, and the fresh namespace, summed up for `%flue verify` to compare.

`%%flue` cells replay their stored answers (`replay`): the cell's saved outputs, checked against
the store (the submission must be there, and its message the cell's), and never call a model or
run a tool again. The rerun has a timeout per cell (a cell over it is interrupted and counts as
failing) and one in all (the rest is not run, and the report says where it stopped). It works on
a copy and never touches a running kernel; it does write the fresh kernel's files wherever the
notebook's cells write them, as any rerun would.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flue_nb.notebook.verify import replay
from flue_nb.notebook.verify.digest import VarSummary
from flue_nb.notebook.verify.report import CellProblem, Report
from flue_nb.notebook.verify.steps import agent_steps, recreated_by

__all__ = ["CELL_TIMEOUT", "TOTAL_TIMEOUT", "flue_submissions", "rerun"]

CELL_TIMEOUT = 120
"""Seconds a cell may run in the rerun (default)."""
TOTAL_TIMEOUT = 600
"""Seconds the whole rerun may take (default)."""
_SANITIZE = [
    (re.compile(r"sub_[0-9a-f]{16}"), "sub_ID"),
    (re.compile(r"\bat 0x[0-9a-f]+"), "at 0x…"),
    (re.compile(r"((?:Cell )?#\d+ |ran as )\[(?:\d+| )\]"), r"\1[N]"),
    (re.compile(r"\S*flue-tour-[a-z]+-[a-z0-9_]{8}"), "<temporary directory>"),
]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DUMP = (
    "from flue_nb.notebook.verify.digest import dump as _flue_verify_dump\n"
    "_flue_verify_dump(get_ipython().user_ns, {path!r})"
)


def flue_submissions(cell: Any) -> list[tuple[str, str]]:
    """(conversation id, submission id) of each `%flue` answer among a saved cell's outputs."""
    out = []
    for o in cell.get("outputs", []):
        flue = (o.get("metadata") or {}).get("flue")
        if isinstance(flue, dict) and isinstance(flue.get("submission_id"), str):
            pair = (str(flue.get("conversation_id") or ""), flue["submission_id"])
            if pair not in out:
                out.append(pair)
    return out


def rerun(
    nb: Any,
    path: str | os.PathLike[str],
    *,
    store: Any = None,
    timeout: int = CELL_TIMEOUT,
    total_timeout: float = TOTAL_TIMEOUT,
) -> Report:
    """Rerun the notebook `nb` (read from `path`) and report; `store` holds its conversations."""
    src = Path(path).resolve()
    report = Report(str(path))
    work = Path(tempfile.mkdtemp(prefix="flue-verify-"))
    try:
        plan = _plan(nb, store, report)
        replay.write_plan(str(work / "plan.json"), str(work / "current"), plan)
        fresh = copy.deepcopy(nb)
        import nbformat

        dump = nbformat.v4.new_code_cell(_DUMP.format(path=str(work / "namespace.json")))
        fresh.cells.append(dump)
        stopped = _execute(fresh, src, work, timeout, total_timeout)
        if stopped:
            report.stopped = stopped
        _compare_cells(nb, fresh, report, len(nb.cells))
        try:
            data = json.loads((work / "namespace.json").read_text(encoding="utf-8"))
            report.fresh = {k: VarSummary.from_dict(v) for k, v in data.items()}
        except (OSError, ValueError):
            report.fresh = None
        _hidden_steps(nb, store, report)
        _out_of_order(nb, report)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report


def _plan(nb: Any, store: Any, report: Report) -> dict[int, list[dict[str, Any]]]:
    """Each cell's stored answers: its saved outputs, replayed at its first message."""
    plan: dict[int, list[dict[str, Any]]] = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        subs = flue_submissions(cell)
        if not subs:
            continue
        bundles = []
        for o in cell.get("outputs", []):
            if o.get("output_type") in ("display_data", "execute_result"):
                bundles.append([dict(o.get("data", {})), dict(o.get("metadata", {}))])
            elif o.get("output_type") == "stream":
                bundles.append([{"text/plain": o.get("text", "")}, {"flue_stream": o.get("name", "stdout")}])
        error = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
        first: dict[str, Any] = {"submission_id": subs[0][1], "bundles": bundles}
        if error is not None:  # the submission failed when it ran: the replay fails the same way
            first["error"] = str(error.get("evalue", ""))
        plan[i] = [first] + [{"submission_id": s, "bundles": []} for _c, s in subs[1:]]
        _check_store(i, cell, subs, store, report)
    return plan


def _check_store(i: int, cell: Any, subs: list[tuple[str, str]], store: Any, report: Report) -> None:
    if store is None:
        report.not_compared.append(
            f"cell {i + 1}: its stored answer was replayed from the saved outputs (no store to check it against)"
        )
        return
    for cid, sid in subs:
        found = next((s for s in store.submissions(cid) if s.id == sid), None) if cid else None
        if found is None:
            report.not_compared.append(
                f"cell {i + 1}: submission {sid} is not in the store; its saved answer was replayed unchecked"
            )
            continue
        message = _message(cell.source)
        if len(subs) == 1 and message is not None and found.text.strip() != message:
            report.notes.append(
                f"cell {i + 1} (%%flue) was edited since it ran: its answer is for the message "
                f"{_first(found.text)!r}, the cell now says {_first(message)!r}"
            )


def _message(source: str) -> str | None:
    """A `%%flue` cell's message (its body), or None for any other cell."""
    first, _, body = source.partition("\n")
    return body.strip() if first.strip().startswith("%%flue") else None


def _execute(nb: Any, src: Path, work: Path, timeout: int, total_timeout: float) -> str | None:
    """Run `nb` in a fresh kernel; None, or where the total timeout stopped it."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    env = {
        k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY")
    }
    env["JPY_SESSION_NAME"] = str(src)
    env[replay.PLAN_ENV] = str(work / "plan.json")
    env["FLUE_ALLOW_MODEL_REQUESTS"] = "0"  # belt and braces: a replay never reaches a model
    current = work / "current"
    reached = {"cell": -1}

    def on_cell_execute(cell: Any, cell_index: int) -> None:
        reached["cell"] = cell_index
        current.write_text(str(cell_index), encoding="utf-8")

    km = AsyncKernelManager(
        kernel_name="python3",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[]),
        transport="ipc",
        ip=str(work / "k"),
    )
    client = NotebookClient(
        nb,
        timeout=timeout,
        km=km,
        kernel_name="python3",
        allow_errors=True,
        interrupt_on_timeout=True,
        error_on_timeout={"ename": "CellTimeout", "evalue": f"the cell ran over {timeout} s and was interrupted"},
        shutdown_kernel="immediate",
        on_cell_execute=on_cell_execute,
        resources={"metadata": {"path": str(src.parent)}},
    )

    async def go() -> None:
        await client.async_execute(env=env, cleanup_kc=True)

    try:
        _run_apart(lambda: asyncio.run(asyncio.wait_for(go(), total_timeout)))
    except asyncio.TimeoutError:
        return f"the rerun stopped after {total_timeout:g} s (the total timeout), in cell {reached['cell'] + 1}"
    except Exception as exc:  # noqa: BLE001 - a dead kernel or a refused start: the report says it
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"the rerun stopped in cell {reached['cell'] + 1}: {type(exc).__name__}: {why}"
    return None


def _run_apart(fn: Callable[[], None]) -> None:
    """Run `fn` here, or on a thread of its own when this thread runs an event loop already (in
    a kernel: `asyncio.run` cannot nest)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        fn()
        return
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="flue-verify") as pool:
        pool.submit(fn).result()


def _compare_cells(saved: Any, fresh: Any, report: Report, count: int) -> None:
    for i in range(count):
        a, b = saved.cells[i], fresh.cells[i]
        if a.cell_type != "code" or not a.source.strip():
            continue
        err_b = _error(b)
        if err_b is not None and _error(a) is None:
            report.failing.append(CellProblem(i, _first(a.source), err_b))
            continue
        if not a.get("outputs") and a.get("execution_count") is None:
            continue  # never ran when saved: nothing to compare against
        left, right = _outputs(a), _outputs(b)
        skipped = [m for o in a.get("outputs", []) for m in _uncomparable(o)]
        if skipped:
            report.not_compared.append(f"cell {i + 1}: {', '.join(sorted(set(skipped)))} outputs not compared")
        if left != right:
            report.differing.append(CellProblem(i, _first(a.source), _first_difference(left, right)))


def _error(cell: Any) -> str | None:
    for o in cell.get("outputs", []):
        if o.get("output_type") == "error":
            return f"{o.get('ename', 'Error')}: {_first(_ANSI.sub('', str(o.get('evalue', ''))))}"
    return None


def _outputs(cell: Any) -> list[str]:
    """What a cell showed, as comparable text (ids, addresses and counts masked)."""
    out: list[str] = []
    for o in cell.get("outputs", []):
        kind = o.get("output_type")
        if kind == "stream":
            text = o.get("text", "")
        elif kind == "error":
            text = f"{o.get('ename')}: {o.get('evalue')}"
        else:
            data = o.get("data", {})
            text = next((data[m] for m in ("text/plain", "text/markdown", "text/html") if m in data), "")
            text = "".join(text) if isinstance(text, list) else str(text)
        for pattern, repl in _SANITIZE:
            text = pattern.sub(repl, text)
        if text.strip():
            out.append(f"{kind}: {_ANSI.sub('', text).rstrip()}")
    # Consecutive stream pieces are one text however the kernel chunked them.
    return ["\n".join(out)] if out else []


def _uncomparable(o: Any) -> list[str]:
    data = o.get("data", {}) if o.get("output_type") in ("display_data", "execute_result") else {}
    return [m for m in data if m.startswith("image/") or m.startswith("application/vnd.jupyter.widget")]


def _first_difference(left: list[str], right: list[str]) -> str:
    a, b = (left or [""])[0].splitlines(), (right or [""])[0].splitlines()
    for n in range(max(len(a), len(b))):
        x, y = (a[n] if n < len(a) else "(nothing)"), (b[n] if n < len(b) else "(nothing)")
        if x != y:
            return f"saved {x[:80]!r}, rerun {y[:80]!r}"
    return "the outputs differ"


def _hidden_steps(nb: Any, store: Any, report: Report) -> None:
    """The state-changing agent steps of the notebook's conversations that no cell recreates."""
    cids = [c for cell in nb.cells if cell.cell_type == "code" for c, _s in flue_submissions(cell) if c]
    if store is None or not cids:
        return
    subs = [s for cell in nb.cells if cell.cell_type == "code" for _c, s in flue_submissions(cell)]
    cells = [(c.source, dict(c.get("metadata", {}))) for c in nb.cells if c.cell_type == "code"]
    for step in agent_steps(store, cids, subs):
        if not recreated_by(step, cells):
            report.hidden.append(step)


def _out_of_order(nb: Any, report: Report) -> None:
    """Saved execution counts that do not rise top to bottom: the cells ran out of order."""
    last: tuple[int, int] | None = None
    for i, cell in enumerate(nb.cells):
        n = cell.get("execution_count") if cell.cell_type == "code" else None
        if not isinstance(n, int):
            continue
        if last is not None and n < last[1]:
            report.notes.append(
                f"cells ran out of order: cell {i + 1} ran as [{n}], before cell {last[0] + 1} above it ([{last[1]}])"
            )
        last = (i, n) if last is None or n > last[1] else last


def _first(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:100]
