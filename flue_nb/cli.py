"""`flue-nb`: run notebooks of `%%flue` cells headless, the offline demo, and a store's history.

`flue-nb run NOTEBOOK` executes a notebook with nbclient and exits non-zero when a cell fails;
a `%flue` cell fails when its submission does, so CI fails loudly. `flue-nb demo` (what
`make demo` runs) executes notebooks/quickstart.ipynb offline and prints its transcript.
`flue-nb history [--db PATH] [CONVERSATION] [--last N]` prints what a store holds, without a notebook.
`flue-nb verify NOTEBOOK` reruns a saved notebook in a fresh kernel, `%%flue` cells replaying
their stored answers, and exits 0 only when it reproduces. `flue-nb eval DATASET --model MODEL`
runs a dataset of notebook tasks (flue_nb.evals) and exits 1 below `--min-score`.
`flue-nb kernel install --sandboxed` installs a kernelspec whose kernel runs under bubblewrap.

Every error is one line on stderr and a non-zero exit, never a traceback (`FLUE_DEBUG=1` shows
the traceback of an unexpected one).
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flue_nb.runtime.store import ConversationSummary

__all__ = ["CliError", "history", "main", "read_notebook", "run_notebook", "transcript", "unsettled", "verify"]


class CliError(Exception):
    """A failure the command reports as one line (after `flue-nb COMMAND: `)."""


def read_notebook(path: str | os.PathLike[str]) -> Any:
    """The notebook at `path` (nbformat v4), or `CliError` saying in one line why it is not one."""
    import json

    import nbformat

    name = os.fspath(path)
    src = Path(path)
    if not src.exists():
        raise CliError(f"{name}: no such file")
    if src.is_dir():
        raise CliError(f"{name}: is a directory, not a notebook")
    try:
        raw = src.read_bytes()
    except OSError as exc:
        raise CliError(f"{name}: cannot be read: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise CliError(f"{name}: not JSON (not even UTF-8 text), so not a notebook") from None
    except ValueError as exc:
        raise CliError(f"{name}: not JSON ({exc}), so not a notebook") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells", []), list):
        raise CliError(f"{name}: not a notebook (an .ipynb is a JSON object with a list of cells)")
    try:
        return nbformat.reads(raw.decode("utf-8"), as_version=4)
    except Exception as exc:  # noqa: BLE001 - nbformat raises many kinds for as many defects
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CliError(f"{name}: not a notebook nbformat can read ({why})") from None


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

    from flue_nb.runtime.tempdirs import private_dir, remove

    nb = read_notebook(path)
    src = Path(path).resolve()
    # A notebook run from a cell of a verify rerun is not part of that rerun's replay.
    env = {k: v for k, v in os.environ.items() if k != "FLUE_VERIFY_PLAN"}
    # The notebook's path names its default conversation, as JupyterLab's kernels see it.
    env["JPY_SESSION_NAME"] = str(src)
    if offline:
        for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "FLUE_MODEL"):
            env.pop(var, None)
    # This interpreter's kernel (it has flue_nb), whatever `python3` kernelspec $HOME may hold.
    # Its channels are Unix sockets in a private directory: over TCP without CurveZMQ keys the
    # kernel warns that it is "running over TCP without encryption" into every run's output.
    sockets = private_dir("flue-nb-kernel-")
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
        remove(sockets)
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


def verify(path: str, *, db: str | None = None, timeout: int = 120, total_timeout: float = 600) -> Any:
    """Rerun the saved notebook at `path` in a fresh kernel and return its `Report` (`%%flue`
    cells replay their stored answers; `db`: the store of its conversations, default `$FLUE_DB`,
    else the notebook folder's `.flue/flue.sqlite` when there is one)."""
    from flue_nb.notebook.verify.rerun import rerun
    from flue_nb.runtime.errors import StoreError
    from flue_nb.runtime.store.url import db_from_env, is_postgres_url, open_any

    nb = read_notebook(path)
    db = db_from_env(db)
    if db is None:
        beside = Path(path).resolve().parent / ".flue" / "flue.sqlite"
        db = str(beside) if beside.exists() else None
    elif not is_postgres_url(db) and not os.path.exists(db):
        raise CliError(f"no store at {os.path.abspath(db)} (pass --db PATH, or leave it out to verify without one)")
    store = None
    if db is not None:
        try:
            store = open_any(db, cwd=os.getcwd())
        except StoreError as exc:
            raise CliError(exc.message) from None
    try:
        return rerun(nb, path, store=store, timeout=timeout, total_timeout=total_timeout)
    finally:
        if store is not None:
            store.close()


def _cmd_verify(args: argparse.Namespace) -> int:
    import json

    report = verify(args.notebook, db=args.db, timeout=args.timeout, total_timeout=args.total_timeout)
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict()), encoding="utf-8")
    else:
        print(report.text())
    return 0 if report.reproduces else 1


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


def _cmd_eval(args: argparse.Namespace) -> int:
    from flue_nb.evals.errors import EvalError
    from flue_nb.evals.runner import run_eval_args

    try:
        report = run_eval_args(args, progress=not args.no_progress and sys.stderr.isatty())
    except EvalError as exc:
        raise CliError(str(exc)) from None
    print(report.table())
    print(f"\nrun {report.run_id} (again with --run {report.run_id} to resume it); conversations in {report.db}")
    if args.out:
        Path(args.out).write_text(report.to_json(), encoding="utf-8")
        print(f"report written to {args.out}")
    if args.min_score is not None and report.score < args.min_score:
        print(f"flue-nb eval: score {report.score:.2f} is below --min-score {args.min_score:g}", file=sys.stderr)
        return 1
    return 0


def _eval_parser(sub: Any) -> None:
    ev = sub.add_parser(
        "eval",
        help="run a dataset of notebook tasks against a model (each case in a fresh kernel); exit 1 below --min-score",
    )
    ev.add_argument(
        "dataset", help="a JSONL file of cases, or a DABench folder (questions.jsonl, labels.jsonl, tables/)"
    )
    ev.add_argument(
        "--model",
        required=True,
        help="a provider id (anthropic/claude-sonnet-4-6, openai/gpt-5, ...) or module:attribute naming a model "
        "object (a ScriptedModel or FunctionModel for offline runs)",
    )
    ev.add_argument("--agent", metavar="MODULE:FUNCTION", help="an @flue_nb.agent to evaluate instead of the assistant")
    ev.add_argument(
        "--format", choices=["dabench", "jsonl"], help="the dataset's format (default: a folder is dabench)"
    )
    ev.add_argument("--concurrency", type=int, default=1, metavar="N", help="cases at once (default 1)")
    ev.add_argument(
        "--max-cost", type=float, metavar="USD", help="total dollars; cases left when it is spent are not run"
    )
    ev.add_argument(
        "--min-score", type=float, metavar="X", help="exit 1 when the score (cases passed / cases) is below X"
    )
    ev.add_argument("--out", metavar="PATH", help="write the JSON report here")
    ev.add_argument("--timeout", type=float, default=600, help="seconds per case (default 600)")
    ev.add_argument("--db", metavar="PATH", help="the store of the cases' conversations (default .flue/evals.sqlite)")
    ev.add_argument("--run", metavar="ID", help="name the run; the same ID again resumes it (finished cases are kept)")
    ev.add_argument("--no-progress", action="store_true", help="no progress bar")
    ev.set_defaults(fn=_cmd_eval)


def history(db: str | None, conversation: str | None, *, last: int | None = None) -> str:
    """What a store holds, as text: its conversations (or one conversation's submissions, each
    with its outcome, and then the conversation itself)."""
    from flue_nb.runtime.errors import StoreError
    from flue_nb.runtime.store.url import db_from_env, is_postgres_url, mask_url, open_any

    db = db_from_env(db)
    label = mask_url(db) if is_postgres_url(db) else os.path.abspath(db or ".flue/flue.sqlite")
    if not is_postgres_url(db) and not os.path.exists(label):
        raise CliError(f"no store at {label} (pass --db PATH)")
    if conversation is not None:
        try:
            conversation.encode("utf-8")
        except UnicodeEncodeError:  # bytes from argv that are not UTF-8 (surrogate-escaped)
            shown = os.fsencode(conversation).decode("utf-8", "backslashreplace")
            raise CliError(f"conversation id {shown!r} is not UTF-8 text, so no store holds it") from None
    try:
        store = open_any(db, cwd=os.getcwd())
    except StoreError as exc:  # a directory, not SQLite, read-only: the store's own words
        raise CliError(exc.message) from None
    try:
        return _history(store, label, conversation, last)
    except StoreError as exc:  # a damaged page found while reading
        raise CliError(exc.message) from None
    finally:
        store.close()


def _history(store: Any, label: str, conversation: str | None, last: int | None = None) -> str:
    """`history` on an open store: the newest `last` submissions (default `HISTORY_LAST`, 0: all)."""
    if conversation is None:
        return _conversations(store.conversations(), label)
    from flue_nb.notebook.magics.commands import HISTORY_LAST, history_with_outcomes
    from flue_nb.notebook.views.history import earlier_note

    last = HISTORY_LAST if last is None else last
    subs = store.submissions(conversation, last=last or None)
    if not subs:
        raise CliError(f"no conversation {conversation!r} in {label}")
    left_out = store.count_submissions(conversation, before_seq=subs[0].seq) if last else 0
    how = f"`flue-nb history {conversation} --last {last + left_out}` shows them all"
    lines = [f"conversation {conversation} in {label}", ""]
    if left_out:
        lines += [earlier_note(left_out, how), ""]
    for n, sub in enumerate(subs, left_out + 1):
        how_ended = sub.outcome.value if sub.outcome else sub.state.value
        if sub.joined_into:
            how_ended += f" (joined {sub.joined_into})"
        elif sub.error:
            how_ended += f": {sub.error.get('message', '')}"
        first = sub.text.strip().splitlines()[0] if sub.text.strip() else ""
        lines.append(f"{n:>3}. {_when(sub.accepted_at)}  {sub.id}  {how_ended}")
        lines.append(f"     {first[:100]}{'…' if len(first) > 100 else ''}")
    from flue_nb.runtime.session import StoredConversation

    stored = StoredConversation(store, conversation)
    lines += ["", history_with_outcomes(stored, embed=False, last=last, how=how).plain]
    return "\n".join(lines)


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
    print(history(args.db, args.conversation, last=args.last))
    return 0


def _cmd_acp(args: argparse.Namespace) -> int:
    try:
        from flue_nb.acp.agent import default_agent, load_object, serve
    except ImportError as exc:
        raise CliError(f"needs the ACP package: pip install 'flue_nb[acp]' ({exc})") from None
    from flue_nb.runtime.errors import ConfigError

    if args.cwd is not None and not os.path.isdir(args.cwd):
        raise CliError(f"--cwd {args.cwd}: not a directory")
    target = kernel_agents = None
    if args.kernel is not None or args.notebook is not None:
        from flue_nb.acp.kernel import KernelTarget, kernel_agent

        attached = "--kernel" if args.kernel is not None else "--notebook"
        if args.agent is not None:
            raise CliError(f"--agent runs its own tools, not the kernel's: it cannot be combined with {attached}")
        if args.db is not None:
            raise CliError(f"--db: with {attached} the conversation lives in the kernel's own store")
        if args.kernel is not None and not os.path.isfile(args.kernel):
            raise CliError(f"--kernel {args.kernel}: no such connection file")
        if args.notebook is not None and not os.path.isfile(args.notebook):
            raise CliError(f"--notebook {args.notebook}: no such notebook")
        target = KernelTarget(connection_file=args.kernel, notebook=args.notebook)
    try:
        if target is not None:
            make = kernel_agent(_acp_model(args.model), target)
        elif args.agent is not None:
            # An @flue_nb.agent used as it is: its `flue.kernel(approval="ask")` tools ask the
            # client through the host approver `serve` installs.
            found = load_object(args.agent)
            make = lambda cwd, approver, mcp: found  # noqa: E731
        else:
            from flue_nb.acp.kernel import kernel_agent

            model = _acp_model(args.model)
            make = default_agent(model)
            # A session may name its kernel (`_meta`, as jupyter-ai's flue_nb persona does).
            kernel_agents = lambda target: kernel_agent(model, target)  # noqa: E731
    except (ConfigError, ImportError, AttributeError) as exc:
        raise CliError(str(exc)) from None
    cwd = os.path.abspath(args.cwd) if args.cwd else None
    serve(make, db=args.db, cwd=cwd, kernel=target, kernel_agents=kernel_agents)
    return 0


def _acp_model(setting: str | None) -> Any:
    """`--model`: a provider id (default `$FLUE_MODEL`, else Anthropic's with its key) or a
    `module:attribute` naming a Model object."""
    from flue_nb.acp.agent import load_object
    from flue_nb.notebook.kernel.assistant import resolve_spec
    from flue_nb.runtime.errors import ModelNotConfiguredError

    setting = setting or os.environ.get("FLUE_MODEL", "")
    if ":" in setting and "/" not in setting.split(":", 1)[0]:
        return load_object(setting)
    try:
        return resolve_spec(setting, {})
    except ModelNotConfiguredError:  # its help speaks of notebooks; say it for this command
        raise CliError(
            "no model: pass --model (a provider id such as anthropic/claude-sonnet-4-6, or module:attribute "
            "naming a model), or set FLUE_MODEL or ANTHROPIC_API_KEY"
        ) from None


def _cmd_kernel(args: argparse.Namespace) -> int:
    if not args.sandboxed:
        raise CliError(
            "only the sandboxed kernel is installed by flue-nb: add --sandboxed (a plain kernel of this "
            "Python is `python -m ipykernel install --user`)"
        )
    from flue_nb.notebook.kernel.contained import install

    where = install(
        name=args.name,
        display_name=args.display_name,
        user=not args.sys_prefix,
        prefix=sys.prefix if args.sys_prefix else args.prefix,
        workspace=args.workspace,
        allow_hosts=args.allow_host,
        hide_paths=args.hide,
        keep_env=args.keep_env,
    )
    print(f"Installed kernelspec {args.name} in {where}")
    print(
        "Its kernel runs under bubblewrap: writes only in its working directory"
        + (f" ({args.workspace})" if args.workspace else " (the notebook's folder)")
        + ", secrets hidden, network only to the model provider's host"
        + (f" and {', '.join(args.allow_host)}" if args.allow_host else "")
        + " through a filtering proxy."
    )
    return 0


def _kernel_parser(sub: Any) -> None:
    from flue_nb.notebook.kernel.contained import KERNEL_NAME

    kernel = sub.add_parser("kernel", help="install a Jupyter kernel that runs under the sandbox (--sandboxed)")
    ksub = kernel.add_subparsers(dest="kernel_command", required=True)
    ins = ksub.add_parser(
        "install",
        help="install the kernelspec of a kernel that runs under bubblewrap, as `bash` does",
        description="Install a kernelspec whose kernel runs under bubblewrap: the workspace writable, the "
        "rest read-only, ~/.ssh, ~/.aws and the other secret places hidden, its own /tmp and /proc, and "
        "network only through a filtering proxy to the model provider's host and the --allow-host hosts. Refused "
        "where bubblewrap is missing.",
    )
    ins.add_argument("--sandboxed", action="store_true", help="the kernel runs under bubblewrap (required)")
    ins.add_argument("--name", default=KERNEL_NAME, help=f"the kernelspec's name (default {KERNEL_NAME})")
    ins.add_argument("--display-name", default="Python 3 (flue sandbox)", help="the name the launcher shows")
    where = ins.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="in your Jupyter data dir (the default)")
    where.add_argument("--sys-prefix", action="store_true", help="in this Python environment's prefix")
    where.add_argument("--prefix", metavar="PREFIX", help="under PREFIX/share/jupyter/kernels")
    ins.add_argument(
        "--workspace",
        metavar="DIR",
        help="the writable directory (default: the kernel's working directory, the notebook's folder)",
    )
    ins.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST",
        help="a host the kernel may reach besides the model provider's ('pypi.org', '*.example.com', "
        "'api.example.com:443'); repeat for more",
    )
    ins.add_argument(
        "--hide", action="append", default=[], metavar="PATH", help="a place hidden besides the standard ones"
    )
    ins.add_argument(
        "--keep-env",
        action="append",
        default=[],
        metavar="NAME",
        help="a secret-looking environment variable the kernel keeps (model keys are kept; others are dropped)",
    )
    ins.set_defaults(fn=_cmd_kernel)


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
    ver = sub.add_parser(
        "verify",
        help="rerun a saved notebook in a fresh kernel (%%flue cells replay their stored answers); exit 0 only "
        "when it reproduces",
    )
    ver.add_argument("notebook")
    ver.add_argument("--db", metavar="PATH", help="the store of its conversations (default: $FLUE_DB, else the "
                     "notebook folder's .flue/flue.sqlite)")  # fmt: skip
    ver.add_argument("--timeout", type=int, default=120, help="seconds per cell (default 120)")
    ver.add_argument("--total-timeout", type=float, default=600, help="seconds in all (default 600)")
    ver.add_argument("--json", metavar="PATH", help=argparse.SUPPRESS)  # how %flue verify reads the report
    ver.set_defaults(fn=_cmd_verify)
    _eval_parser(sub)
    hist = sub.add_parser("history", help="print a store's conversations, or one conversation's submissions")
    hist.add_argument(
        "--db",
        metavar="PATH",
        help="the store: an SQLite file or a postgresql:// URL (default: $FLUE_DB, else .flue/flue.sqlite)",
    )
    hist.add_argument("conversation", nargs="?", metavar="CONVERSATION", help="the conversation to show")
    hist.add_argument(
        "--last",
        type=int,
        metavar="N",
        help="show the conversation's last N submissions (default 20; 0 shows them all)",
    )
    hist.set_defaults(fn=_cmd_history)
    acp = sub.add_parser("acp", help="serve flue_nb as an ACP agent on stdin/stdout (for Zed, jupyter-ai, ...)")
    acp.add_argument("--model", metavar="M", help="provider id (default $FLUE_MODEL) or module:attribute of a Model")
    acp.add_argument(
        "--agent", metavar="MODULE:FUNCTION", help="an @flue_nb.agent to run instead of the default assistant"
    )
    where = acp.add_mutually_exclusive_group()
    where.add_argument(
        "--kernel",
        metavar="CONNECTION_FILE",
        help="work in this running kernel: its tools, the conversation its %%flue cells continue, its store",
    )
    where.add_argument(
        "--notebook",
        metavar="PATH",
        help="work in the kernel a Jupyter server runs for this notebook (found through its sessions API)",
    )
    where.add_argument("--cwd", metavar="DIR", help="work in DIR whatever directory the client names")
    acp.add_argument("--db", metavar="DB", help="the store (default: $FLUE_DB, else the session directory's "
                     ".flue/flue.sqlite)")  # fmt: skip
    acp.set_defaults(fn=_cmd_acp)
    _kernel_parser(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args))
    except CliError as exc:
        print(f"flue-nb {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"flue-nb {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from flue_nb.runtime.errors import FlueError

        if os.environ.get("FLUE_DEBUG"):
            raise
        if isinstance(exc, FlueError):
            print(f"flue-nb {args.command}: {exc.message}", file=sys.stderr)
        else:
            why = (str(exc).strip().splitlines() or [""])[0]
            print(
                f"flue-nb {args.command}: failed ({type(exc).__name__}{': ' + why if why else ''}); "
                "FLUE_DEBUG=1 shows where",
                file=sys.stderr,
            )
        return 1


if __name__ == "__main__":
    sys.exit(main())
