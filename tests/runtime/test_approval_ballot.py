"""An approval recorded in the store (issue 19.3): any view answers it, the first answer wins,
and a request whose asker is gone can only end. SQLite and PostgreSQL, each store object with
its own connection standing for another kernel."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from flue_nb.runtime.errors import StoreError
from flue_nb.runtime.facts import ApprovalFacts
from flue_nb.runtime.store import Outcome
from flue_nb.runtime.store.sqlite import SQLiteStore
from flue_nb.runtime.tools.approval import ApprovalRequest, with_approval
from flue_nb.runtime.tools.ballot import answer_request, approvals, here, open_ballot
from flue_nb.runtime.tools.tool import Tool, ToolContext, define_tool, execute_tool

CID = "team:approve"


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "s.sqlite")


def _open(db: str) -> Any:
    if db.startswith("postgresql://"):
        from flue_nb.runtime.store.postgres import PostgresStore

        return PostgresStore(db)
    return SQLiteStore(db)


@pytest.fixture
def stores(db: str) -> Iterator[tuple[Any, Any]]:
    """Kernel A's store (its run holds the lease as "A") and kernel B's, on one database."""
    a, b = _open(db), _open(db)
    a.admit(CID, "write the file", submission_id="s1", now=time.time())
    assert a.acquire_lease(CID, "A", ttl=60)
    yield a, b
    a.close()
    b.close()


class _Cmd(BaseModel):
    command: str


def _tool(calls: list[str]) -> Tool:
    async def run(args: _Cmd) -> str:
        calls.append(args.command)
        return "ran"

    return define_tool("bash", "Run a command.", input=_Cmd, run=run)


def _ctx(store: Any) -> ToolContext:
    return ToolContext("k1", conversation_id=CID, submission_id="s1", store=store, owner="A")


def _answers(store: Any) -> list[Any]:
    return [r for r in store.records(CID, kinds=["event"]) if "approval_answer" in r.data]


def test_an_answer_from_another_kernel_lets_the_waiting_call_run(stores: tuple[Any, Any]) -> None:
    a, b = stores
    calls: list[str] = []
    seen: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> Any:
        seen.append(request)
        assert request.ballot is not None
        [asked] = approvals(b.records(CID)).values()  # kernel B draws the request from the records
        assert asked.summary == "bash: echo hi" and asked.owner == "A" and asked.answer is None
        threading.Timer(0.3, answer_request, (b, CID, asked.seq, True)).start()
        return (await request.ballot.wait()).approved

    out = asyncio.run(
        execute_tool(with_approval(_tool(calls), policy="ask", approver=approver), {"command": "echo hi"}, _ctx(a))
    )
    assert calls == ["echo hi"] and not out.is_error
    assert out.approval == ApprovalFacts("approved", True, "ask", by=here(), rule="default: ask")
    [answer] = _answers(a)
    assert answer.data["approval_answer"]["outcome"] == "approved"


def test_the_first_answer_wins_and_a_later_local_one_takes_it(stores: tuple[Any, Any]) -> None:
    a, b = stores
    calls: list[str] = []

    async def approver(request: ApprovalRequest) -> bool:
        assert request.ballot is not None
        answer_request(b, CID, request.ballot.seq, True)  # kernel B clicked Approve first
        return False  # this kernel's Deny came second

    out = asyncio.run(
        execute_tool(with_approval(_tool(calls), policy="ask", approver=approver), {"command": "x"}, _ctx(a))
    )
    assert calls == ["x"] and out.approval is not None and out.approval.approved is True
    assert len(_answers(a)) == 1


def test_concurrent_answers_from_many_connections_have_exactly_one_winner(db: str, stores: tuple[Any, Any]) -> None:
    a, _ = stores
    ballot = open_ballot(a, CID, "s1", "A", call_id="k1", tool="bash", summary="bash: x")
    others = [_open(db) for _ in range(6)]
    won: list[Any] = []
    go = threading.Barrier(len(others))

    def click(i: int) -> None:
        go.wait()
        won.append(answer_request(others[i], CID, ballot.seq, i % 2 == 0))

    threads = [threading.Thread(target=click, args=(i,)) for i in range(len(others))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for s in others:
        s.close()
    assert len(won) == len(others) and len(set(won)) == 1, won  # everyone got the same answer back
    assert len(_answers(a)) == 1
    assert ballot.answer() == won[0]


def test_a_request_whose_kernel_lost_the_conversation_can_only_end(stores: tuple[Any, Any]) -> None:
    a, b = stores
    ballot = open_ballot(a, CID, "s1", "A", call_id="k1", tool="bash", summary="bash: x")
    a.release_lease(CID, "A")
    assert b.acquire_lease(CID, "C", ttl=60)  # a recovering kernel took it over
    won = answer_request(b, CID, ballot.seq, True)
    assert won.outcome == "ended" and won.approved is None
    assert "no longer runs the conversation" in (won.reason or "")
    assert answer_request(b, CID, ballot.seq, True) == won  # a second click changes nothing


def test_a_request_whose_run_settled_can_only_end(stores: tuple[Any, Any]) -> None:
    a, b = stores
    ballot = open_ballot(a, CID, "s1", "A", call_id="k1", tool="bash", summary="bash: x")
    assert a.settle("s1", Outcome.ABORTED, now=time.time(), owner="A")
    won = answer_request(b, CID, ballot.seq, False)
    assert won.outcome == "ended" and "run ended" in (won.reason or "")


def test_a_request_of_an_expired_lease_can_only_end(stores: tuple[Any, Any]) -> None:
    a, b = stores
    ballot = open_ballot(a, CID, "s1", "A", call_id="k1", tool="bash", summary="bash: x")
    assert a.acquire_lease(CID, "A", ttl=0.05)  # the asker stopped renewing: its lease runs out
    time.sleep(0.3)
    won = answer_request(b, CID, ballot.seq, True)
    assert won.outcome == "ended" and "lease ran out" in (won.reason or "")


def test_the_asker_sees_an_ended_request_as_no_answer_and_the_fallback_applies(stores: tuple[Any, Any]) -> None:
    a, b = stores
    calls: list[str] = []

    async def approver(request: ApprovalRequest) -> Any:
        assert request.ballot is not None
        answer_request(b, CID, request.ballot.seq, True, ended="closed by a test")
        won = await request.ballot.wait()
        assert won.outcome == "ended"
        from flue_nb.runtime.tools.approval import Unanswered

        return Unanswered(won.reason or "")

    tool = with_approval(_tool(calls), policy="ask", approver=approver, fallback="deny")
    out = asyncio.run(execute_tool(tool, {"command": "x"}, _ctx(a)))
    assert calls == [] and out.is_error and out.approval is not None and out.approval.fallback == "deny"


def test_a_timed_out_request_ends_for_every_view_and_a_late_click_changes_nothing(stores: tuple[Any, Any]) -> None:
    a, b = stores
    from flue_nb.runtime.tools.approval import Unanswered

    async def approver(request: ApprovalRequest) -> Any:
        return Unanswered("time (nobody answered within 0.5 s in any view)")

    calls: list[str] = []
    out = asyncio.run(
        execute_tool(with_approval(_tool(calls), policy="ask", approver=approver), {"command": "x"}, _ctx(a))
    )
    assert calls == [] and out.approval is not None and out.approval.fallback == "deny"
    [asked] = approvals(b.records(CID)).values()
    assert asked.answer is not None and asked.answer.outcome == "ended"
    assert "nobody answered within 0.5 s" in (asked.answer.reason or "")
    assert answer_request(b, CID, asked.seq, True) == asked.answer  # B's click came too late


def test_a_run_stopped_while_asking_ends_its_request(stores: tuple[Any, Any]) -> None:
    a, b = stores

    async def approver(request: ApprovalRequest) -> bool:
        raise KeyboardInterrupt  # stands for an abort reaching the waiting approver

    tool = with_approval(_tool([]), policy="ask", approver=approver)
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(execute_tool(tool, {"command": "x"}, _ctx(a)))
    [asked] = approvals(b.records(CID)).values()
    assert asked.answer is not None and asked.answer.outcome == "ended"
    assert "stopped before an answer" in (asked.answer.reason or "")


def test_closing_what_is_not_a_request_is_refused(stores: tuple[Any, Any]) -> None:
    a, _ = stores
    [rec] = a.append(CID, "s1", [("event", {"note": 1})], now=time.time())
    with pytest.raises(StoreError, match="not an approval request"):
        a.close_approval(CID, rec.seq, {"outcome": "approved", "by": "x"}, now=time.time())
    ballot = open_ballot(a, CID, "s1", "A", call_id="k1", tool="bash", summary="bash: x")
    with pytest.raises(ValueError, match="outcome"):
        a.close_approval(CID, ballot.seq, {"outcome": "maybe"}, now=time.time())
    with pytest.raises(StoreError, match="not an approval request"):
        a.close_approval("team:other", ballot.seq, {"outcome": "approved"}, now=time.time())


def test_without_a_store_the_approver_gets_no_ballot() -> None:
    seen: list[ApprovalRequest] = []

    async def approver(request: ApprovalRequest) -> bool:
        seen.append(request)
        return True

    out = asyncio.run(
        execute_tool(with_approval(_tool([]), policy="ask", approver=approver), {"command": "x"}, ToolContext("c1"))
    )
    assert not out.is_error and seen[0].ballot is None and out.approval is not None and out.approval.by is None


# --- a subagent's call (issue 19.3): recorded under the top-level submission whose `task` runs it


def _delegating(approver: Any, calls: list[str], *, nested: bool = False) -> Any:
    """An agent whose `task` call runs a subagent that calls `bash` under `ask` (with `nested`,
    through a middle subagent's own `task` call)."""
    import flue_nb as flue
    from flue_nb.models import ScriptedModel, reply, tool_call

    @flue.agent
    def writer_fn() -> None:
        flue.use_tool(with_approval(_tool(calls), policy="ask", approver=approver))

    child = ScriptedModel([reply("", tool_call("bash", "sub1", command="echo sub")), reply("sub done")])
    writer = flue.define_subagent("writer", "Writes files.", agent=writer_fn, model=child)
    if nested:
        inner = writer

        @flue.agent
        def middle_fn() -> None:
            flue.use_subagent(inner)

        middle = ScriptedModel([reply("", tool_call("task", "t2", prompt="write it", agent="writer")), reply("ok")])
        writer = flue.define_subagent("middle", "Delegates.", agent=middle_fn, model=middle)
    parent = ScriptedModel([reply("", tool_call("task", "t1", prompt="write it", agent=writer.name)), reply("Done.")])

    @flue.agent
    def boss() -> None:
        flue.use_model(parent)
        flue.use_subagent(writer)

    return boss


def _requests(store: Any, cid: str) -> list[Any]:
    return [r for r in store.records(cid, kinds=["event"]) if "approval_request" in r.data]


@pytest.mark.parametrize("nested", [False, True], ids=["subagent", "nested"])
def test_a_subagents_call_is_answered_from_another_kernel_through_the_parents_submission(db: str, nested: bool) -> None:
    import flue_nb as flue

    b = _open(db)  # kernel B: its own connection
    calls: list[str] = []
    seen: dict[str, Any] = {}

    async def approver(request: ApprovalRequest) -> Any:
        assert request.ballot is not None, "a subagent's request must be recorded"
        [asked] = approvals(b.records("team:sub")).values()  # B draws it from the records
        seen["asked"] = asked
        threading.Timer(0.3, answer_request, (b, "team:sub", asked.seq, True)).start()
        return (await request.ballot.wait()).approved

    s = flue.init(_delegating(approver, calls, nested=nested), db=db, conversation="team:sub")
    try:
        receipt = s.dispatch("delegate it")
        for _ in range(600):
            if _requests(b, "team:sub"):
                break
            time.sleep(0.01)
        lease = s.lease()  # while the subagent's call waits: the parent's run holds it
        owner = lease.owner if lease is not None else None
        sub = s.wait(receipt, timeout=60)
        events = s.events()
    finally:
        b.close()
    assert sub.outcome == Outcome.COMPLETED, sub
    asked = seen["asked"]
    assert asked.call_id == "sub1" and asked.summary == "bash: echo sub" and asked.owner == owner
    [request] = _requests(s.store, "team:sub")
    assert request.submission_id == receipt.submission_id  # under the parent's submission, fenced by its lease
    assert calls == ["echo sub"]
    [end] = [e for e in events if e.type == "tool" and e.call_id == "sub1"]
    assert end.task_id == ("t2" if nested else "t1") and end.approval is not None and end.approval.approved is True
    assert end.approval.by == here()


def test_a_subagents_request_ends_when_the_parent_run_is_aborted(db: str) -> None:
    import flue_nb as flue

    b = _open(db)
    calls: list[str] = []

    async def approver(request: ApprovalRequest) -> Any:
        assert request.ballot is not None
        return (await request.ballot.wait()).approved  # nobody here answers: the parent is stopped

    s = flue.init(_delegating(approver, calls), db=db, conversation="team:sub2")
    try:
        receipt = s.dispatch("delegate it")
        for _ in range(600):
            if approvals(b.records("team:sub2")):
                break
            time.sleep(0.05)
        [asked] = approvals(b.records("team:sub2")).values()
        assert asked.answer is None
        s.abort()
        sub = s.wait(receipt, timeout=60)
        late = answer_request(b, "team:sub2", asked.seq, True)  # B's click after the parent settled
    finally:
        b.close()
    assert sub.outcome == Outcome.ABORTED, sub
    assert late.outcome == "ended" and "stopped before an answer" in (late.reason or ""), late
    assert calls == []


@pytest.mark.parametrize(("first", "kind"), [("", "process"), ("import ipykernel.kernelapp;", "kernel")])
def test_who_answered_is_named_a_kernel_only_in_a_kernel(first: str, kind: str) -> None:
    import subprocess
    import sys

    code = f"{first}from flue_nb.runtime.tools.ballot import here; print(here())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith(f"{kind} ") and " on " in out, out
