"""The checks an eval case can make, as pydantic-evals evaluators.

Each returns pydantic-evals' `EvaluationReason` (a pass/fail or a score, and why). The answer is
the case's `output` (the agent's final text), so pydantic-evals' own evaluators (`Contains`,
`EqualsExpected`, `LLMJudge` with pydantic-ai installed, ...) work on it too. `PythonCheck`
also sees the kernel's final namespace and the case's working directory; `Judge` asks any
flue_nb model (a provider id or a `Model` object, offline ones included).
"""

from __future__ import annotations

import json
import math
import pickle
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_evals.evaluators import EvaluationReason, Evaluator, EvaluatorContext

__all__ = [
    "ClosedForm",
    "ExactText",
    "Judge",
    "NormalizedText",
    "Number",
    "PythonCheck",
    "Regex",
    "case_files",
    "case_namespace",
    "from_spec",
    "normalize",
    "parse_closed_form",
]


def _expected(value: Any, ctx: EvaluatorContext[Any, Any, Any]) -> Any:
    return ctx.expected_output if value is None else value


def _short(text: Any, n: int = 60) -> str:
    s = str(text).strip().replace("\n", " ")
    return s if len(s) <= n else s[: n - 1] + "…"


def normalize(text: str) -> str:
    """Text compared loosely: Unicode NFKC, case folded, markdown emphasis and code marks
    dropped, spaces collapsed, trailing punctuation removed."""
    t = unicodedata.normalize("NFKC", str(text)).casefold()
    t = re.sub(r"[*_`]+", "", t)
    t = re.sub(r"\s+", " ", t).strip()
    return t.rstrip(".!;: ").strip()


@dataclass
class ExactText(Evaluator[Any, Any, Any]):
    """The answer, stripped, is exactly `value` (default: the case's expected output)."""

    value: str | None = None

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> EvaluationReason:
        want = str(_expected(self.value, ctx))
        got = str(ctx.output or "").strip()
        ok = got == want.strip()
        return EvaluationReason(
            ok, f"answer is {_short(want)!r}" if ok else f"expected {_short(want)!r}, got {_short(got)!r}"
        )


@dataclass
class NormalizedText(Evaluator[Any, Any, Any]):
    """The answer equals `value` once both are normalised (`normalize`), or, with `contains`,
    holds it."""

    value: str | None = None
    contains: bool = False

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> EvaluationReason:
        want = normalize(str(_expected(self.value, ctx)))
        got = normalize(str(ctx.output or ""))
        ok = want in got if self.contains else got == want
        how = "holds" if self.contains else "is"
        return EvaluationReason(
            ok, f"answer {how} {_short(want)!r}" if ok else f"expected {_short(want)!r}, got {_short(got)!r}"
        )


_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def numbers_in(text: str) -> list[float]:
    """The numbers written in `text`, in order (thousands separators allowed)."""
    out = []
    for m in _NUMBER.finditer(text):
        try:
            out.append(float(m.group().replace(",", "")))
        except ValueError:
            continue
    return out


@dataclass
class Number(Evaluator[Any, Any, Any]):
    """A number in the answer is within `tolerance` of `value` (absolute; relative to `value`
    with `relative`). `which`: the `last` number the answer writes (default), or `any`."""

    value: float | None = None
    tolerance: float = 1e-6
    relative: bool = False
    which: str = "last"

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> EvaluationReason:
        want = float(_expected(self.value, ctx))
        found = numbers_in(str(ctx.output or ""))
        if not found:
            return EvaluationReason(False, f"no number in the answer (expected {want:g})")
        room = self.tolerance * abs(want) if self.relative else self.tolerance
        pool = found if self.which == "any" else found[-1:]
        for x in pool:
            if math.isclose(x, want, rel_tol=0, abs_tol=room):
                return EvaluationReason(True, f"{x:g} is within {room:g} of {want:g}")
        return EvaluationReason(
            False, f"expected {want:g} ± {room:g}, the answer says {_short(', '.join(f'{x:g}' for x in pool))}"
        )


@dataclass
class Regex(Evaluator[Any, Any, Any]):
    """The answer matches `pattern` (`re.search`; `ignore_case` for case-insensitive)."""

    pattern: str
    ignore_case: bool = False

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> EvaluationReason:
        m = re.search(self.pattern, str(ctx.output or ""), re.IGNORECASE if self.ignore_case else 0)
        return EvaluationReason(bool(m), f"matches /{self.pattern}/" if m else f"does not match /{self.pattern}/")


_CLOSED = re.compile(r"@(\w+)\[(.*?)\]", re.DOTALL)


def parse_closed_form(text: str) -> dict[str, str]:
    """The `@name[value]` answers in `text` (the last one of a name wins)."""
    return {m.group(1): m.group(2).strip() for m in _CLOSED.finditer(text)}


def _same_value(got: str, want: str) -> bool:
    if got.strip().casefold() == want.strip().casefold():
        return True
    try:
        return math.isclose(float(got), float(want), rel_tol=0, abs_tol=1e-6)
    except ValueError:
        return False


@dataclass
class ClosedForm(Evaluator[Any, Any, Any]):
    """InfiAgent-DABench's closed-form answers: right when every labelled `@name[value]` is in
    the answer with the same value (the same text, case and spaces aside, or the same number).
    `answers` default: the case's expected output, a {name: value} mapping."""

    answers: dict[str, str] | None = None

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> dict[str, EvaluationReason]:
        want = {str(k): str(v) for k, v in (_expected(self.answers, ctx) or {}).items()}
        got = parse_closed_form(str(ctx.output or ""))
        wrong = []
        for name, value in want.items():
            if name not in got:
                wrong.append(f"@{name} missing (label {value})")
            elif not _same_value(got[name], value):
                wrong.append(f"@{name}[{got[name]}] (label {value})")
        right = len(want) - len(wrong)
        reason = "every value matches its label" if not wrong else "; ".join(wrong)
        return {
            "closed_form": EvaluationReason(not wrong, reason),
            "closed_form_share": EvaluationReason(
                right / len(want) if want else 0.0, f"{right} of {len(want)} values right"
            ),
        }


def case_files(ctx: EvaluatorContext[Any, Any, Any]) -> Path:
    """The working directory the case's kernel ran in (its files as the agent left them)."""
    from flue_nb.evals.kernel_case import WORKDIR

    return Path(ctx.attributes["case_dir"]) / WORKDIR


class _Unpicklable:
    def __init__(self, name: str, type_name: str) -> None:
        self.name, self.type_name = name, type_name

    def __repr__(self) -> str:
        return f"<{self.name}: a {self.type_name} that did not pickle>"


def case_namespace(ctx: EvaluatorContext[Any, Any, Any]) -> dict[str, Any]:
    """The kernel's final namespace as it pickled (values that did not pickle stand in as
    placeholders saying their type; a value whose class is not importable here is left out)."""
    from flue_nb.evals.kernel_case import NAMESPACE_FILE

    path = Path(ctx.attributes["case_dir"]) / NAMESPACE_FILE
    if not path.exists():
        return {}
    # The file is the case kernel's own, written by the collect cell this eval sent it.
    with open(path, "rb") as f:
        data = pickle.load(f)  # noqa: S301
    ns: dict[str, Any] = {n: _Unpicklable(n, t) for n, t in data.get("unpicklable", {}).items()}
    for name, blob in data.get("values", {}).items():
        try:
            ns[name] = pickle.loads(blob)  # noqa: S301
        except Exception:  # noqa: BLE001 - a class only the kernel could import
            continue
    return ns


@dataclass
class PythonCheck(Evaluator[Any, Any, Any]):
    """A Python check over what the kernel ended with: `fn(namespace, files)` (the namespace as
    a dict, the working directory as a `Path`) returning a bool, a (bool, reason) pair or an
    `EvaluationReason`; or `expr`, an expression over the namespace's names plus `files`,
    `answer` and `Path` (`"df_clean.isna().sum().sum() == 0"`, `"(files / 'plot.png').exists()"`)."""

    fn: Callable[[dict[str, Any], Path], Any] | None = None
    expr: str | None = None
    name: str | None = None

    def get_default_evaluation_name(self) -> str:
        return self.name or (_short(self.expr, 40) if self.expr else str(getattr(self.fn, "__name__", "python")))

    def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> EvaluationReason:
        ns = case_namespace(ctx)
        files = case_files(ctx)
        try:
            if self.fn is not None:
                got = self.fn(ns, files)
            elif self.expr is not None:
                got = eval(self.expr, {"Path": Path, "files": files, "answer": ctx.output, **ns})  # noqa: S307
            else:
                return EvaluationReason(False, "PythonCheck needs fn or expr")
        except Exception as exc:  # noqa: BLE001 - the check's own failure is the case's reason
            return EvaluationReason(False, f"the check raised {type(exc).__name__}: {_short(exc, 120)}")
        if isinstance(got, EvaluationReason):
            return got
        if isinstance(got, tuple) and len(got) == 2:
            return EvaluationReason(bool(got[0]), str(got[1]))
        what = self.expr or getattr(self.fn, "__name__", "check")
        return EvaluationReason(bool(got), f"{_short(what, 80)} is {'true' if got else 'false'}")


JUDGE_SYSTEM = (
    "You grade an AI agent's answer against a rubric. Reply with one JSON object and nothing else: "
    '{"pass": true or false, "score": a number from 0 to 1, "reason": "one sentence"}.'
)


@dataclass
class Judge(Evaluator[Any, Any, Any]):
    """An LLM judge: `model` (a provider id such as `anthropic/claude-haiku-4-5`, or a flue_nb
    `Model` object) reads the rubric, the task and the answer and says pass/fail and why."""

    rubric: str
    model: Any = None
    include_prompt: bool = True
    include_expected: bool = True
    _resolved: Any = field(default=None, repr=False, compare=False)

    def get_default_evaluation_name(self) -> str:
        return "judge"

    def _model(self) -> Any:
        from flue_nb.evals.errors import EvalError
        from flue_nb.runtime.providers import resolve_model

        if self._resolved is None:
            model = self.model or _judge_default()
            if model is None:
                raise EvalError("Judge needs a model: Judge(rubric, model=...) or $FLUE_EVAL_JUDGE")
            if isinstance(model, str):
                from flue_nb.evals.kernel_case import is_object_spec

                model = _callable(model, "Judge model") if is_object_spec(model) else resolve_model(model)
            self._resolved = model
        return self._resolved

    def _request_text(self, ctx: EvaluatorContext[Any, Any, Any]) -> str:
        parts = [f"Rubric:\n{self.rubric}"]
        if self.include_prompt and getattr(ctx.inputs, "prompt", None):
            parts.append(f"Task given to the agent:\n{ctx.inputs.prompt}")
        if self.include_expected and ctx.expected_output is not None:
            parts.append(f"Expected answer:\n{ctx.expected_output}")
        parts.append(f"The agent's answer:\n{ctx.output}")
        return "\n\n".join(parts)

    async def evaluate(self, ctx: EvaluatorContext[Any, Any, Any]) -> dict[str, EvaluationReason]:
        from flue_nb.runtime.messages import UserMessage
        from flue_nb.runtime.providers.model import ModelRequest, ResponseDone, TextChunk

        request = ModelRequest(JUDGE_SYSTEM, [UserMessage(self._request_text(ctx))], [], 1024)
        text = ""
        async for event in self._model().stream(request):
            if isinstance(event, TextChunk):
                text += event.text
            elif isinstance(event, ResponseDone):
                text = "".join(getattr(p, "text", "") for p in event.message.parts) or text
        verdict = _verdict(text)
        if verdict is None:
            return {"judge": EvaluationReason(False, f"the judge's reply is not a verdict: {_short(text, 120)}")}
        ok, score, reason = verdict
        return {"judge": EvaluationReason(ok, reason), "judge_score": EvaluationReason(score, reason)}


def _judge_default() -> str | None:
    import os

    return os.environ.get("FLUE_EVAL_JUDGE") or None


def _verdict(text: str) -> tuple[bool, float, str] | None:
    m = re.search(r"\{.*\}", text, re.DOTALL)
    if not m:
        return None
    try:
        data = json.loads(m.group())
    except ValueError:
        return None
    if not isinstance(data, dict) or "pass" not in data:
        return None
    ok = bool(data["pass"])
    try:
        score = float(data.get("score", 1.0 if ok else 0.0))
    except (TypeError, ValueError):
        score = 1.0 if ok else 0.0
    return ok, max(0.0, min(1.0, score)), str(data.get("reason", ""))


def _callable(ref: str, where: str) -> Callable[..., Any]:
    import importlib

    from flue_nb.evals.errors import EvalError

    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise EvalError(f"{where}: {ref!r} is not module:function")
    try:
        return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
    except (ImportError, AttributeError) as exc:
        raise EvalError(f"{where}: cannot import {ref} ({exc})") from None


def from_spec(spec: Any, *, where: str = "check") -> Evaluator[Any, Any, Any]:
    """A check from its JSON form (a JSONL case's `checks`): {"exact": V}, {"text": V} (normalised),
    {"contains": V}, {"number": X, "tolerance": T, "relative": bool}, {"regex": P, "ignore_case":
    bool}, {"closed_form": {name: value}}, {"python": "EXPR"} or {"python": "module:function"},
    {"judge": RUBRIC, "model": SPEC}."""
    from flue_nb.evals.errors import EvalError

    if not isinstance(spec, dict) or not spec:
        raise EvalError(f'{where}: a check is a JSON object such as {{"number": 3.5}}, got {spec!r}')
    if "exact" in spec:
        return ExactText(str(spec["exact"]))
    if "text" in spec:
        return NormalizedText(str(spec["text"]))
    if "contains" in spec:
        return NormalizedText(str(spec["contains"]), contains=True)
    if "number" in spec:
        return Number(
            float(spec["number"]),
            float(spec.get("tolerance", 1e-6)),
            bool(spec.get("relative", False)),
            str(spec.get("which", "last")),
        )
    if "regex" in spec:
        return Regex(str(spec["regex"]), bool(spec.get("ignore_case", False)))
    if "closed_form" in spec:
        answers = spec["closed_form"]
        return ClosedForm({str(k): str(v) for k, v in answers.items()} if isinstance(answers, dict) else None)
    if "python" in spec:
        code = str(spec["python"])
        if re.fullmatch(r"[\w.]+:\w+", code):
            return PythonCheck(fn=_callable(code, where), name=spec.get("name") or code)
        return PythonCheck(expr=code, name=spec.get("name"))
    if "judge" in spec:
        return Judge(str(spec["judge"]), model=spec.get("model"))
    raise EvalError(
        f"{where}: unknown check {sorted(spec)} (exact, text, contains, number, regex, closed_form, python, judge)"
    )
