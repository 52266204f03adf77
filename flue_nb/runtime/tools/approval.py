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
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from pydantic import BaseModel

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.tools.ballot import Ballot, open_ballot
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
    ballot: Ballot | None = field(default=None, compare=False)
    """The request as recorded in the store (a run of a session, a subagent's under its top-level
    submission): other kernels' views can answer it, and an approver waits for that answer too
    (`Ballot.wait`)."""


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
            summary = request_summary(tool.name, args.model_dump(mode="json"))
            ballot = _recorded(ctx, tool.name, summary)
            request = ApprovalRequest(tool.name, ctx.call_id, args.model_dump(mode="json"), summary, ballot)
            try:
                answer = await approver(request)
            except BaseException:
                if ballot is not None:  # aborted while asking: every view's card says it ended
                    _close_quietly(ballot, Unanswered("the run stopped before an answer"))
                raise
            if ballot is not None:
                answer, by = _first_answer(ballot, answer)
                if by:
                    facts["by"] = by
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


def _recorded(ctx: ToolContext, name: str, summary: str) -> Ballot | None:
    """The request recorded in the conversation's store, or None (no store here, or it failed:
    then only this kernel's views and stdin can answer, as before)."""
    submission_id = ctx.submission_id or ctx.asked_for  # a subagent's: its top-level submission's
    if ctx.store is None or ctx.owner is None or ctx.conversation_id is None or submission_id is None:
        return None
    try:
        return open_ballot(
            ctx.store,
            ctx.conversation_id,
            submission_id,
            ctx.owner,
            call_id=ctx.call_id,
            tool=name,
            summary=summary,
        )
    except Exception:  # noqa: BLE001 - a store that cannot record it: ask here only
        return None


def _first_answer(ballot: Ballot, answer: bool | Unanswered) -> tuple[bool | Unanswered, str]:
    """The answer that won in the store (this kernel's, or another view's that came first)."""
    won = _close_quietly(ballot, answer)
    if won is None:
        return answer, ""
    if won.approved is None:
        return (answer if isinstance(answer, Unanswered) else Unanswered(won.reason or "the request ended")), ""
    return won.approved, won.by


def _close_quietly(ballot: Ballot, answer: bool | Unanswered) -> Any:
    try:
        if isinstance(answer, Unanswered):
            return ballot.close("ended", reason=f"no answer ({answer.reason})")
        return ballot.close("approved" if answer else "denied")
    except Exception:  # noqa: BLE001 - the store is away: this kernel's answer stands
        return None


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
