"""Datasets of notebook tasks: `NotebookTask` (a case's inputs) in pydantic-evals' `Case` and
`Dataset`, and loaders for a JSONL file of cases and for InfiAgent-DABench's format.

A JSONL case is one object per line:

    {"id": "mean-age", "prompt": "What is the mean age in insurance.csv?",
     "files": ["tables/insurance.csv"], "notebook": "start.ipynb", "expected": "39.21",
     "checks": [{"number": 39.21, "tolerance": 0.01}]}

`files` and `notebook` are relative to the JSONL file's folder; each file lands in the case's
working directory under its own name. `checks` are those `checks.from_spec` reads; with none,
`expected` is compared as normalised text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_evals import Case, Dataset

__all__ = ["NotebookTask", "case_id", "dabench_prompt", "load_dabench", "load_dataset", "load_jsonl"]


@dataclass
class NotebookTask:
    """What an eval case gives the agent: a prompt, files for its working directory, and a
    notebook whose code cells run first."""

    prompt: str
    files: list[str] = field(default_factory=list)
    """Paths (absolute, or relative to `base`) copied into the working directory by name."""
    notebook: str | None = None
    """A notebook whose code cells run in the kernel before the prompt (its path is the
    notebook the agent's notebook tools see)."""
    base: str = "."
    """The folder relative paths are read from (the dataset file's folder)."""
    timeout: float | None = None
    """Seconds this case may take (None: the run's `timeout`)."""

    def file_pairs(self) -> list[tuple[Path, str]]:
        """(source, name in the working directory) for each input file."""
        return [(self._path(f), Path(f).name) for f in self.files]

    def notebook_path(self) -> Path | None:
        """The starting notebook, resolved."""
        return self._path(self.notebook) if self.notebook else None

    def _path(self, name: str) -> Path:
        p = Path(name)
        return p if p.is_absolute() else Path(self.base) / p


_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def case_id(name: str) -> str:
    """A case name as it appears in conversation ids and folder names."""
    return _SAFE.sub("-", name).strip("-.") or "case"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    from flue_nb.evals.errors import EvalError

    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise EvalError(f"{path}:{n}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise EvalError(f"{path}:{n}: a case is a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows


def load_jsonl(path: str | Path) -> Dataset[NotebookTask, Any, dict[str, Any]]:
    """A dataset from a JSONL file of cases (see the module docstring)."""
    from flue_nb.evals.checks import from_spec
    from flue_nb.evals.errors import EvalError

    path = Path(path)
    cases = []
    for n, row in enumerate(_read_jsonl(path), 1):
        if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise EvalError(f"{path}: case {n} has no `prompt`")
        name = str(row.get("id", n))
        checks = [from_spec(spec, where=f"{path}: case {name}") for spec in row.get("checks", [])]
        expected = row.get("expected")
        if not checks and expected is not None:
            checks = [from_spec({"text": expected}, where=f"{path}: case {name}")]
        task = NotebookTask(
            prompt=row["prompt"],
            files=[str(f) for f in row.get("files", [])],
            notebook=row.get("notebook"),
            base=str(path.parent.resolve()),
            timeout=row.get("timeout"),
        )
        cases.append(
            Case(
                name=name, inputs=task, expected_output=expected, metadata=row.get("metadata"), evaluators=tuple(checks)
            )
        )
    _unique(cases, path)
    return Dataset(name=path.stem, cases=cases)


def dabench_prompt(question: dict[str, Any]) -> str:
    """A DABench question as the agent sees it: the question, its constraints, the answer
    format and the file (InfiAgent's own prompt layout)."""
    return (
        f"Question: {question['question'].strip()}\n"
        f"Constraints: {str(question.get('constraints', '')).strip()}\n"
        f"Format: {str(question.get('format', '')).strip()}\n"
        f"The data is in the file {question['file_name']} in the working directory. Answer with every "
        "value in the @name[value] form the format gives, on the last lines of your answer."
    )


def load_dabench(folder: str | Path) -> Dataset[NotebookTask, Any, dict[str, Any]]:
    """A dataset from InfiAgent-DABench's layout: `questions.jsonl`, `labels.jsonl` and a
    `tables/` folder of CSVs; each case is right when every labelled `@name[value]` matches."""
    from flue_nb.evals.checks import ClosedForm
    from flue_nb.evals.errors import EvalError

    folder = Path(folder)
    for need in ("questions.jsonl", "labels.jsonl", "tables"):
        if not (folder / need).exists():
            raise EvalError(
                f"{folder}: not a DABench folder (no {need}; it needs questions.jsonl, labels.jsonl, tables/)"
            )
    labels = {row["id"]: row for row in _read_jsonl(folder / "labels.jsonl")}
    cases = []
    for q in _read_jsonl(folder / "questions.jsonl"):
        label = labels.get(q["id"])
        if label is None:
            raise EvalError(f"{folder}/labels.jsonl: no label for question {q['id']}")
        answers = {str(name): str(value) for name, value in label["common_answers"]}
        task = NotebookTask(prompt=dabench_prompt(q), files=[f"tables/{q['file_name']}"], base=str(folder.resolve()))
        meta = {k: q[k] for k in ("level", "concepts", "file_name") if k in q}
        cases.append(
            Case(name=str(q["id"]), inputs=task, expected_output=answers, metadata=meta, evaluators=(ClosedForm(),))
        )
    _unique(cases, folder)
    return Dataset(name=f"dabench-{folder.name}", cases=cases)


def _unique(cases: list[Any], where: Path) -> None:
    from flue_nb.evals.errors import EvalError

    seen: dict[str, str] = {}
    for c in cases:
        key = case_id(c.name)
        if key in seen:
            raise EvalError(f"{where}: cases {seen[key]!r} and {c.name!r} have the same id")
        seen[key] = c.name


def load_dataset(path: str | Path, format: str | None = None) -> Dataset[NotebookTask, Any, dict[str, Any]]:
    """`path` as a dataset: `dabench` (a folder with questions.jsonl) or `jsonl`; guessed when None."""
    from flue_nb.evals.errors import EvalError

    path = Path(path)
    if not path.exists():
        raise EvalError(f"{path}: no such file or folder")
    if format is None:
        format = "dabench" if path.is_dir() else "jsonl"
    if format == "dabench":
        return load_dabench(path)
    if format == "jsonl":
        if path.is_dir():
            raise EvalError(f"{path}: is a folder; --format jsonl reads a .jsonl file of cases")
        return load_jsonl(path)
    raise EvalError(f"unknown dataset format {format!r} (dabench or jsonl)")
