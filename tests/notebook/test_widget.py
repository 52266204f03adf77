"""The chat widget's kernel side: its synced traits, its batching, its buttons (no browser)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("anywidget", reason="the chat widget needs the `widget` extra")

import flue_nb as flue
from flue_nb.models import FunctionModel, ScriptedModel, fail, reply, tool_call
from flue_nb.notebook.kernel.approve import notebook_approver
from flue_nb.notebook.views.chat._fold import RESULT_CHARS, ChatFold
from flue_nb.notebook.views.chat.widget import RATE, ChatWidget, open_widgets
from flue_nb.runtime.events import (
    CompactionEnd,
    CompactionStart,
    MessageEnd,
    Signal,
    SubmissionQueued,
    SubmissionSettled,
    TaskEnd,
    TaskStart,
    ToolEnd,
    ToolStart,
    ToolUpdate,
)


def _session(tmp_path: Path, model: Any, *, approval: str = "allow", cid: str = "w") -> Any:
    sandbox = flue.kernel(tmp_path, namespace={}, approval=approval, approver=notebook_approver)  # type: ignore[arg-type]

    @flue.agent
    def helper() -> str:
        flue.use_model(model)
        flue.use_sandbox(sandbox)
        return "Be brief."

    return flue.init(helper, conversation=cid, db=str(tmp_path / "flue.sqlite"))


def _all_parts(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for b in blocks for p in b["parts"]]


def test_a_run_becomes_text_and_tool_cards_with_namespace_diff_and_outcome(tmp_path: Path) -> None:
    model = ScriptedModel([
        reply("Looking **now**.", tool_call("bash", "c1", command="echo hi"), tool_call("python", "c2", code="x = 6 * 7")),
        reply("x is `42`.", usage=(1200, 30)),
    ])  # fmt: skip
    session = _session(tmp_path, model)
    w = ChatWidget(session)
    assert session.prompt("what is x?") == "x is `42`."
    [block] = w.history
    assert block["text"] == "what is x?" and block["outcome"] == "completed"
    kinds = [(p["kind"], p.get("name"), p.get("status")) for p in block["parts"]]
    assert kinds == [("text", None, None), ("tool", "bash", "ok"), ("tool", "python", "ok"), ("text", None, None)]
    bash, py = block["parts"][1], block["parts"][2]
    assert bash["summary"] == "echo hi" and bash["result"]["text"].strip() == "hi"
    assert bash["duration_ms"] is not None and bash["duration_ms"] >= 0
    assert py["namespace"] == {"added": ["x"], "changed": [], "removed": []}
    assert w.status["usage"]["input"] == 1200 and w.status["usage"]["output"] == 30
    assert w.status["context_window"] == 200_000
    assert w.live == []
    assert repr(w) == "<flue_nb ChatWidget conversation='w' mode='chat'>"


def test_the_gauge_says_what_the_conversation_cost_at_list_prices(tmp_path: Path) -> None:
    session = _session(tmp_path, ScriptedModel([reply("ok", usage=(1200, 30))], id="claude-sonnet-4-6"))
    w = ChatWidget(session)
    session.prompt("hi")
    w.flush()
    assert w.status["cost"] == "≈ $0.0040"  # the explanation is the tooltip
    assert w.status["cost_note"].startswith("≈ $0.0040 at list prices of ")
    assert w.status["tokens_reported"] is True


def test_the_gauge_says_when_the_model_server_reported_no_tokens(tmp_path: Path) -> None:
    # It drew "in 0 · out 0" as if measured; `%flue status` says "not reported".
    session = _session(tmp_path, ScriptedModel([reply("ok")]), cid="unreported")
    w = ChatWidget(session)
    session.prompt("hi")
    w.flush()
    assert w.status["tokens_reported"] is False
    assert ChatWidget(session).status["tokens_reported"] is False  # a view drawn from the store too


def test_streaming_is_batched_and_the_final_text_is_identical(tmp_path: Path) -> None:
    words = [f"w{i} " for i in range(10_000)]
    text = "".join(words)
    model = FunctionModel(lambda req: reply(text), delay=0.0001)
    session = _session(tmp_path, model)
    w = ChatWidget(session)
    seen: list[float] = []
    w.observe(lambda change: seen.append(time.monotonic()), names=["live", "history"])
    started = time.monotonic()
    session.prompt("go")
    elapsed = time.monotonic() - started
    [block] = w.history
    assert "".join(p["text"] for p in block["parts"] if p["kind"] == "text") == text
    assert w.fold.text() == text
    # At most RATE updates a second while streaming, plus the first and the settlement ones.
    assert w.updates <= RATE * elapsed + 5, (w.updates, elapsed)


def test_long_results_are_clipped_with_their_full_size(tmp_path: Path) -> None:
    fold = ChatFold()
    big = "\n".join(f"line {i}" for i in range(5000))
    fold.apply(ToolStart(submission_id="s", call_id="c", name="read", input={"path": "big.txt"}))
    fold.apply(ToolEnd(submission_id="s", call_id="c", name="read", is_error=False, content=big, duration_ms=3.0))
    [tool] = _all_parts(fold.live())
    assert tool["result"]["clipped"] and len(tool["result"]["text"]) == RESULT_CHARS
    assert tool["result"]["lines"] == 5000 and tool["result"]["bytes"] == len(big.encode())


def test_a_running_tool_card_shows_the_progress_it_reports() -> None:
    fold = ChatFold()
    fold.apply(ToolStart(submission_id="s", call_id="c", name="mcp__x__build", input={}))
    fold.apply(ToolUpdate(submission_id="s", call_id="c", name="mcp__x__build", progress=2, total=5, message="linking"))
    [tool] = _all_parts(fold.live())
    assert (tool["status"], tool["progress"]) == ("running", "2/5 · linking")
    fold.apply(ToolUpdate(submission_id="s", call_id="c", name="mcp__x__build", progress=7))
    [tool] = _all_parts(fold.live())
    assert tool["progress"] == "7"


def test_signals_compaction_tasks_joined_and_recovered_runs_are_drawn() -> None:
    fold = ChatFold()
    fold.apply(SubmissionQueued(submission_id="s1", text="first", accepted_at=1.0))
    fold.apply(Signal(submission_id="s1", signal_type="resources", text="<signal/>", changes=("Mounted tools: `x`",)))
    fold.apply(CompactionStart(submission_id="s1", reason="threshold", estimated_tokens=9000))
    fold.apply(CompactionEnd(submission_id="s1", reason="threshold", messages_before=9, messages_after=3,
                             duration_ms=5.0, tokens_before=9000, tokens_after=1200, summary="## Goal\nfind x"))  # fmt: skip
    fold.apply(ToolStart(submission_id="s1", call_id="t1", name="task", input={"description": "review"}))
    fold.apply(TaskStart(submission_id="s1", task_id="t1", agent="reviewer", description="review"))
    fold.apply(ToolStart(submission_id="s1", task_id="t1", call_id="t2", name="read", input={"path": "a.py"}))
    fold.apply(TaskEnd(submission_id="s1", task_id="t1", agent="reviewer", text="fine"))
    fold.apply(SubmissionQueued(submission_id="s2", text="and this", accepted_at=2.0, state="joining"))
    fold.apply(MessageEnd(submission_id="s1", role="user", text="and this", from_submission_id="s2"))
    fold.apply(SubmissionSettled(submission_id="s1", outcome="completed", result="done", recovered=True))
    fold.apply(SubmissionSettled(submission_id="s2", outcome="completed", joined_into="s1"))
    s1, s2 = fold.history()
    kinds = [p["kind"] for p in s1["parts"]]
    assert kinds == ["signal", "compaction", "tool", "user", "text"]
    assert s1["parts"][0]["changes"] == ["Mounted tools: `x`"]
    comp = s1["parts"][1]
    assert (comp["tokens_before"], comp["tokens_after"], comp["summary"]) == (9000, 1200, "## Goal\nfind x")
    task = s1["parts"][2]["task"]
    assert task["agent"] == "reviewer" and task["text"] == "fine"
    assert [p["name"] for p in task["parts"]] == ["read"]
    assert task["parts"][0]["status"] == "failed"  # its submission settled underneath it
    assert s1["parts"][3] == {"kind": "user", "text": "and this", "from": "s2"}
    assert s1["recovered"] and s1["parts"][4]["text"] == "done"  # a recovered run's answer
    assert s2["state"] == "joined" and s2["joined_into"] == "s1"


def test_a_message_sent_while_busy_is_queued_then_joins(tmp_path: Path) -> None:
    def answer(req: Any) -> Any:
        users = [m.text for m in req.messages if m.kind == "user"]
        if len(req.messages) == 1:  # a slow first turn that calls a tool: a turn boundary follows
            return reply(" ".join(f"t{i}" for i in range(150)), tool_call("bash", command="echo busy"))
        return reply("saw: " + " | ".join(users))

    session = _session(tmp_path, FunctionModel(answer, delay=0.01))
    w = ChatWidget(session)
    first = w.send_message("first")
    _until(lambda: any(b["state"] == "running" for b in w.live))
    second = w.send_message("second")
    _until(lambda: any(b["id"] == second.submission_id and b["state"] in ("joining", "queued") for b in w.live))
    assert session.read(first).startswith("saw: first")
    session.read(second)
    _until(lambda: not w.live)
    by_id = {b["id"]: b for b in w.history}
    assert by_id[second.submission_id]["state"] == "joined"
    assert {"kind": "user", "text": "second", "from": second.submission_id} in by_id[first.submission_id]["parts"]


def test_approve_runs_the_tool_and_deny_refuses_it(tmp_path: Path) -> None:
    model = ScriptedModel([
        reply("", tool_call("bash", "a1", command="echo approved > a.txt")), reply("ran"),
        reply("", tool_call("bash", "a2", command="echo denied > d.txt")), reply("refused"),
    ])  # fmt: skip
    session = _session(tmp_path, model, approval="ask")
    w = ChatWidget(session)
    for call_id, yes, name in (("a1", True, "a.txt"), ("a2", False, "d.txt")):
        receipt = w.send_message("go")
        _until(lambda c=call_id: _tool(w, c).get("status") == "awaiting_approval")
        assert "bash: echo" in _tool(w, call_id)["ask"]
        assert w.answer(call_id, yes)
        session.read(receipt)
        _until(lambda: not w.live)
        assert (tmp_path / name).exists() is yes
        card = _tool(w, call_id)
        assert card["status"] == ("ok" if yes else "denied")  # a refusal is drawn as denied, not as an error (19.8)
        assert card["approval"]["reason"] == ("approved" if yes else "declined")


def test_stop_aborts_durably(tmp_path: Path) -> None:
    model = FunctionModel(lambda req: reply(" ".join(f"s{i}" for i in range(4000))), delay=0.002)
    session = _session(tmp_path, model)
    w = ChatWidget(session)
    receipt = w.send_message("go")
    _until(lambda: any(b["state"] == "running" for b in w.live))
    w.stop()
    with pytest.raises(flue.SubmissionAbortedError):
        session.read(receipt)
    _until(lambda: bool(w.history) and w.history[-1]["outcome"] == "aborted")
    assert [s.outcome.value for s in session.submissions()] == ["aborted"]


def test_no_one_to_ask_falls_back_and_says_which_policy(tmp_path: Path, monkeypatch: Any) -> None:
    def no_stdin(prompt: str = "") -> str:
        raise EOFError("no stdin")  # what a cell's input() meets when its frontend has none

    monkeypatch.setattr("builtins.input", no_stdin)
    model = ScriptedModel([reply("", tool_call("bash", "n1", command="echo x > n.txt")), reply("ok")])
    session = _session(tmp_path, model, approval="ask")  # no widget open on this conversation
    session.prompt("go")
    result = [m for m in session.history() if m.kind == "tool_result"][-1]
    text = str(result)
    assert "no one to ask in this kernel" in text and "fallback policy is deny" in text
    assert not (tmp_path / "n.txt").exists()


def _tool(w: ChatWidget, call_id: str) -> dict[str, Any]:
    for block in [*w.history, *w.live]:
        for p in block["parts"]:
            if p.get("call_id") == call_id:
                return p
    return {}


def _until(cond: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def test_thinking_failures_and_compaction_between_runs_are_drawn_from_live_and_stored_events(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [reply("word " * 3000, thinking="let me think"), reply("word " * 3000), fail("invalid_request", "bad request")],
        summary="## Goal\nfind x", context_window=9000, max_output_tokens=1000,
    )  # fmt: skip

    @flue.agent
    def compacting() -> str:
        flue.use_model(model, compaction=flue.CompactionConfig(keep_recent_tokens=500))
        return "hi"

    session = flue.init(compacting, conversation="c", db=str(tmp_path / "c.sqlite"))
    live = ChatWidget(session)
    session.prompt("one")
    session.prompt("two")
    session.compact()
    with pytest.raises(flue.FlueError):
        session.prompt("three")
    for w in (live, ChatWidget(session)):  # the second one is redrawn from the store
        one, _two, aside, three = w.history
        if w is live:
            assert one["parts"][0] == {"kind": "thinking", "text": "let me think"}
        assert [p["kind"] for p in aside["parts"]] == ["compaction"]
        comp = aside["parts"][0]
        assert comp["reason"] == "manual" and comp["summary"] == "## Goal\nfind x"
        assert comp["tokens_before"] > comp["tokens_after"] > 0
        assert all("Goal" not in p.get("text", "") for b in w.history for p in b["parts"])
        assert three["outcome"] == "failed" and three["error"]["message"]


def test_a_closed_widget_stops_following_and_leaves_no_approval_waiting(tmp_path: Path) -> None:
    model = ScriptedModel([reply("one"), reply("two")])
    session = _session(tmp_path, model)
    w = ChatWidget(session)
    session.prompt("first")
    assert w in open_widgets()
    w.close()
    assert w not in open_widgets() and w.comm is None
    session.prompt("second")
    assert [b["text"] for b in w.history] == ["first"]  # nothing after close reached it


def test_rerunning_a_chat_cell_closes_that_cells_previous_chat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flue_nb.notebook.views.chat import widget as widget_module

    session = _session(tmp_path, ScriptedModel(["one", "two"]))
    cell = {"id": "cell-1"}
    monkeypatch.setattr(widget_module, "_current_cell_id", lambda: cell["id"])  # what the frontend sends
    first = ChatWidget(session)
    second = ChatWidget(session)  # the same cell, run again
    assert first not in open_widgets() and second in open_widgets()
    cell["id"] = "cell-2"
    other = ChatWidget(session)  # another cell's chat stays
    assert second in open_widgets() and other in open_widgets()
    session.prompt("hi")
    assert first.history == []  # closed before the run: it stopped following the conversation
    assert second.history[-1]["outcome"] == "completed" and other.history[-1]["outcome"] == "completed"
    second.close()
    other.close()


def test_a_burst_of_sends_then_stop_leaves_no_card_queued(tmp_path: Path) -> None:
    # Order-proof fold (22.1): a SubmissionQueued published after its settlement must not bring
    # the card back to "queued"; after Stop the widget agrees with the store.
    model = FunctionModel(lambda req: reply(" ".join(f"s{i}" for i in range(400))), delay=0.002)
    session = _session(tmp_path, model)
    w = ChatWidget(session)
    receipts = [w.send_message(f"message {i}") for i in range(25)]
    w.stop()
    for r in receipts:
        try:
            session.read(r)
        except flue.FlueError:
            pass
    _until(lambda: not session.status().queued and not session.status().running)
    w.flush()
    _until(lambda: not w.live)
    assert {b["id"] for b in w.history} >= {r.submission_id for r in receipts}
    assert all(b["state"] in ("settled", "joined") for b in w.history)


def test_a_figure_the_python_tool_draws_reaches_the_card_as_an_image(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    code = "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 3, 2])"
    model = ScriptedModel([reply("", tool_call("python", "p1", code=code)), reply("drawn")])
    session = _session(tmp_path, model)
    w = ChatWidget(session)
    session.prompt("plot")
    w.flush()
    card = _tool(w, "p1")
    [image] = card["images"]
    assert w.images[image["digest"]].startswith("data:image/png;base64,")
    # A new view rebuilt from the store finds the bytes by digest.
    again = ChatWidget(session)
    assert again.images[image["digest"]] == w.images[image["digest"]]


def test_a_fresh_chat_names_the_window_of_the_model_that_will_answer(tmp_path: Path) -> None:
    session = _session(tmp_path, ScriptedModel([reply("ok")]), cid="fresh")
    w = ChatWidget(session, model="anthropic/claude-sonnet-4-6")
    assert w.status["model"] == "claude-sonnet-4-6"  # named as a run's own model id names it
    from flue_nb.runtime.providers import context_window_of

    window = context_window_of("claude-sonnet-4-6")
    assert window is not None and w.status["context_window"] == window
    assert w.status["used_tokens"] in (None, 0)


def test_a_message_sent_with_an_echo_id_is_admitted_once_and_the_id_names_its_submission(tmp_path: Path) -> None:
    """Issue 19.7: the browser draws the message at once and sends it with an id; a re-send is a no-op."""
    session = _session(tmp_path, ScriptedModel(["one", "two"]), cid="echo")
    w = ChatWidget(session)
    w._on_browser_msg(w, {"type": "send", "text": "hello", "id": "e1"}, [])
    w._on_browser_msg(w, {"type": "send", "text": "hello", "id": "e1"}, [])  # the same message again
    w._on_browser_msg(w, {"type": "send", "text": "x", "id": 7}, [])
    assert w.error == "not sent: the message id must be a string"
    [sub] = session.submissions()
    assert w.sent == {"e1": sub.id}
    session.read(sub.id)
    w.close()


def test_a_new_kernels_chat_draws_the_cards_of_a_turn_that_reuses_the_old_turns_call_ids(tmp_path: Path) -> None:
    # Issue 33.3: the offline model starts at `call_1` in every kernel; the same message again after
    # a restart must get cards of its own, live and in a redraw, and leave the old turn's as they were.
    def script() -> ScriptedModel:
        return ScriptedModel([reply("", tool_call("bash", "call_1", command="echo hi")), reply("done")])

    first = _session(tmp_path, script())
    assert first.prompt("go") == "done"
    again = _session(tmp_path, script())  # a new kernel: the same conversation, the same store
    w = ChatWidget(again)
    [old] = w.history
    old_card = old["parts"][0]
    assert again.prompt("go") == "done"
    blocks = w.history
    assert [[p["name"] for p in b["parts"] if p["kind"] == "tool"] for b in blocks] == [["bash"], ["bash"]]
    assert blocks[0]["parts"][0] == old_card
    redrawn = ChatWidget(again).history
    assert [[p["status"] for p in b["parts"] if p["kind"] == "tool"] for b in redrawn] == [["ok"], ["ok"]]


def test_a_settlement_that_arrives_while_the_chat_redraws_from_the_store_is_kept(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # Issue 33.2: a redraw (another kernel's change) read the store just before this kernel's own
    # run settled; the live settlement went into the fold being replaced, and the chat kept
    # "running…" for good.
    from flue_nb.notebook.views.chat import widget as widget_module
    from flue_nb.runtime import events as ev
    from flue_nb.runtime.session import Page

    session = _session(tmp_path, ScriptedModel([reply("ok")]))
    w = ChatWidget(session, redraw=False, follow=False)
    stale = [ev.SubmissionQueued(submission_id="s1", text="hi", accepted_at=1.0),
             ev.SubmissionRunning(submission_id="s1", attempt=1, agent="helper")]  # fmt: skip

    def read_then_settle(_session: Any, _last: int, **_: Any) -> Any:
        w._feed(ev.SubmissionSettled(submission_id="s1", outcome="completed", result="ok"))  # live, meanwhile
        return Page(stale, [], 0, 0, 0)

    monkeypatch.setattr(widget_module, "_page", read_then_settle)
    w.redraw_from_store()
    assert w.live == []
    [block] = w.history
    assert (block["state"], block["outcome"]) == ("settled", "completed")


def test_a_chat_showing_running_what_the_store_settled_is_redrawn_whatever_it_missed(tmp_path: Path) -> None:
    # Issue 33.2: whichever notification was missed, a chat converges on the store's state: one
    # that shows a submission running the store has settled is redrawn after STALE_AFTER.
    from flue_nb.notebook.views.chat._follow import STALE_AFTER, StoreFollower

    session = _session(tmp_path, ScriptedModel([reply("ok")]))
    assert session.prompt("hi") == "ok"
    w = ChatWidget(session, follow=False)
    sid = w.history[0]["id"]
    now = [100.0]
    follower = StoreFollower(w, clock=lambda: now[0])
    follower.stop()  # looked at by hand below
    assert follower._changed_elsewhere() is False  # the first look: just drawn
    w.fold.blocks[sid].state = "running"  # what a lost settlement leaves
    follower.own_event()  # and this kernel's own events would have hidden the change
    assert follower._changed_elsewhere() is False  # seen once: a live event may still be on its way
    now[0] += STALE_AFTER
    assert follower._changed_elsewhere() is True
    w.redraw_from_store()
    assert w.live == [] and w.history[0]["state"] == "settled"
    now[0] += 60
    assert follower._changed_elsewhere() is False
