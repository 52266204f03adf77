"""A hosted ACP agent's calls into this kernel (`flue-kernel`), let through by flue_nb's approval.

The agent gets the kernel's tools over MCP with a bearer token of its own (`Served.grant`), and
every call made with it passes `gate()` before it runs, whether or not the agent asked first:
- a read-only tool runs;
- a call whose permission the agent asked for (`session/request_permission`) and flue_nb granted
  on its card runs on the one-call pass that grant left (the same arguments, within `PASS_TTL`);
- else the card of the call (the `tool_call` the agent reported with these arguments) is asked,
  as if the agent had asked: the chat's Approve / Deny, the store's ballot, the rules;
- a call no card shows (the agent reported none with these arguments within `REPORT_WAIT`) runs
  only where the rules let its kind run without asking, and is refused, saying why, elsewhere.
So an agent that never asks runs nothing here that flue_nb's approval did not let through, and a
call the agent asked about is not asked about twice.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from flue_nb.runtime.facts import ApprovalFacts
from flue_nb.runtime.tools.tool import Tool, ToolOutput

if TYPE_CHECKING:
    from flue_nb.acp.hosting import Hosted, _Call

__all__ = ["PASS_TTL", "REPORT_WAIT", "Passes", "arguments_key", "gate", "kind_of"]

PASS_TTL = 600.0
"""Seconds a granted permission stays good for the agent's matching call into the kernel."""

REPORT_WAIT = 5.0
"""Seconds a call waits for the agent's report of it (its `tool_call`, on another channel than
the MCP request) before it is decided as one no card shows."""

_KINDS = {
    "python": "execute",
    "bash": "execute",
    "run_cell": "execute",
    "write": "edit",
    "edit": "edit",
    "insert_cell": "edit",
    "edit_cell": "edit",
    "delete_cell": "delete",
    "move_cell": "move",
}


def kind_of(tool_name: str) -> str:
    """The ACP kind of one of the kernel's tools (whose stand-in's rules decide an unreported call)."""
    return _KINDS.get(tool_name, "other")


def arguments_key(value: Any) -> str | None:
    """One text for equal arguments (a JSON object, or its JSON text); None for anything else."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


class Passes:
    """One-call passes left by permissions granted through a card, by arguments."""

    def __init__(self) -> None:
        self._left: list[tuple[str, float]] = []

    def leave(self, raw_input: Any) -> None:
        """A granted permission for a call of these arguments: the next such call runs once."""
        key = arguments_key(raw_input)
        if key is not None:
            self._left.append((key, time.monotonic()))

    def take(self, key: str) -> bool:
        """Use up a pass for `key`; False if none is left (or it is older than `PASS_TTL`)."""
        now = time.monotonic()
        self._left = [(k, at) for k, at in self._left if now - at < PASS_TTL]
        for i, (k, _) in enumerate(self._left):
            if k == key:
                del self._left[i]
                return True
        return False


async def gate(hosted: Hosted, tool: Tool, arguments: dict[str, Any]) -> ToolOutput | None:
    """None when the call may run; else the refusal it is recorded with (on the agent's loop)."""
    if tool.read_only:
        return None
    key = arguments_key(arguments)
    if key is not None and hosted.passes.take(key):
        return None
    call = await _reported(hosted, key)
    if call is None:
        return _unreported(hosted, tool)
    ask = hosted.ask_for_kernel(call)
    try:
        decided: ToolOutput | None = await asyncio.shield(ask.answer)  # the stand-in's decision
        return decided
    except asyncio.CancelledError:
        if not ask.answer.cancelled():  # the MCP request went: no card asks about it any more
            ask.answer.cancel()
            raise
        return _refused(
            "its card closed before an answer came (the agent's call was refused or ended, its turn "
            "ended, or Stop was pressed), so this call into the kernel did not run",
            ApprovalFacts("ended", approved=False, detail="the card closed unanswered"),
        )


async def _reported(hosted: Hosted, key: str | None) -> _Call | None:
    """The agent's open call of these arguments, waited for at most `REPORT_WAIT` s."""
    if key is None:
        return None
    deadline = time.monotonic() + REPORT_WAIT
    while True:
        hosted.reported.clear()
        found = [
            c
            for c in hosted.calls.values()
            if not c.finished and not c.unfollowed and arguments_key(c.raw_input) == key
        ]
        if found:
            return found[-1]
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            await asyncio.wait_for(hosted.reported.wait(), left)
        except asyncio.TimeoutError:
            pass


def _unreported(hosted: Hosted, tool: Tool) -> ToolOutput | None:
    """A call no card shows: it runs where the rules let its kind run unasked, else it is refused."""
    from flue_nb.acp.hosting import stand_in_name

    kind = kind_of(tool.name)
    decided = hosted.rules.decide(hosted.decider(stand_in_name(kind)), {"title": tool.name})
    if decided.mode == "allow":
        return None
    if decided.mode == "deny":
        return _refused(
            f"the approval policy refuses the hosted agent's `{kind}` calls ({decided.rule}), so `{tool.name}` "
            "did not run in the kernel",
            ApprovalFacts("policy", approved=False, policy="deny", rule=decided.rule),
        )
    return _refused(
        f"`{tool.name}` needs approval ({decided.rule}), but the agent reported no tool call with these "
        f"arguments within {REPORT_WAIT:g} s, so no card could ask about it and it did not run. Ask the agent to "
        "try again, or host it with approval='allow' for its calls into the kernel to run unasked",
        ApprovalFacts("unanswered", approved=False, policy="ask", fallback="deny", rule=decided.rule),
    )


def _refused(why: str, facts: ApprovalFacts) -> ToolOutput:
    return ToolOutput(f"Not run: {why}.", is_error=True, approval=facts)
