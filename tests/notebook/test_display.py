"""The cell view and its throttled live output, without a kernel (events in, renders out)."""

from __future__ import annotations

from flue_nb.notebook._live import LiveOutput
from flue_nb.notebook.display import CellView
from flue_nb.runtime.events import Event


def _ev(type_: str, sid: str | None = "s1", **data) -> Event:
    return Event(type_, 0, 0.0, "c1", sid, None, None, data)  # type: ignore[arg-type]


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
        live.feed(_ev("text_delta", delta=f"w{i} "))
    live.feed(_ev("submission_settled", outcome="completed"))
    live.finish()
    assert 2 <= len(sent) <= 1 / 0.1 + 2
    assert sent[-1].startswith("w0 w1 ") and sent[-1].endswith("w999\n[✓ completed]")


def test_nothing_is_sent_after_the_final_update():
    sent: list[object] = []
    live = LiveOutput(CellView("hi", "c1"), sent.append, interval=0.0)
    live.bind("s1")
    live.finish("FINAL")
    live.feed(_ev("text_delta", delta="late"))
    live.flush()
    assert sent == ["FINAL"]


def test_events_before_the_submission_id_is_known_are_kept():
    view = CellView("hi", "c1")
    live = LiveOutput(view, lambda obj: None, interval=0.0)
    live.feed(_ev("text_delta", delta="early "))
    live.feed(_ev("text_delta", sid="other", delta="not ours"))
    live.bind("s1")
    live.feed(_ev("text_delta", delta="late"))
    assert view.text_plain() == "early late\n[queued…]"


def test_tool_signal_compaction_lines_and_metadata():
    view = CellView("hi", "c1", submission_id="s1")
    for ev in [
        _ev("submission_running"),
        _ev("tool_start", call_id="a", name="bash", input={"command": "ls -la\nmore"}),
        _ev(
            "tool",
            call_id="a",
            name="bash",
            is_error=False,
            content="x.txt\ny.txt",
            duration_ms=3.5,
        ),
        _ev("tool_start", call_id="b", name="read", input={"path": "nope.txt"}),
        _ev("tool", call_id="b", name="read", is_error=True, content="File not found: nope.txt"),
        _ev("signal", signal_type="roster_changed", text="..."),
        _ev("compaction", tokens_before=900, tokens_after=200, is_error=False),
        _ev("submission_settled", outcome="failed", error={"message": "boom"}),
    ]:
        view.apply(ev)
    assert view.text_plain().split("\n") == [
        "· bash: ls -la… ✓ → x.txt…",
        "· read: nope.txt ✗ File not found: nope.txt",
        "· signal: roster_changed",
        "· compacted: 900 → 200 tokens",
        "[✗ failed: boom]",
    ]
    meta = view._repr_mimebundle_()[1]["flue"]
    assert meta["tools"][0] == {"name": "bash", "ok": True, "duration_ms": 3.5}
    assert meta["tools"][1]["ok"] is False and meta["status"] == "failed"
    assert "0x" not in repr(view)


def test_recovery_shown_once_from_the_store_and_from_events():
    view = CellView("hi", "c1", submission_id="s1")
    view.recovery("old")
    view.apply(_ev("submission_recovery", sid="old"))
    view.apply(_ev("submission_settled", sid="old", outcome="completed"))
    view.recovery("old", "completed")
    assert view.text_plain().split("\n") == [
        "↻ recovering submission old (interrupted)",
        "↻ recovered submission old: settled completed",
        "[queued…]",
    ]
