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
from flue_nb.runtime.facts import ApprovalFacts, ApprovalReason
from flue_nb.runtime.tools.ballot import Ballot, Unanswered, open_ballot
from flue_nb.runtime.tools.grants import Grant, grants
from flue_nb.runtime.tools.rules import ApprovalRules, Decision
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
    """A short human line saying what would run (`bash: rm -rf build`): what the store records
    for other views, and what is asked unless `question` says more."""
    ballot: Ballot | None = field(default=None, compare=False)
    """The request as recorded in the store (a run of a session, a subagent's under its top-level
    submission): other kernels' views can answer it, and an approver waits for that answer too
    (`Ballot.wait`). Its outcome is closed by `Ballot.decide`, once."""
    question: str = ""
    """What the person is asked: the tool's own fuller wording (`edit_cell`'s diff), else `summary`."""
    rule: str = ""
    """The rule that asks (`default: ask`, `runs code later: ...`)."""
    grant: Grant | None = None
    """What "always allow this for this conversation" would grant (None: not offered, e.g. for
    a place that runs code later)."""

    def __post_init__(self) -> None:
        if not self.question:
            object.__setattr__(self, "question", self.summary)


Approver = Callable[[ApprovalRequest], Awaitable["bool | Unanswered"]]
"""Asks someone about a call; resolves True to run it, False to refuse it, `Unanswered` when
there was no one to ask (then the fallback policy applies, as in a headless run)."""


def request_summary(tool: Tool, data: dict[str, Any]) -> str:
    """The approval question's line: the tool's own wording of the call (`Tool.question`), else
    its `summary_text` (its first line, and how many more), else its arguments as compact JSON."""
    text = tool.question(data) if tool.question is not None else None
    if text is None:
        found = summary_text(data, tool.summary_arg)
        text = found if found is not None else arguments_json(data)
    lines = text.strip().splitlines() or [""]
    first = lines[0]
    if len(first) > _SUMMARY_CHARS:
        first = first[: _SUMMARY_CHARS - 1] + "…"
    more = f" (+{len(lines) - 1} more lines)" if len(lines) > 1 else ""
    return f"{tool.name}: {first}{more}"


def with_approval(
    tool: Tool,
    *,
    policy: ApprovalPolicy | None = None,
    rules: ApprovalRules | None = None,
    approver: Approver | None = None,
    fallback: Fallback = "deny",
    cwd: str | None = None,
) -> Tool:
    """Wrap `tool` so each call runs, is refused, or is put to `approver`, as the rules decide.

    The wrapper is the one writer of the call's `ApprovalFacts` (`ToolOutput.approval`), and
    `ApprovalRules.decide` the one place a decision is made; the facts name its rule.

    Args:
        tool: Any tool; the wrapper keeps its name, description and input schema.
        policy: One mode for this tool (`allow`, `ask`, `deny`): shorthand for `rules`.
        rules: The approval rules (default: `policy`, else `allow`).
        approver: Who answers `ask`; None means a headless run with no one to ask.
        fallback: What `ask` does without an approver; the result says it happened.
        cwd: Where relative paths of `write`/`edit` resolve (for places that run code later).

    Raises:
        ConfigError: `policy` or `fallback` is not one of the allowed values.
    """
    if policy is not None and policy not in get_args(ApprovalPolicy):
        raise ConfigError(f"approval policy for `{tool.name}` must be 'allow', 'ask' or 'deny', got {policy!r}")
    if fallback not in get_args(Fallback):
        raise ConfigError(f"approval fallback for `{tool.name}` must be 'allow' or 'deny', got {fallback!r}")
    rules = rules if rules is not None else ApprovalRules.of(policy or "allow")
    if tool.read_only or (_always_allowed(rules, tool.name) and tool.runs_later is None):
        # Nothing to decide: the tool itself keeps its exact behaviour (e.g. `blocking`).
        return tool
    asks = rules.default == "ask" or tool.name in rules.tools

    async def run(args: BaseModel, ctx: ToolContext) -> Any:
        data = args.model_dump(mode="json")
        given = _grants(ctx) if asks else []
        d = rules.decide(tool, data, grants=given, cwd=cwd)
        if d.mode == "allow":
            result = await call_run(tool, args, ctx)
            if d.rule.startswith("default:"):
                return result  # the plain default: nothing to say on every call
            return _annotate(result, ApprovalFacts("allowed", True, "allow", rule=d.rule), None)
        if d.mode == "deny":
            return _refused(tool.name, ApprovalFacts("policy", False, "deny", rule=d.rule), _deny_text(tool.name, d))
        answer, by = (
            await _ask(tool, approver, args, ctx, d) if approver is not None else (Unanswered("a headless run"), None)
        )
        if isinstance(answer, Unanswered):
            reason: ApprovalReason = "headless" if approver is None else "unanswered"
            facts = ApprovalFacts(reason, fallback == "allow", "ask", fallback, by, rule=d.rule)
            headless = f"no one to ask in {answer.reason}; fallback policy is {fallback}"
            if fallback == "deny":
                return _refused(tool.name, facts, f"Not approved: {headless}. The `{tool.name}` call did not run.")
            return _annotate(await call_run(tool, args, ctx), facts, f"(Ran without asking: {headless}.)")
        if not answer:
            return _refused(
                tool.name,
                ApprovalFacts("declined", False, "ask", by=by, rule=d.rule),
                f"Not approved: the user declined this `{tool.name}` call, so it did not run. "
                "Do not retry it another way; ask the user how to proceed.",
            )
        facts = ApprovalFacts("approved", True, "ask", by=by, rule=d.rule)
        return _annotate(await call_run(tool, args, ctx), facts, None)

    return replace(tool, run=run, blocking=False)


def _always_allowed(rules: ApprovalRules, name: str) -> bool:
    """Whether every call of tool `name` runs under `rules` (no pattern, no ceiling below allow)."""
    own = rules.tools.get(name, rules.default)
    capped = rules.ceiling is not None and rules.ceiling != "allow"
    return own == "allow" and not capped


def _grants(ctx: ToolContext) -> list[Grant]:
    try:
        return grants(ctx.store, ctx.conversation_id)
    except Exception:  # noqa: BLE001 - a store that cannot be read: no grant, the person is asked
        return []


async def _ask(
    tool: Tool, approver: Approver, args: BaseModel, ctx: ToolContext, decision: Decision
) -> tuple[bool | Unanswered, str | None]:
    """Put the call to `approver`; the answer that won (in the store, when the request is
    recorded there: this kernel's, or another view's that came first) and where it was given."""
    data = args.model_dump(mode="json")
    summary = request_summary(tool, data)
    if decision.why:
        summary = f"{summary} [asked because {decision.why}]"
    ballot = _recorded(ctx, tool.name, summary)
    question = await tool.question_detail(data) if tool.question_detail is not None else None
    if question and decision.why:
        question = f"{question}\n\n(asked because {decision.why})"
    request = ApprovalRequest(
        tool.name, ctx.call_id, data, summary, ballot, question or summary, decision.rule, decision.grant
    )
    try:
        answer = await approver(request)
    except BaseException:
        if ballot is not None:  # aborted while asking: every view's card says it ended
            ballot.decide(Unanswered("the run stopped before an answer"))
        raise
    won = ballot.decide(answer) if ballot is not None else None
    if won is None:  # no store, or it is away: this kernel's answer stands
        return answer, None
    if won.approved is None:
        return (answer if isinstance(answer, Unanswered) else won.decision), None
    return won.approved, won.by or None


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


def _deny_text(name: str, d: Decision) -> str:
    why = f" ({d.why})" if d.why else ""
    return (
        f"Not run: the user's approval policy denies this `{name}` call (rule: {d.rule}){why}. "
        f"Do not try to get the same effect another way. If the user wants such calls to run, "
        'they can change the `approval` setting (e.g. `kernel(approval="ask")`).'
    )


def _refused(name: str, facts: ApprovalFacts, text: str) -> ToolOutput:
    return ToolOutput(text, is_error=True, details={"tool": name}, approval=facts)


def _annotate(result: Any, facts: ApprovalFacts, note: str | None) -> Any:
    """Attach the approval facts (and a note for the model) to what the inner tool returned."""
    if isinstance(result, str):
        result = ToolOutput(result)
    if not isinstance(result, ToolOutput):
        # Non-text results are rendered by `execute_tool`; leave them untouched.
        return result
    content = result.content
    if note:
        content = f"{content}\n\n{note}" if content else note
    # A copy: what the inner tool set besides its text (its figures, its namespace diff) is kept.
    return replace(result, content=content, approval=facts)
