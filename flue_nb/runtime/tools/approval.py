"""The approval policy: whether a tool call may run, and who decides (`allow` / `ask` / `deny`).

`with_approval` wraps any `Tool`. The wrapper keeps the tool's name, description and schema, so
input is still validated by `execute_tool` before anyone is asked: an invalid call is an error
result and never bothers the user. Every refusal is an error result the model sees, worded so it
knows the refusal is the user's choice and not a fault to work around.

This module is runtime: the widget's approve/deny buttons (and the kernel's stdin prompt) reach
it only through an `Approver`. An approver that finds no one to ask returns `Unanswered` with the
reason, and the fallback policy decides, saying so in the result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from pydantic import BaseModel

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.tools.summary import arguments_json, summary_text
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput, call_run

__all__ = [
    "ApprovalPolicy",
    "ApprovalRequest",
    "Approver",
    "Fallback",
    "Unanswered",
    "request_summary",
    "with_approval",
]

ApprovalPolicy = Literal["allow", "ask", "deny"]
"""`allow` runs the tool, `deny` refuses it, `ask` asks the approver each call."""

Fallback = Literal["allow", "deny"]
"""What `ask` does when there is no one to ask (a headless run)."""

_SUMMARY_CHARS = 200


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One tool call waiting for a yes or no."""

    tool_name: str
    """The tool the model wants to call (`python`, `bash`, ...)."""
    call_id: str
    """The model's id for this call, so a UI can tie the question to its tool card."""
    input: dict[str, Any]
    """The validated input, as plain JSON-like data."""
    summary: str
    """A short human line saying what would run (`bash: rm -rf build`)."""


@dataclass(frozen=True, slots=True)
class Unanswered:
    """What an approver returns when it had no one to ask: the fallback policy decides."""

    reason: str
    """Why no one could be asked (`no chat widget shows this call and ...`), shown in the result."""


Approver = Callable[[ApprovalRequest], Awaitable["bool | Unanswered"]]
"""Asks someone about a call; resolves True to run it, False to refuse it, `Unanswered` when
there was no one to ask (then the fallback policy applies, as in a headless run)."""


def request_summary(tool_name: str, data: dict[str, Any]) -> str:
    """The approval question's line: the call's `summary_text` (its first line, and how many more),
    else its arguments as compact JSON."""
    if tool_name in ("edit_cell", "run_cell") and isinstance(data.get("id"), str):
        # The notebook tools that name a cell: which one, then the source the person decides on.
        source = data.get("source")
        text = f"cell {data['id']}: {source}" if isinstance(source, str) else f"cell {data['id']} (its current source)"
    else:
        found = summary_text(tool_name, data)
        text = found if found is not None else arguments_json(data)
    lines = text.strip().splitlines() or [""]
    first = lines[0]
    if len(first) > _SUMMARY_CHARS:
        first = first[: _SUMMARY_CHARS - 1] + "…"
    more = f" (+{len(lines) - 1} more lines)" if len(lines) > 1 else ""
    return f"{tool_name}: {first}{more}"


def with_approval(
    tool: Tool,
    *,
    policy: ApprovalPolicy,
    approver: Approver | None = None,
    fallback: Fallback = "deny",
) -> Tool:
    """Wrap `tool` so each call runs, is refused, or is put to `approver`, as `policy` says.

    Args:
        tool: Any tool; the wrapper keeps its name, description and input schema.
        policy: `allow` returns `tool` itself; `deny` refuses every call; `ask` awaits `approver`.
        approver: Who answers under `ask`; None means a headless run with no one to ask.
        fallback: What `ask` does without an approver; the result says it happened.

    Raises:
        ConfigError: `policy` or `fallback` is not one of the allowed values.
    """
    if policy not in get_args(ApprovalPolicy):
        raise ConfigError(f"approval policy for `{tool.name}` must be 'allow', 'ask' or 'deny', got {policy!r}")
    if fallback not in get_args(Fallback):
        raise ConfigError(f"approval fallback for `{tool.name}` must be 'allow' or 'deny', got {fallback!r}")
    if policy == "allow":
        # Nothing to decide: the tool itself keeps its exact behaviour (e.g. `blocking`).
        return tool

    async def run(args: BaseModel, ctx: ToolContext) -> Any:
        facts: dict[str, Any] = {"policy": policy}
        if policy == "deny":
            return _refused(tool.name, facts | {"approved": False, "reason": "policy"}, _deny_text(tool.name))
        answer: bool | Unanswered = Unanswered("a headless run")
        if approver is not None:
            request = ApprovalRequest(
                tool_name=tool.name,
                call_id=ctx.call_id,
                input=args.model_dump(mode="json"),
                summary=request_summary(tool.name, args.model_dump(mode="json")),
            )
            answer = await approver(request)
        if isinstance(answer, Unanswered):
            reason = "headless" if approver is None else "unanswered"
            facts |= {"approved": fallback == "allow", "reason": reason, "fallback": fallback}
            headless = f"no one to ask in {answer.reason}; fallback policy is {fallback}"
            if fallback == "deny":
                return _refused(
                    tool.name,
                    facts,
                    f"Not approved: {headless}. The `{tool.name}` call did not run.",
                )
            return _annotate(await call_run(tool, args, ctx), facts, f"(Ran without asking: {headless}.)")
        if not answer:
            return _refused(
                tool.name,
                facts | {"approved": False, "reason": "declined"},
                f"Not approved: the user declined this `{tool.name}` call, so it did not run. "
                "Do not retry it another way; ask the user how to proceed.",
            )
        return _annotate(
            await call_run(tool, args, ctx),
            facts | {"approved": True, "reason": "approved"},
            None,
        )

    return replace(tool, run=run, blocking=False)


def _deny_text(name: str) -> str:
    return (
        f"Not run: the user's approval policy denies the `{name}` tool. "
        f"Do not try to get the same effect another way. If the user wants `{name}` calls to run, "
        'they can change the `approval` setting (e.g. `kernel(approval="ask")`).'
    )


def _refused(name: str, facts: dict[str, Any], text: str) -> ToolOutput:
    return ToolOutput(text, is_error=True, details={"approval": facts, "tool": name})


def _annotate(result: Any, facts: dict[str, Any], note: str | None) -> Any:
    """Attach the approval facts (and a note for the model) to what the inner tool returned."""
    if isinstance(result, str):
        result = ToolOutput(result)
    if not isinstance(result, ToolOutput):
        # Non-text results are rendered by `execute_tool`; leave them untouched.
        return result
    content = result.content
    if note:
        content = f"{content}\n\n{note}" if content else note
    return ToolOutput(content, is_error=result.is_error, details={**(result.details or {}), "approval": facts})
