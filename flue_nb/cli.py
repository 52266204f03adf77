"""`flue-nb`: run notebooks of `%%flue` cells headless, the offline demo, and a store's history.

`flue-nb run NOTEBOOK` executes a notebook with nbclient and exits non-zero when a cell fails;
a `%flue` cell fails when its submission does, so CI fails loudly. `flue-nb demo` (what
`make demo` runs) executes notebooks/quickstart.ipynb offline and prints its transcript.
`flue-nb history [--db PATH] [CONVERSATION]` prints what a store holds, without a notebook.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flue_nb.runtime.store import ConversationSummary

__all__ = ["history", "main", "run_notebook", "transcript", "unsettled"]

_REPO_NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def run_notebook(
    path: str | os.PathLike[str],
    *,
    output: str | os.PathLike[str] | None = None,
    timeout: int = 600,
    offline: bool = False,
    quiet: bool = False,
) -> tuple[Any, Path, BaseException | None]:
    """Execute a notebook in a fresh kernel (cwd: its folder); return it, where it was written,
    and the error of the first failing cell (None when every cell ran).

    The executed copy goes to `output`, else to a new temporary directory (never next to the
    source, where it would litter a checkout)."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    src = Path(path).resolve()
    nb = nbformat.read(src, as_version=4)
    env = dict(os.environ)
    # The notebook's path names its default conversation, as JupyterLab's kernels see it.
    env["JPY_SESSION_NAME"] = str(src)
    if offline:
        for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "FLUE_MODEL"):
            env.pop(var, None)
    # This interpreter's kernel (it has flue_nb), whatever `python3` kernelspec $HOME may hold.
    # Its channels are Unix sockets in a private directory: over TCP without CurveZMQ keys the
    # kernel warns that it is "running over TCP without encryption" into every run's output.
    sockets = tempfile.mkdtemp(prefix="flue-nb-kernel-")
    km = AsyncKernelManager(
        kernel_name="python3",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[]),
        transport="ipc",
        ip=os.path.join(sockets, "k"),
    )
    client = NotebookClient(
        nb,
        timeout=timeout,
        km=km,
        shutdown_kernel="immediate",
        kernel_name="python3",
        resources={"metadata": {"path": str(src.parent)}},
    )
    error: BaseException | None = None
    try:
        # `quiet` drops the kernel's own log lines. cleanup_kc: nbclient leaves a kernel it was
        # handed running, which then outlives us and logs "Parent appears to have exited".
        client.execute(env=env, cleanup_kc=True, **({"stderr": subprocess.DEVNULL} if quiet else {}))
    except CellExecutionError as exc:
        error = exc
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    if output is not None:
        out = Path(output)
    else:
        out = Path(tempfile.mkdtemp(prefix="flue-nb-run-")) / f"{src.stem}.executed.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return nb, out, error


def unsettled(nb: Any) -> list[str]:
    """`%flue` outputs that did not complete: a `--background` cell's failure (or a run still
    going when the notebook ended) leaves no cell error, so it is read from the provenance."""
    problems = []
    for n, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            status = out.get("metadata", {}).get("flue", {}).get("status")
            if status not in (None, "completed"):
                problems.append(f"cell {n}: submission {status}")
    return problems


def transcript(nb: Any) -> str:
    """The executed notebook as text: each code cell's source, then what it showed."""
    lines: list[str] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        lines.append(f"In [{cell.get('execution_count') or ' '}]:")
        lines.extend(f"    {ln}" for ln in cell.source.splitlines())
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                text = out.text
            elif out.output_type == "error":
                text = "\n".join(out.get("traceback") or [f"{out.ename}: {out.evalue}"])
            else:
                text = out.get("data", {}).get("text/plain", "")
            if text.strip():
                lines.append(text.rstrip("\n"))
        lines.append("")
    return "\n".join(lines)


def _cmd_run(args: argparse.Namespace) -> int:
    nb, out, error = run_notebook(args.notebook, output=args.output, timeout=args.timeout, offline=args.offline)
    if args.transcript:
        print(transcript(nb))
    print(f"flue-nb: executed notebook written to {out}")
    if error is not None:
        print(f"flue-nb: FAILED: {args.notebook}: a cell failed:\n{error}", file=sys.stderr)
        return 1
    problems = unsettled(nb)
    if problems:
        print(f"flue-nb: FAILED: {args.notebook}: " + "; ".join(problems), file=sys.stderr)
        return 1
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    notebook = Path(args.notebook) if args.notebook else _REPO_NOTEBOOKS / "quickstart.ipynb"
    if not notebook.exists():
        print(f"flue-nb demo: {notebook} not found (run it from a flue_nb checkout)", file=sys.stderr)
        return 2
    output = Path(args.output) if args.output else Path.cwd() / "build" / "demo" / notebook.name
    print(f"flue-nb demo: running {notebook} offline (offline demo model, no API key used)\n")
    nb, out, error = run_notebook(notebook, output=output, timeout=args.timeout, offline=True, quiet=True)
    print(transcript(nb))
    print(f"flue-nb demo: executed notebook written to {out}")
    if error is not None:
        print(f"flue-nb demo: FAILED:\n{error}", file=sys.stderr)
        return 1
    return 0


def history(db: str | None, conversation: str | None) -> str:
    """What a store holds, as text: its conversations (or one conversation's submissions, each
    with its outcome, and then the conversation itself)."""
    from flue_nb.runtime.errors import StoreError
    from flue_nb.runtime.store.url import db_from_env, is_postgres_url, mask_url, open_any

    db = db_from_env(db)
    label = mask_url(db) if is_postgres_url(db) else os.path.abspath(db or ".flue/flue.sqlite")
    if not is_postgres_url(db) and not os.path.exists(label):
        raise SystemExit(f"flue-nb history: no store at {label} (pass --db PATH)")
    try:
        store = open_any(db, cwd=os.getcwd())
    except StoreError as exc:  # a directory, not SQLite, read-only: the store's own words
        raise SystemExit(f"flue-nb history: {exc.message}") from None
    try:
        if conversation is None:
            return _conversations(store.conversations(), label)
        subs = store.submissions(conversation)
        if not subs:
            raise SystemExit(f"flue-nb history: no conversation {conversation!r} in {label}")
        from flue_nb.notebook.magics._commands import history_with_outcomes

        lines = [f"conversation {conversation} in {label}", ""]
        for n, sub in enumerate(subs, 1):
            how = sub.outcome.value if sub.outcome else sub.state.value
            if sub.joined_into:
                how += f" (joined {sub.joined_into})"
            elif sub.error:
                how += f": {sub.error.get('message', '')}"
            first = sub.text.strip().splitlines()[0] if sub.text.strip() else ""
            lines.append(f"{n:>3}. {_when(sub.accepted_at)}  {sub.id}  {how}")
            lines.append(f"     {first[:100]}{'…' if len(first) > 100 else ''}")
        from flue_nb.runtime.session import StoredConversation

        lines += ["", history_with_outcomes(StoredConversation(store, conversation), embed=False).plain]
        return "\n".join(lines)
    finally:
        store.close()


def _when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _conversations(rows: list[ConversationSummary], label: str) -> str:
    if not rows:
        return f"no conversations in {label}"
    lines = [f"conversations in {label}:", ""]
    for c in rows:
        parts = [
            f"{n} {what}"
            for n, what in (
                (c.completed, "completed"),
                (c.failed, "failed"),
                (c.aborted, "aborted"),
                (c.unsettled, "unsettled"),
            )
            if n
        ]
        lines.append(
            f"  {c.id}  (since {_when(c.created_at)}; {c.submissions} submission(s)"
            + (f": {', '.join(parts)}" if parts else "")
            + ")"
        )
    lines += ["", "flue-nb history CONVERSATION shows one of them."]
    return "\n".join(lines)


def _cmd_history(args: argparse.Namespace) -> int:
    print(history(args.db, args.conversation))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `flue-nb` command."""
    parser = argparse.ArgumentParser(prog="flue-nb", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute a notebook headless; exit 1 if a cell (or a %%flue submission) fails")
    run.add_argument("notebook")
    run.add_argument(
        "-o",
        "--output",
        help="where to write the executed notebook (default: a new temporary directory; the path is printed)",
    )
    run.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    run.add_argument(
        "--offline",
        action="store_true",
        help="hide ANTHROPIC_API_KEY and FLUE_MODEL from the kernel",
    )
    run.add_argument("--transcript", action="store_true", help="print every cell's source and output")
    run.set_defaults(fn=_cmd_run)
    demo = sub.add_parser("demo", help="run notebooks/quickstart.ipynb offline and print its transcript")
    demo.add_argument("notebook", nargs="?", help=argparse.SUPPRESS)
    demo.add_argument("-o", "--output", help="where to write the executed notebook (default: build/demo/)")
    demo.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    demo.set_defaults(fn=_cmd_demo)
    hist = sub.add_parser("history", help="print a store's conversations, or one conversation's submissions")
    hist.add_argument(
        "--db",
        metavar="PATH",
        help="the store: an SQLite file or a postgresql:// URL (default: $FLUE_DB, else .flue/flue.sqlite)",
    )
    hist.add_argument("conversation", nargs="?", metavar="CONVERSATION", help="the conversation to show")
    hist.set_defaults(fn=_cmd_history)
    args = parser.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
