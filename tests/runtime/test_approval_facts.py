"""One shape per fact: an approval decision is one `ApprovalFacts` from the approval wrapper to the
view (a field of `ToolOutput`, `ToolResultMessage` and `ToolEnd`), its request is closed once per
answer, and the namespace diff is a `NamespaceDiff`; the store keeps the JSON it always kept."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.runtime import events as ev
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.facts import ApprovalFacts, NamespaceDiff
from flue_nb.runtime.messages import ToolResultMessage, message_from_dict, message_to_dict
from flue_nb.runtime.store.sqlite import SQLiteStore
from flue_nb.runtime.tools.approval import ApprovalRequest, with_approval
from flue_nb.runtime.tools.ballot import here
from flue_nb.runtime.tools.tool import Tool, ToolContext, define_tool, execute_tool

CID = "team:facts"


class _Cmd(BaseModel):
    command: str


def _tool(calls: list[str]) -> Tool:
    async def run(args: _Cmd) -> str:
        calls.append(args.command)
        return "ran"

    return define_tool("bash", "Run a command.", input=_Cmd, run=run)


class _Counting(SQLiteStore):
    """A store that counts how often an approval request is closed."""

    closes = 0

    def close_approval(self, *args: Any, **kwargs: Any) -> Any:
        self.closes += 1
        return super().close_approval(*args, **kwargs)


def test_one_click_closes_the_request_once(tmp_path: Path) -> None:
    # The notebook's approver closes the request when a chat's click races another kernel's; the
    # wrapper then reads the same outcome from the ballot instead of closing it a second time.
    from flue_nb.notebook.kernel import approve as _approve

    store = _Counting(str(tmp_path / "s.sqlite"))
    store.admit(CID, "go", submission_id="s1", now=time.time())
    assert store.acquire_lease(CID, "A", ttl=60)
    answered: list[bool] = []

    class Chat:
        async def ask(self, call_id: str, question: str) -> bool:
            return True  # the person clicks Approve

        def answer(self, call_id: str, approved: bool) -> None:
            answered.append(approved)

    async def approver(request: ApprovalRequest) -> Any:
        return await _approve._first_answer([Chat()], request, None)

    calls: list[str] = []
    ctx = ToolContext("k1", conversation_id=CID, submission_id="s1", store=store, owner="A")
    out = asyncio.run(execute_tool(with_approval(_tool(calls), policy="ask", approver=approver), {"command": "x"}, ctx))
    assert calls == ["x"] and answered == [True]
    assert out.approval == ApprovalFacts("approved", True, "ask", by=here(), rule="default: ask")
    assert store.closes == 1
    [answer] = [r for r in store.records(CID, kinds=["event"]) if "approval_answer" in r.data]
    assert answer.data["approval_answer"]["outcome"] == "approved"
    store.close()


def test_tool_end_carries_the_facts_live_and_rebuilt(tmp_path: Path) -> None:
    calls: list[str] = []
    model = ScriptedModel([reply("", tool_call("bash", "k1", command="rm -rf /")), reply("refused")])

    @flue.agent
    def careful() -> str:
        flue.use_model(model)
        flue.use_tool(with_approval(_tool(calls), policy="deny"))
        return "Be careful."

    s = flue.init(careful, db=str(tmp_path / "s.sqlite"), conversation="team:careful", settings=RunSettings())
    seen: list[ev.Event] = []
    s.observe(seen.append)
    assert s.prompt("clean up") == "refused"
    [live] = [e for e in seen if isinstance(e, ev.ToolEnd)]
    [rebuilt] = [e for e in s.events() if isinstance(e, ev.ToolEnd)]
    facts = ApprovalFacts("policy", False, "deny", rule="default: deny")
    assert calls == [] and live.approval == facts and rebuilt.approval == facts
    assert "approval" not in (live.details or {}) and "approval" not in (rebuilt.details or {})
    # The store keeps the JSON it always kept, under `details["approval"]`, with the rule that decided.
    [row] = [r for r in s.store.records("team:careful") if r.data.get("kind") == "tool_result"]
    stored = row.data["details"]["approval"]
    assert stored == {"policy": "deny", "approved": False, "reason": "policy", "rule": "default: deny"}


def test_rows_stored_before_the_types_read_back_typed() -> None:
    old = {
        "kind": "tool_result", "call_id": "c", "name": "python", "content": "", "is_error": False,
        "details": {
            "approval": {"policy": "ask", "approved": True, "reason": "approved", "fallback": None, "via": None},
            "variables": {"created": ["x"], "changed": {"y": "int"}, "deleted": ["z"]},
            "handle": None,
        },
    }  # fmt: skip
    m = message_from_dict(old)
    assert isinstance(m, ToolResultMessage)
    assert m.approval == ApprovalFacts("approved", True, "ask")
    assert m.namespace == NamespaceDiff(("x",), ("y",), ("z",))
    assert m.details == {"handle": None}
    # Written again, the facts go back where they were (`via`, never written, is left out).
    again = message_to_dict(m)["details"]
    assert again["approval"] == {"policy": "ask", "approved": True, "reason": "approved"}
    assert again["variables"] == {"created": ["x"], "changed": ["y"], "deleted": ["z"]}


def test_a_tools_own_details_of_the_same_names_stay_its_own() -> None:
    # Only the shapes the facts were stored in are read as facts.
    m = message_from_dict(
        {"kind": "tool_result", "call_id": "c", "name": "t", "content": "", "details": {"approval": "pending"}}
    )
    assert isinstance(m, ToolResultMessage) and m.approval is None and m.details == {"approval": "pending"}
