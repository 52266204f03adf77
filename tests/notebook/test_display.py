"""The cell view and its throttled live output, without a kernel (events in, renders out)."""

from __future__ import annotations

from flue_nb.notebook.magics._display import LiveOutput
from flue_nb.notebook.views.transcript import CellView
from flue_nb.runtime import events as ev
from flue_nb.runtime.events import ErrorInfo, Event


def _delta(text: str, sid: str = "s1") -> Event:
    return ev.TextDelta(delta=text, submission_id=sid)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_deltas_are_batched_to_one_update_per_interval_plus_the_final_one():
    clock, sent = _Clock(), []
    view = CellView("hi", "c1")
    live = LiveOutput(view, lambda obj: sent.append(obj.text_plain()), interval=0.1, clock=clock)
    live.bind("s1")
    for i in range(1000):  # 1000 deltas over 1 s of (fake) time
        clock.now = i / 1000
        live.feed(_delta(f"w{i} "))
    live.feed(ev.SubmissionSettled(outcome="completed", submission_id="s1"))
    live.finish()
    assert 2 <= len(sent) <= 1 / 0.1 + 2
    assert sent[-1].startswith("w0 w1 ") and sent[-1].endswith("w999\n[✓ completed]")


def test_nothing_is_sent_after_the_final_update():
    sent: list[object] = []
    live = LiveOutput(CellView("hi", "c1"), sent.append, interval=0.0)
    live.bind("s1")
    live.finish("FINAL")
    live.feed(_delta("late"))
    live.flush()
    assert sent == ["FINAL"]


def test_events_before_the_submission_id_is_known_are_kept():
    view = CellView("hi", "c1")
    live = LiveOutput(view, lambda obj: None, interval=0.0)
    live.feed(_delta("early "))
    live.feed(_delta("not ours", sid="other"))
    live.bind("s1")
    live.feed(_delta("late"))
    assert view.text_plain() == "early late\n[queued…]"


def test_tool_signal_compaction_lines_and_metadata():
    view = CellView("hi", "c1", submission_id="s1")
    s1 = {"submission_id": "s1"}
    for event in [
        ev.SubmissionRunning(attempt=1, agent="a", **s1),
        ev.ToolStart(call_id="a", name="bash", input={"command": "ls -la\nmore"}, **s1),
        ev.ToolEnd(call_id="a", name="bash", is_error=False, content="x.txt\ny.txt", duration_ms=3.5, **s1),
        ev.ToolStart(call_id="b", name="read", input={"path": "nope.txt"}, **s1),
        ev.ToolEnd(call_id="b", name="read", is_error=True, content="File not found: nope.txt", **s1),
        ev.Signal(signal_type="resources", text="...", changes=("Mounted tools: `lookup`",), **s1),
        ev.CompactionStart(reason="threshold", estimated_tokens=900, **s1),
        ev.CompactionEnd(
            reason="threshold",
            messages_before=9,
            messages_after=3,
            duration_ms=1.0,
            tokens_before=900,
            tokens_after=200,
            summary="## Goal\nsecret summary",
            **s1,
        ),
        ev.SubmissionSettled(outcome="failed", error=ErrorInfo("run_error", "boom"), **s1),
    ]:
        view.apply(event)
    assert view.text_plain().split("\n") == [
        "· bash: ls -la… ✓ → x.txt…",
        "· read: nope.txt ✗ File not found: nope.txt",
        "· signal (resources): Mounted tools: lookup",
        "· compacting the context (threshold)…",
        "· compacted: 900 → 200 tokens (9 → 3 messages)",
        "[✗ failed: boom]",
    ]
    assert "Goal" not in view.markdown()  # the summary is never shown as the answer
    meta = view._repr_mimebundle_()[1]["flue"]
    assert meta["tools"][0] == {"name": "bash", "ok": True, "duration_ms": 3.5}
    assert meta["tools"][1]["ok"] is False and meta["status"] == "failed"
    assert "0x" not in repr(view)


def test_recovery_shown_once_from_the_store_and_from_events():
    view = CellView("hi", "c1", submission_id="s1")
    view.recovery("old")
    view.apply(ev.SubmissionRecovery(attempts=1, submission_id="old"))
    view.apply(ev.SubmissionSettled(outcome="completed", result="The old answer.", submission_id="old"))
    view.recovery("old", "completed")
    assert view.text_plain().split("\n") == [
        "↻ recovering submission old (interrupted)",
        "↻ recovered submission old: settled completed",
        "The old answer.",
        "[queued…]",
    ]


def test_a_joined_message_shows_the_response_it_joined_and_its_own_outcome():
    view = CellView("also this", "c1", submission_id="s2")
    view.apply(ev.TextDelta(delta="before the join", submission_id="s1"))
    view.apply(ev.MessageEnd(role="user", text="also this", from_submission_id="s2", submission_id="s1"))
    view.apply(ev.TextDelta(delta="Handled both.", submission_id="s1"))
    view.apply(ev.SubmissionSettled(outcome="completed", result="Handled both.", submission_id="s1"))
    assert view.status == "queued"
    view.apply(ev.SubmissionSettled(outcome="completed", result="Handled both.", joined_into="s1", submission_id="s2"))
    assert view.text_plain().split("\n") == [
        "↪ joined the response that was already running",
        "Handled both.",
        "[✓ completed]",
    ]


def test_a_task_call_is_one_line_naming_the_subagent_and_its_answer():
    view = CellView("check", "c1", submission_id="s1")
    s1 = {"submission_id": "s1"}
    for event in [
        ev.ToolStart(call_id="t1", name="task", input={"agent": "reviewer", "description": "check totals"}, **s1),
        ev.TaskStart(agent="reviewer", description="check totals", task_id="t1", **s1),
        ev.TextDelta(delta="child text", task_id="t1", **s1),
        ev.TaskEnd(agent="reviewer", text="The numbers add up.", task_id="t1", **s1),
        ev.ToolEnd(call_id="t1", name="task", is_error=False, content="The numbers add up.", **s1),
    ]:
        view.apply(event)
    assert view.text_plain().split("\n") == [
        "· task: reviewer: check totals ✓ → The numbers add up.",
        "[queued…]",
    ]


def test_the_cells_metadata_carries_token_totals_and_a_list_price_cost():
    from flue_nb.runtime.messages import Usage

    view = CellView("hi", "c1", submission_id="s1")
    s1 = {"submission_id": "s1"}
    view.apply(ev.TurnEnd(turn=1, usage=Usage(1200, 30), model="claude-sonnet-4-6", **s1))
    view.apply(ev.TurnEnd(turn=2, usage=Usage(100, 10, 1000, 0), model="claude-sonnet-4-6-20260101", **s1))
    # A subagent's call: not in the cell's own tokens, but in what the cell cost.
    view.apply(ev.TurnEnd(turn=1, usage=Usage(1000, 100), model="claude-haiku-4-5", task_id="t1", **s1))
    meta = view.metadata()
    assert meta["tokens"] == {"total": 2340, "input": 1300, "output": 40, "cache_read": 1000, "cache_write": 0}
    own = (1300 * 3 + 40 * 15 + 1000 * 0.3) / 1_000_000
    assert meta["cost_usd"] == round(own + (1000 * 1 + 100 * 5) / 1_000_000, 6)
    assert meta["cost"].startswith("≈ $0.0063 at list prices of ")
    offline = CellView("hi", "c1", submission_id="s1")
    offline.apply(ev.TurnEnd(turn=1, usage=Usage(5, 5), model="scripted", **s1))
    assert offline.metadata()["cost_usd"] is None and offline.metadata()["cost"] == ""


def test_status_says_the_cost_when_a_priced_model_answered():
    from flue_nb.notebook.views.history import status_view
    from flue_nb.runtime.messages import Usage
    from flue_nb.runtime.session import SessionStatus

    def status(cost, unpriced):
        return SessionStatus(
            "c", "a", "m", (), (), None, False, False, None, 10, 100, None, Usage(), {}, cost, unpriced
        )

    lines = status_view(status(0.0123, 2), store="s").plain.split("\n")
    assert lines[-2].startswith("cost: ≈ $0.0123 at list prices of 20")
    assert lines[-2].endswith(", 2 responses of unpriced models not counted")
    assert lines[-1].startswith("submissions:")
    assert not any(ln.startswith("cost:") for ln in status_view(status(None, 3), store="s").plain.split("\n"))


def test_a_note_made_before_the_submission_id_is_known_stays_in_the_transcript():
    view = CellView("hi", "c1")
    view.note("waiting for the lease")
    view.submission_id = "s1"
    view.apply(_delta("answer"))
    assert view.text_plain().split("\n") == ["waiting for the lease", "answer", "[queued…]"]
