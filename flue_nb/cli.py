"""`flue-nb`: run notebooks of `%%flue` cells headless, and the offline quickstart demo.

`flue-nb run NOTEBOOK` executes a notebook with nbclient and exits non-zero when a cell fails;
a `%flue` cell fails when its submission does, so CI fails loudly. `flue-nb demo` (what
`make demo` runs) executes notebooks/quickstart.ipynb offline and prints its transcript.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "run_notebook", "transcript", "unsettled"]

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
    and the error of the first failing cell (None when every cell ran)."""
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
    km = AsyncKernelManager(
        kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[])
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
        # `quiet` drops the kernel's own log lines (transport warnings, shutdown notices).
        client.execute(env=env, **({"stderr": subprocess.DEVNULL} if quiet else {}))
    except CellExecutionError as exc:
        error = exc
    out = Path(output) if output is not None else src.with_name(f"{src.stem}.executed.ipynb")
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
    nb, out, error = run_notebook(
        args.notebook, output=args.output, timeout=args.timeout, offline=args.offline
    )
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
        print(
            f"flue-nb demo: {notebook} not found (run it from a flue_nb checkout)", file=sys.stderr
        )
        return 2
    output = Path(args.output) if args.output else Path.cwd() / "build" / "demo" / notebook.name
    print(f"flue-nb demo: running {notebook} offline (offline demo model, no API key used)\n")
    nb, out, error = run_notebook(
        notebook, output=output, timeout=args.timeout, offline=True, quiet=True
    )
    print(transcript(nb))
    print(f"flue-nb demo: executed notebook written to {out}")
    if error is not None:
        print(f"flue-nb demo: FAILED:\n{error}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `flue-nb` command."""
    parser = argparse.ArgumentParser(prog="flue-nb", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="execute a notebook headless; exit 1 if a cell (or a %%flue submission) fails"
    )
    run.add_argument("notebook")
    run.add_argument(
        "-o", "--output", help="where to write the executed notebook (default: NAME.executed.ipynb)"
    )
    run.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    run.add_argument(
        "--offline",
        action="store_true",
        help="hide ANTHROPIC_API_KEY and FLUE_MODEL from the kernel",
    )
    run.add_argument(
        "--transcript", action="store_true", help="print every cell's source and output"
    )
    run.set_defaults(fn=_cmd_run)
    demo = sub.add_parser(
        "demo", help="run notebooks/quickstart.ipynb offline and print its transcript"
    )
    demo.add_argument("notebook", nargs="?", help=argparse.SUPPRESS)
    demo.add_argument(
        "-o", "--output", help="where to write the executed notebook (default: build/demo/)"
    )
    demo.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    demo.set_defaults(fn=_cmd_demo)
    args = parser.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
