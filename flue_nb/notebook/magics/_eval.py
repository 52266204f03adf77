"""`%flue eval DATASET --model MODEL [...]` and `%flue eval show CASE`: the line magic's side of
`flue_nb.evals` (the same run as `flue-nb eval`, its table in the cell and a drill-down per case)."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from flue_nb.notebook.magics._line import FlueCellError

if TYPE_CHECKING:
    from flue_nb.notebook.magics.flue import FlueMagics

__all__ = ["eval_command"]

USAGE = (
    "%flue eval DATASET --model MODEL [--agent MODULE:FUNCTION] [--format dabench|jsonl] [--concurrency N] "
    "[--max-cost USD] [--min-score X] [--out PATH] [--timeout S] [--db PATH] [--run ID]; %flue eval show CASE"
)
HANDLE = "_flue_eval"
"""The namespace name of the last report (`_flue_eval.details("ID")`, `_flue_eval.to_dict()`)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # a usage line in the cell, never SystemExit
        raise UsageError(f"{message}\nusage: {USAGE}")


def _parse(line: str) -> argparse.Namespace:
    p = _Parser(prog="%flue eval", usage=USAGE, add_help=False)
    p.add_argument("dataset")
    p.add_argument("--model", required=True)
    p.add_argument("--agent")
    p.add_argument("--format", choices=["dabench", "jsonl"])
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--max-cost", type=float)
    p.add_argument("--min-score", type=float)
    p.add_argument("--out")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--db")
    p.add_argument("--run")
    try:
        return p.parse_args(shlex.split(line))
    except ValueError as exc:
        raise UsageError(f"{exc}\nusage: {USAGE}") from None


def eval_command(magics: FlueMagics, line: str) -> None:
    """Run the dataset (each case in a fresh kernel of its own), show the table and a drill-down."""
    from IPython.display import display

    words = line.split()
    if words[:1] == ["show"]:
        report = magics._ns.get(HANDLE)
        if report is None:
            raise FlueCellError("flue eval: no eval ran in this kernel yet (%flue eval DATASET --model MODEL)")
        if len(words) != 2:
            raise UsageError(f"`%flue eval show` takes one case id\nusage: {USAGE}")
        try:
            print(report.details(words[1]))
        except KeyError:
            raise FlueCellError(f"flue eval: no case {words[1]!r} in the last run") from None
        return
    args = _parse(line)
    try:
        from flue_nb.evals.errors import EvalError
        from flue_nb.evals.runner import run_eval_args
    except ImportError as exc:
        raise FlueCellError(f"flue eval needs pydantic-evals: pip install 'flue_nb[evals]' ({exc})") from None
    try:
        report = run_eval_args(args)
    except EvalError as exc:
        raise FlueCellError(f"flue eval: {exc}") from None
    magics._ns[HANDLE] = report
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(report.to_json())
    print(report.table())
    print(f"\n`%flue eval show CASE` (or {HANDLE}.details('CASE')) shows a case; {HANDLE} holds the report.")
    display({"text/html": report._repr_html_()}, raw=True)
    if args.min_score is not None and report.score < args.min_score:
        raise FlueCellError(f"flue eval: score {report.score:.2f} is below --min-score {args.min_score:g}")
