"""Run a dataset of notebook tasks: each case in a fresh kernel, at most `concurrency` at once,
within a total dollar budget, resumable.

pydantic-evals' `Dataset.evaluate` runs the cases (its concurrency limit, progress bar and
evaluators); the task it runs is `run_case` (a fresh kernel per case). Each finished case's
`CaseRun` is read from the store (its conversation's last submission) and written to
`result.json` in the case's folder (`<db folder>/evals/<run>/<case>/`) before its checks run, so a
run started again with the same `run` id (`--run ID`) takes the cases that finished (from there,
or from the store where a crash came before the file) and runs only the others. The checks of a resumed case run
again over its stored answer, namespace and files.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import secrets
import sys
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from flue_nb.evals.errors import EvalError
from flue_nb.evals.kernel_case import NAMESPACE_FILE, CaseRun, KernelSpec, is_object_spec, read_store, run_case
from flue_nb.evals.report import CaseResult, EvalReport
from flue_nb.evals.tasks import NotebookTask, case_id, load_dataset

__all__ = ["DEFAULT_DB", "arun_eval", "run_eval", "run_eval_args"]

DEFAULT_DB = ".flue/evals.sqlite"
RESULT_FILE = "result.json"

T = TypeVar("T")


class NotRun(Exception):
    """A case the run did not start: the budget was spent first."""


@dataclass
class _Budget:
    """The run's dollars: what finished cases spent and what running ones may still spend."""

    limit: float | None
    slots: int
    spent: float = 0.0
    reserved: dict[str, float] = field(default_factory=dict)
    stopped: str | None = None

    def admit(self, case: str) -> float | None:
        """This case's own cap (None: no budget); `NotRun` when nothing is left."""
        if self.stopped:
            raise NotRun(self.stopped)
        if self.limit is None:
            return None
        left = self.limit - self.spent - sum(self.reserved.values())
        if left <= 0:
            self.stopped = f"the budget of ${self.limit:g} is spent (${self.spent:.4f})"
            raise NotRun(self.stopped)
        # What is not reserved is shared among the free slots, so cases running at once cannot
        # together pass the total.
        cap = left / max(1, self.slots - len(self.reserved))
        self.reserved[case] = cap
        return cap

    def settle(self, case: str, cost: float) -> None:
        self.reserved.pop(case, None)
        self.spent += cost


def _run_id() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _resolve_db(db: str | None) -> str:
    from flue_nb.runtime.store.url import is_postgres_url

    db = db or os.environ.get("FLUE_EVAL_DB") or DEFAULT_DB
    return db if is_postgres_url(db) else os.path.abspath(db)


def _check_ref(ref: str, what: str) -> None:
    """Import `module:attribute` here first, so a typo fails before any kernel starts."""
    import importlib

    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise EvalError(f"{what} {ref!r} is not module:attribute")
    try:
        obj = importlib.import_module(module)
    except ImportError as exc:
        raise EvalError(f"{what} {ref}: cannot import {module} ({exc})") from None
    if not hasattr(obj, attr):
        raise EvalError(f"{what} {ref}: {module} has no {attr}")


async def arun_eval(
    dataset: Any,
    *,
    model: str,
    agent: str | None = None,
    format: str | None = None,
    concurrency: int = 1,
    max_cost: float | None = None,
    timeout: float = 600,
    db: str | None = None,
    run: str | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    pythonpath: list[str] | None = None,
    progress: bool = False,
) -> EvalReport:
    """`run_eval` in the caller's event loop."""
    from pydantic_evals import Dataset
    from pydantic_evals.dataset import set_eval_attribute

    paths = [os.getcwd(), *(os.path.abspath(p) for p in pythonpath or [])]
    # The kernels find `module:attribute` names here, and so does this process (a dataset's
    # `python` and `judge` checks are imported as it loads).
    sys.path[:0] = [p for p in paths if p not in sys.path]
    ds = dataset if isinstance(dataset, Dataset) else load_dataset(dataset, format)
    label = str(dataset) if not isinstance(dataset, Dataset) else (ds.name or "dataset")
    if concurrency < 1:
        raise EvalError(f"--concurrency takes a number of cases >= 1, got {concurrency}")
    if max_cost is not None and max_cost <= 0:
        raise EvalError(f"--max-cost takes dollars > 0, got {max_cost}")
    if agent:
        _check_ref(agent, "--agent")
    if is_object_spec(model):
        _check_ref(model, "--model")
    db = _resolve_db(db)
    run_id = run or _run_id()
    if case_id(run_id) != run_id:
        raise EvalError(f"run id {run_id!r}: use letters, digits, '-', '_' and '.'")
    base = Path(runs_dir) if runs_dir else (Path(db).parent if "://" not in db else Path(".flue")) / "evals"
    run_dir = (base / run_id).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = KernelSpec(model=model, db=db, agent=agent, timeout=timeout, pythonpath=paths)
    budget = _Budget(max_cost, concurrency)
    runs: dict[str, CaseRun] = {}
    resumed: set[str] = set()
    # The cases that finished in an earlier attempt of this run count against its budget first.
    for case in ds.cases:
        earlier = _finished(run_dir / case_id(case.name or ""), db, run_id, case.name or "")
        if earlier is not None:
            runs[case.name or ""] = earlier
            resumed.add(case.name or "")
            budget.spent += earlier.cost_usd
    by_input = {id(c.inputs): c.name or "" for c in ds.cases}

    async def task(inputs: NotebookTask) -> str:
        name = by_input[id(inputs)]
        case_dir = run_dir / case_id(name)
        set_eval_attribute("case_dir", str(case_dir))
        if name in resumed:
            return runs[name].answer
        cap = budget.admit(name)
        case_dir.mkdir(parents=True, exist_ok=True)
        attempt_file = case_dir / "attempts"
        attempt = int(attempt_file.read_text()) + 1 if attempt_file.exists() else 1
        attempt_file.write_text(str(attempt))
        conversation = f"eval-{run_id}-{case_id(name)}" + (f"-{attempt}" if attempt > 1 else "")
        case_spec = spec if inputs.timeout is None else KernelSpec(**{**spec.__dict__, "timeout": inputs.timeout})
        result = await run_case(
            case_spec,
            case=name,
            prompt=inputs.prompt,
            case_dir=case_dir,
            conversation=conversation,
            files=inputs.file_pairs(),
            notebook=inputs.notebook_path(),
            max_cost=cap,
        )
        budget.settle(name, result.cost_usd)
        runs[name] = result
        if result.error and result.error.startswith("budget_exceeded"):
            budget.stopped = budget.stopped or f"the budget of ${max_cost:g} ran out during case {name}"
            raise NotRun(result.error)
        _write_atomic(case_dir / RESULT_FILE, json.dumps(result.to_dict(), indent=2))
        return result.answer

    report = await ds.evaluate(task, name=label, max_concurrency=concurrency, progress=progress)
    cases = _results(ds, report, runs, resumed)
    return EvalReport(
        run_id=run_id,
        dataset=label,
        model=model,
        agent=agent,
        db=db,
        cases=cases,
        stopped=budget.stopped,
        max_cost=max_cost,
        pydantic_report=report,
    )


def _checks(rc: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for group in (rc.assertions, rc.scores, rc.labels):
        for name, res in group.items():
            out[name] = {"value": res.value, "reason": res.reason or ""}
    for failure in rc.evaluator_failures:
        out[failure.name] = {"value": False, "reason": f"the check raised: {failure.error_message}"}
    return out


def _verdict(rc: Any, run: CaseRun | None) -> tuple[str, bool, float | None, str]:
    checks = _checks(rc)
    bools = [bool(c["value"]) for n, c in checks.items() if n not in rc.scores and n not in rc.labels]
    score = sum(bools) / len(bools) if bools else None
    failing = [f"{n}: {c['reason']}" for n, c in checks.items() if n not in rc.scores and not c["value"]]
    reason = "; ".join(failing) if failing else "; ".join(c["reason"] for c in checks.values() if c["reason"])
    if run is not None and run.error:
        return "error", False, score, reason
    passed = all(bools)
    return ("passed" if passed else "failed"), passed, score, reason


def _finished(case_dir: Path, db: str, run_id: str, name: str) -> CaseRun | None:
    """The case as an earlier attempt of this run finished it, or None to run it.

    Finished: its `result.json` was written (whatever the outcome: a case that timed out is
    finished too), or the store has its conversation's last submission completed and its
    namespace was saved (a crash between the two loses no finished case).
    """
    stored = case_dir / RESULT_FILE
    if stored.exists():
        return CaseRun.from_dict(json.loads(stored.read_text(encoding="utf-8")))
    attempts = case_dir / "attempts"
    if not attempts.exists() or not (case_dir / NAMESPACE_FILE).exists():
        return None
    attempt = int(attempts.read_text() or "1")
    run = CaseRun(case=name, conversation=f"eval-{run_id}-{case_id(name)}" + (f"-{attempt}" if attempt > 1 else ""))
    read_store(db, run)
    return run if run.outcome == "completed" else None


def _results(ds: Any, report: Any, runs: dict[str, CaseRun], resumed: set[str]) -> list[CaseResult]:
    done = {rc.name: rc for rc in report.cases}
    failures = {f.name: f for f in report.failures}
    out = []
    for case in ds.cases:
        name = case.name or ""
        run = runs.get(name)
        result = CaseResult(id=name, status="not_run", passed=None, prompt=getattr(case.inputs, "prompt", ""))
        if run is not None:
            result.answer, result.error, result.conversation = run.answer, run.error, run.conversation
            result.cost_usd, result.duration, result.tool_calls = run.cost_usd, run.duration, run.tool_calls
            result.input_tokens, result.output_tokens = run.input_tokens, run.output_tokens
        if name in done:
            result.status, result.passed, result.score, result.reason = _verdict(done[name], run)
            result.checks = _checks(done[name])
            result.resumed = name in resumed
        else:
            failure = failures.get(name)
            message = failure.error_message if failure is not None else "not run"
            if message.startswith("NotRun: "):
                result.reason = message.split(": ", 1)[1]  # a budget stop: not run, and why
            else:  # the task itself failed (not the agent: its failures are answers with an error)
                result.status, result.passed, result.error = "error", False, message
        out.append(result)
    return out


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)`, on a thread of its own when this thread already runs a loop (a kernel)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="flue-eval")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def run_eval(dataset: Any, *, model: str, **options: Any) -> EvalReport:
    """Run `dataset` (a pydantic-evals `Dataset` of `NotebookTask` cases, a JSONL file, or a
    DABench folder) against `model` (a provider id or `module:attribute`) and return the report.

    Options: `agent` (`module:function`), `format` (`dabench`/`jsonl`), `concurrency` (cases
    at once, default 1), `max_cost` (total dollars; cases after it is spent are not run),
    `timeout` (seconds per case, default 600), `db` (the store of the cases' conversations,
    default `.flue/evals.sqlite`), `run` (an id: the same id again resumes that run),
    `runs_dir`, `pythonpath`, `progress` (pydantic-evals' progress bar).
    """
    return _run_sync(arun_eval(dataset, model=model, **options))


def run_eval_args(args: Any, *, progress: bool = False) -> EvalReport:
    """`run_eval` with the options `flue-nb eval` and `%flue eval` parse (one argparse namespace)."""
    return run_eval(
        args.dataset,
        model=args.model,
        agent=args.agent,
        format=args.format,
        concurrency=args.concurrency,
        max_cost=args.max_cost,
        timeout=args.timeout,
        db=args.db,
        run=args.run,
        progress=progress,
    )
