"""One eval case in a fresh kernel: files copied into a new working directory, the starting
notebook's cells run, the prompt sent as a `%%flue` cell, and what the agent left behind read back.

The kernel is a real `ipykernel` driven by nbclient, as `flue-nb run` drives one; the agent is
the notebook assistant (`flue.kernel()` sandbox) or the `--agent` under test, and its
conversation goes to the eval's store, where `%flue chat -c ID --db DB` and `flue-nb history`
open it. After the prompt, the kernel pickles its namespace (what pickles) to `namespace.pkl` in
the case's folder, outside the working directory, for the checks over the namespace.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flue_nb.runtime.tempdirs import private_dir, remove

__all__ = ["NAMESPACE_FILE", "CaseRun", "KernelSpec", "read_store", "run_case"]

NAMESPACE_FILE = "namespace.pkl"
WORKDIR = "work"

# Runs in the kernel after the prompt: every public name whose value pickles, by name; the rest
# by type, so a check can say "df is there but did not pickle" rather than "no df".
_COLLECT = """\
def _flue_eval_collect(path):
    import pickle, types
    kept, unpicklable = {}, {}
    skip = {"In", "Out", "exit", "quit", "get_ipython", "open"}
    for name, value in list(get_ipython().user_ns.items()):
        if name.startswith("_") or name in skip or isinstance(value, types.ModuleType):
            continue
        try:
            kept[name] = pickle.dumps(value)
        except Exception:
            unpicklable[name] = type(value).__name__
    with open(path, "wb") as f:
        pickle.dump({"values": kept, "unpicklable": unpicklable}, f)
_flue_eval_collect(PATH)
del _flue_eval_collect
"""


@dataclass
class KernelSpec:
    """How each case's kernel is set up: the model, the agent, the store."""

    model: str
    """A provider id (`anthropic/claude-sonnet-4-6`) or `module:attribute` naming a model object."""
    db: str
    """The store the cases' conversations go to (an absolute SQLite path or a postgresql:// URL)."""
    agent: str | None = None
    """`module:function` naming an `@flue_nb.agent` to evaluate instead of the notebook assistant."""
    timeout: float = 600
    """Seconds a case may take, kernel start to namespace saved."""
    pythonpath: list[str] = field(default_factory=list)
    """Folders put first on the kernel's `sys.path` (where `module:attribute` names are found)."""


@dataclass
class CaseRun:
    """What running one case produced (kept as `result.json` in the case's folder)."""

    case: str
    conversation: str
    answer: str = ""
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    duration: float = 0.0
    submission: str | None = None
    outcome: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As stored in `result.json`."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseRun:
        """Back from `result.json`."""
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def is_object_spec(model: str) -> bool:
    """True when `model` names a Python object (`module:attribute`), not a provider id."""
    from flue_nb.runtime.providers import split_spec

    if "/" in model or ":" not in model:
        return False
    return not split_spec(model)[0]


def _setup_cells(spec: KernelSpec) -> list[str]:
    cells = ["%load_ext flue_nb"]
    if spec.agent:
        module, _, attr = spec.agent.partition(":")
        cells.append(f"from {module} import {attr} as _flue_eval_agent")
    if is_object_spec(spec.model):
        module, _, attr = spec.model.partition(":")
        cells.append(f"from {module} import {attr} as _flue_eval_model")
    return cells


def _flue_cell(spec: KernelSpec, prompt: str, conversation: str, max_cost: float | None) -> str:
    line = ["%%flue", "--no-widget", "-c", conversation, "--db", json.dumps(spec.db)]
    if spec.agent:
        line += ["--agent", "_flue_eval_agent"]
    else:
        line += ["--model", "_flue_eval_model" if is_object_spec(spec.model) else spec.model]
    if max_cost is not None:
        line += ["--max-cost", repr(max_cost)]
    return " ".join(line) + "\n" + prompt


def _copy_inputs(files: list[tuple[Path, str]], workdir: Path) -> None:
    for src, name in files:
        dst = workdir / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copyfile(src, dst)


def _kernel_env(spec: KernelSpec, notebook: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "FLUE_VERIFY_PLAN"}
    env["JPY_SESSION_NAME"] = str(notebook)
    env["FLUE_EVAL_MODEL"] = spec.model
    if spec.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*spec.pythonpath, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _first_line(text: str) -> str:
    import re

    plain = re.sub(r"\x1b\[[0-9;]*m", "", text).strip()
    return (plain.splitlines() or [""])[-1][:300]


async def run_case(
    spec: KernelSpec,
    *,
    case: str,
    prompt: str,
    case_dir: Path,
    conversation: str,
    files: list[tuple[Path, str]] | None = None,
    notebook: Path | None = None,
    max_cost: float | None = None,
) -> CaseRun:
    """Run one case in a fresh kernel whose working directory is `case_dir/work`; return what it did."""
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    started = time.monotonic()
    workdir = case_dir / WORKDIR
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    _copy_inputs(files or [], workdir)
    (case_dir / NAMESPACE_FILE).unlink(missing_ok=True)
    start_cells: list[Any] = []
    nb_path = workdir / "eval.ipynb"
    if notebook is not None:
        nb_path = workdir / notebook.name
        shutil.copyfile(notebook, nb_path)
        start_cells = [c for c in nbformat.read(nb_path, as_version=4).cells if c.cell_type == "code"]
    run = CaseRun(case=case, conversation=conversation)
    cells = [nbformat.v4.new_code_cell(src) for src in _setup_cells(spec)]
    n_setup = len(cells)
    cells += [nbformat.v4.new_code_cell(c.source) for c in start_cells]
    cells.append(nbformat.v4.new_code_cell(_flue_cell(spec, prompt, conversation, max_cost)))
    flue_index = len(cells) - 1
    cells.append(nbformat.v4.new_code_cell(_COLLECT.replace("PATH", repr(str(case_dir / NAMESPACE_FILE)))))
    nb = nbformat.v4.new_notebook(cells=cells)
    try:
        await asyncio.wait_for(_execute(nb, spec, workdir, nb_path, n_setup, flue_index, run), spec.timeout)
    except (asyncio.TimeoutError, CellTimeoutError):
        run.error = f"timeout: the case took longer than {spec.timeout:g} s"
    except (CellExecutionError, DeadKernelError) as exc:
        # The timeout's cancellation stops the kernel's run: the %%flue cell can end with its
        # abort ("aborted by the user") or nbclient's liveness check report the kernel's death
        # before the cancellation arrives, and wait_for then raises that. Past the deadline it
        # is the timeout.
        if time.monotonic() - started >= spec.timeout:
            run.error = f"timeout: the case took longer than {spec.timeout:g} s"
        elif isinstance(exc, CellExecutionError):
            run.error = _first_line(str(exc))
        else:
            raise
    run.duration = time.monotonic() - started
    read_store(spec.db, run)
    return run


async def _execute(
    nb: Any, spec: KernelSpec, workdir: Path, nb_path: Path, n_setup: int, flue_index: int, run: CaseRun
) -> None:
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    # As `flue-nb run`: this interpreter's kernel, its channels on Unix sockets in a private folder.
    sockets = private_dir("flue-eval-kernel-")
    km = AsyncKernelManager(
        kernel_name="python3",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[]),
        transport="ipc",
        ip=os.path.join(sockets, "k"),
    )
    client = NotebookClient(
        nb, timeout=int(spec.timeout) + 1, km=km, shutdown_kernel="immediate", kernel_name="python3"
    )
    client.reset_execution_trackers()
    try:
        async with client.async_setup_kernel(env=_kernel_env(spec, nb_path), cwd=str(workdir), cleanup_kc=True):
            for index, cell in enumerate(nb.cells):
                try:
                    await client.async_execute_cell(cell, index)
                except CellExecutionError as exc:
                    if index < n_setup:
                        raise
                    where = "the prompt" if index == flue_index else f"starting notebook cell {index - n_setup + 1}"
                    if index > flue_index:
                        where = "saving the namespace"
                    run.error = run.error or f"{where} failed: {_first_line(str(exc))}"
                    if index < flue_index:
                        break  # the prompt was never sent: nothing for the agent to do
    finally:
        remove(sockets)


def read_store(db: str, run: CaseRun) -> None:
    """The answer, outcome, tokens, dollars and tool calls of the case's conversation."""
    from flue_nb.runtime.errors import FlueError
    from flue_nb.runtime.messages import AssistantMessage, ToolCall
    from flue_nb.runtime.session import StoredConversation
    from flue_nb.runtime.store.url import is_postgres_url, open_any

    if not is_postgres_url(db) and not os.path.exists(db):
        return
    try:
        store = open_any(db, cwd=os.getcwd())
    except FlueError:
        return
    try:
        conv = StoredConversation(store, run.conversation)
        subs = conv.submissions()
        if not subs:
            return
        last = subs[-1]
        run.submission = last.id
        run.outcome = last.outcome.value if last.outcome else last.state.value
        run.answer = last.result or ""
        # The submission's own error says more than the cell's, except after the case's timeout:
        # stopping the kernel then aborts the submission ("aborted by the user"), which the
        # store records or not depending on how far the kernel got.
        if last.error and not (run.error or "").startswith("timeout:"):
            run.error = f"{last.error.get('type', 'error')}: {last.error.get('message', '')}"
        status = conv.status()
        run.input_tokens = status.usage.input_tokens + status.usage.cache_read_tokens + status.usage.cache_write_tokens
        run.output_tokens = status.usage.output_tokens
        run.cost_usd = status.cost_usd or 0.0
        run.tool_calls = sum(
            isinstance(part, ToolCall) for m in conv.history() if isinstance(m, AssistantMessage) for part in m.parts
        )
    finally:
        store.close()
