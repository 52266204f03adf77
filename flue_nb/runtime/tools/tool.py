"""Tools: the `Tool` type, the `@tool` decorator, `define_tool`, and running one call safely.

What a tool's own code raises becomes an error result the model sees (contract 1.5); invalid
input becomes an error result naming the bad fields (1.6). The runtime's own failures —
`ConfigError`, `StoreError`, cancellation — propagate, so they are never disguised as tool output.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from typing_extensions import TypeVar

from flue_nb.runtime.errors import ConfigError, StoreError, SubmissionAbortedError, ToolRetry
from flue_nb.runtime.facts import ApprovalFacts, NamespaceDiff
from flue_nb.runtime.messages import ImagePart
from flue_nb.runtime.providers.model import ToolSpec
from flue_nb.runtime.redact import redact, redact_value, secret_values
from flue_nb.runtime.text import INVALID_INPUT_KEY, clean, clean_value, first_non_finite
from flue_nb.runtime.tools.bound import bound_result

if TYPE_CHECKING:
    from flue_nb.runtime.sandbox import Sandbox

__all__ = [
    "Step",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "call_run",
    "define_tool",
    "execute_tool",
    "format_validation_error",
    "tool",
]


@dataclass(slots=True)
class ToolOutput:
    """A tool's result: the text the model sees, and whether it is an error."""

    content: str
    is_error: bool = False
    details: dict[str, Any] | None = None
    """Extra facts for observers (the widget, provenance); never sent to the model."""
    images: list[ImagePart] = field(default_factory=list)
    """Images sent to the model with `content` (at most `MAX_IMAGES_PER_RESULT` are kept)."""
    approval: ApprovalFacts | None = None
    """How the call's approval was decided (set by `with_approval`, its one writer)."""
    namespace: NamespaceDiff | None = None
    """The names the call's code added, changed and removed (the `python` tool)."""


class Step:
    """Durable steps of one tool call: `await step.do(name, fn)` runs `fn` once, ever.

    The runtime records each step's value; on recovery, a re-run durable tool gets the recorded
    values back instead of running the steps again (contract 11.6).
    """

    def __init__(self, recorded: dict[str, Any], record: Callable[[str, Any], None]) -> None:
        self._recorded = recorded
        self._record = record

    async def do(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run `fn` (sync or async) unless a value for `name` was recorded; return the value."""
        if name in self._recorded:
            return self._recorded[name]
        value = fn()
        if inspect.isawaitable(value):
            value = await value
        self._record(name, value)
        self._recorded[name] = value
        return value


@dataclass(slots=True)
class ToolContext:
    """What a running tool may use besides its input."""

    call_id: str
    sandbox: Sandbox | None = None
    step: Step | None = None
    """Set for durable tools (`durable=True`)."""
    conversation_id: str | None = None
    """The conversation the call belongs to (provenance for what the tool writes)."""
    submission_id: str | None = None
    """The submission whose run made the call."""
    report: Callable[[float | None, float | None, str | None], None] | None = None
    """`report(progress, total, message)` tells observers how a long call is going (a
    `ToolUpdate` event); None where nobody listens."""
    store: Any = None
    """The conversation's store, for a run of a session, its subagents' included (None in a bare
    run): where an approval request is recorded so other views can answer it."""
    owner: str | None = None
    """The lease holder running the call (with `store`): what fences those records."""
    asked_for: str | None = None
    """For a subagent's call (which has no submission of its own): the top-level submission whose
    `task` call runs it, under which its approval request is recorded."""

    def require_sandbox(self) -> Sandbox:
        """The agent's sandbox, or `NoSandboxError` when it has none (contract 9.2)."""
        if self.sandbox is None:
            from flue_nb.runtime.errors import NoSandboxError

            raise NoSandboxError(
                "this agent has no sandbox: attach one in the agent function with "
                "use_sandbox(flue.local(...)) or use_sandbox(flue.kernel())"
            )
        return self.sandbox


InputT = TypeVar("InputT", bound=BaseModel, default=Any)
"""A tool's input model; a bare `Tool` is a tool of any input (a list of tools, a wrapper)."""

RunFn = Callable[[InputT, ToolContext], "Awaitable[ToolOutput | str] | ToolOutput | str"]
"""A tool's `run`: validated input of its own model and the call's context."""


@dataclass(slots=True)
class Tool(Generic[InputT]):
    """A tool the model can call: `run` gets input validated by `input_model`."""

    name: str
    description: str
    input_model: type[InputT]
    run: RunFn[InputT]
    durable: bool = False
    """Durable tools get `ctx.step` and are re-run on recovery with recorded steps replayed."""
    blocking: bool = False
    """Run a sync `run` in a worker thread so it does not stall the event loop."""
    summary_arg: str | None = None
    """The input field that sums a call up in one line (`command`, `path`): what a tool card or a
    transcript line shows of it; None means the first text argument."""
    read_only: bool = False
    """The tool changes nothing (`read`, `grep`, an MCP tool the server marks `readOnlyHint`, a
    `@tool(read_only=True)`): the approval rules always let it run."""
    question: Callable[[Mapping[str, Any]], str | None] | None = field(default=None, repr=False, compare=False)
    """How the approval question names a call (its text before the question's one-line cut), for
    a tool that words its own (`run_cell`: the cell and its source); None or a None answer: the
    call's summary text."""
    question_detail: Callable[[Mapping[str, Any]], Awaitable[str | None]] | None = field(
        default=None, repr=False, compare=False
    )
    """What a person deciding on a call is shown instead of the question's line, when the tool
    can say more (`edit_cell`: the change as a diff); None or a None answer: the line."""
    runs_later: Callable[[Mapping[str, Any], str | None], str | None] | None = field(
        default=None, repr=False, compare=False
    )
    """Why a call with this input (and this working directory) would change a place that runs
    code later (a startup file, a git hook, site-packages), or None: the approval rules then ask
    even under `allow` (`runs_later.py`: `write`, `edit`, `bash`, `python`). None: the tool writes
    no such place, and an `allow` rule lets it run unwrapped."""

    _spec: ToolSpec | None = field(default=None, repr=False, compare=False)
    _fingerprint: str | None = field(default=None, repr=False, compare=False)

    def fingerprint(self) -> str:
        """A short digest of what the model sees of this tool (description and schema)."""
        if self._fingerprint is None:
            import hashlib
            import json

            spec = self.spec()
            raw = json.dumps([spec.description, spec.input_schema], sort_keys=True, default=str)
            self._fingerprint = hashlib.sha1(raw.encode()).hexdigest()[:12]
        return self._fingerprint

    def spec(self) -> ToolSpec:
        """The name, description and JSON schema the model sees (built once: it is costly)."""
        if self._spec is None:
            self._spec = ToolSpec(self.name, self.description, json.loads(_schema_json(self.input_model)))
        return self._spec


@functools.lru_cache(maxsize=512)
def _schema_json(model: type[BaseModel]) -> str:
    """An input model's JSON schema, built once per class: a tool made afresh for each submission
    (`task`) no longer pays pydantic's ~2 ms schema generation every time."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    return json.dumps(schema)


def format_validation_error(tool_name: str, exc: ValidationError) -> str:
    """Say which fields were wrong and how, in words the model can act on."""
    lines = [f"Invalid input for tool `{tool_name}`:"]
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(input)"
        lines.append(f"- field `{loc}`: {err['msg']}")
    lines.append("Fix the input and call the tool again.")
    return "\n".join(lines)


async def call_run(tool: Tool, args: BaseModel, ctx: ToolContext) -> Any:
    """Call a tool's `run` on validated input: sync blocking tools in a worker thread."""
    if tool.blocking and not inspect.iscoroutinefunction(tool.run):
        result = await asyncio.to_thread(tool.run, args, ctx)
    else:
        result = tool.run(args, ctx)
    if inspect.isawaitable(result):
        result = await result
    return result


async def execute_tool(tool: Tool, raw_input: Any, ctx: ToolContext) -> ToolOutput:
    """Validate the input, run the tool, and turn what its code raises into an error result.

    Every result leaves here escaped (text that is not valid UTF-8, see `runtime._text`), with
    known secret values redacted (`runtime.redact`) and then cut to the one limit of every
    result (`tools._bound`; redacting first, so a cut never leaves a prefix of a secret): this
    is the one place all tool results pass before the model, the store or the display sees them.
    A sandbox with a `keep_result(text)` method (the kernel's) keeps the whole text of a cut one.
    """
    out = await _execute(tool, raw_input, ctx)
    pairs = secret_values()
    keep = getattr(ctx.sandbox, "keep_result", None)
    content = (
        bound_result(redact(clean(out.content), pairs), keep=keep) if isinstance(out.content, str) else out.content
    )
    details = redact_value(clean_value(out.details), pairs) if out.details else out.details
    if content is out.content and details is out.details:
        return out
    return replace(out, content=content, details=details)


def _invalid_json(tool_name: str, raw: Any) -> ToolOutput:
    raw = str(raw)
    try:
        value = json.loads(raw)  # Python's parser takes NaN, Infinity and 1e999; JSON does not
        where = first_non_finite(value)
        if where is None:
            why = "it is not a JSON object of named arguments"
        else:
            field_ = f"field `{where}`" if where != "(input)" else "it"
            why = (
                f"{field_} holds NaN, Infinity or a number too large for a double, which JSON "
                "cannot carry; give a finite number"
            )
    except ValueError:
        why = "it is not valid JSON (it may have been cut off by the output limit)"
    shown = raw if len(raw) <= 300 else redact(raw)[:300] + "…"  # redacted before the cut
    return ToolOutput(
        f"Invalid input for tool `{tool_name}`: {why}. Received: {shown}\nCall the tool again with valid JSON input.",
        is_error=True,
    )


async def _execute(tool: Tool, raw_input: Any, ctx: ToolContext) -> ToolOutput:
    if not isinstance(raw_input, dict):
        return ToolOutput(
            f"Invalid input for tool `{tool.name}`: expected a JSON object, got {type(raw_input).__name__}.",
            is_error=True,
        )
    if INVALID_INPUT_KEY in raw_input:
        return _invalid_json(tool.name, raw_input[INVALID_INPUT_KEY])
    if (where := first_non_finite(raw_input)) is not None:
        return ToolOutput(
            f"Invalid input for tool `{tool.name}`:\n- field `{where}`: NaN and infinite numbers "
            "are not valid JSON; give a finite number.\nFix the input and call the tool again.",
            is_error=True,
        )
    try:
        args = tool.input_model.model_validate(raw_input)
    except ValidationError as exc:
        return ToolOutput(format_validation_error(tool.name, exc), is_error=True)
    try:
        result = await call_run(tool, args, ctx)
    except (ConfigError, StoreError, SubmissionAbortedError):
        raise
    except ToolRetry as exc:
        return ToolOutput(exc.message, is_error=True)
    except Exception as exc:  # noqa: BLE001 - tool code's failures go to the model (contract 1.5)
        return ToolOutput(f"Error: {type(exc).__name__}: {exc}", is_error=True)
    if isinstance(result, ToolOutput):
        return result
    return ToolOutput(result if isinstance(result, str) else _to_text(result))


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        import json

        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return repr(value)


_ARG_LINE = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and per-argument texts."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    parts = re.split(r"^\s*(?:Args|Arguments|Parameters):\s*$", doc, maxsplit=1, flags=re.M)
    description = parts[0].strip()
    params: dict[str, str] = {}
    if len(parts) == 2:
        current = None
        for line in parts[1].splitlines():
            if re.match(r"^\s*(Returns|Raises|Yields|Examples?):\s*$", line):
                break
            m = _ARG_LINE.match(line)
            if (
                m
                and (line.startswith("    ") or not line.startswith(" "))
                and line.strip().split()[0].rstrip(":").isidentifier()
            ):
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current and line.strip():
                params[current] += " " + line.strip()
    return description, params


def _ctx_param(fn: Callable[..., Any], hints: dict[str, Any]) -> str | None:
    for name, hint in hints.items():
        if hint is ToolContext:
            return name
    return None


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    durable: bool = False,
    summary_arg: str | None = None,
    read_only: bool = False,
) -> Any:
    """Make a tool from a function: schema from its type hints, description from its docstring.

    A parameter annotated `ToolContext` receives the call's context instead of model input;
    `summary_arg` names the parameter a tool card or transcript line shows of a call;
    `read_only=True` declares that it changes nothing, so no approval setting stops it.
    Sync functions run in a worker thread; async functions run on the runtime's loop.
    """

    def build(f: Callable[..., Any]) -> Tool:
        hints = get_type_hints(f)
        hints.pop("return", None)
        ctx_name = _ctx_param(f, hints)
        desc, arg_docs = _parse_docstring(f.__doc__)
        fields: dict[str, Any] = {}
        for pname, param in inspect.signature(f).parameters.items():
            if pname == ctx_name:
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError(f"tool {f.__name__!r}: *args/**kwargs parameters are not supported")
            annotation = hints.get(pname, Any)
            default = ... if param.default is param.empty else param.default
            fields[pname] = (annotation, Field(default, description=arg_docs.get(pname)))
        model = create_model(f"{f.__name__}_input", __config__=ConfigDict(extra="forbid"), **fields)
        is_async = inspect.iscoroutinefunction(f)

        if is_async:

            async def run(args: BaseModel, ctx: ToolContext) -> Any:
                kwargs = {k: getattr(args, k) for k in fields}
                if ctx_name:
                    kwargs[ctx_name] = ctx
                return await f(**kwargs)

        else:

            def run(args: BaseModel, ctx: ToolContext) -> Any:  # type: ignore[misc]
                kwargs = {k: getattr(args, k) for k in fields}
                if ctx_name:
                    kwargs[ctx_name] = ctx
                return f(**kwargs)

        t = Tool(
            name=name or f.__name__,
            description=description or desc or f.__name__,
            input_model=model,
            run=run,
            durable=durable,
            blocking=not is_async,
            summary_arg=summary_arg,
            read_only=read_only,
        )
        return t

    return build(fn) if fn is not None else build


def define_tool(
    name: str,
    description: str,
    *,
    input: type[BaseModel],
    run: Callable[..., Any],
    durable: bool = False,
    summary_arg: str | None = None,
    read_only: bool = False,
) -> Tool:
    """Make a tool from a pydantic input model and `run(input)` or `run(input, ctx)`."""
    if not (isinstance(input, type) and issubclass(input, BaseModel)):
        raise ConfigError(f"define_tool({name!r}): `input` must be a pydantic BaseModel subclass")
    n_params = len(inspect.signature(run).parameters)
    is_async = inspect.iscoroutinefunction(run)

    if is_async:

        async def call(args: BaseModel, ctx: ToolContext) -> Any:
            return await (run(args, ctx) if n_params >= 2 else run(args))

    else:

        def call(args: BaseModel, ctx: ToolContext) -> Any:  # type: ignore[misc]
            return run(args, ctx) if n_params >= 2 else run(args)

    return Tool(
        name,
        description,
        input,
        call,
        durable=durable,
        blocking=not is_async,
        summary_arg=summary_arg,
        read_only=read_only,
    )
