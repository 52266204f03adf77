"""A `%flue` cell's run (`CellRun`: send, watch, finish): its view learns the answer and the token
totals once, from the submission's events, and never from the store at the end."""

from __future__ import annotations

import time
from typing import Any

from flue_nb.notebook.magics.run import CellRun
from flue_nb.runtime import events as ev
from flue_nb.runtime.messages import Usage
from flue_nb.runtime.session import Receipt
from flue_nb.runtime.tools.summary import Summaries

_REPORTED = Usage(10, 5, 0, 0)


class _Session:
    """What a cell's run asks of a session; the store's totals and `read`'s value differ from
    the events on purpose, so a view reading them would show it."""

    conversation_id = "c"

    def __init__(self, usage: Usage | None = _REPORTED) -> None:
        self.summaries = Summaries()
        self.turn_usage = usage
        self.observers: list[Any] = []

    def lease(self) -> None:
        return None

    def observe(self, cb: Any) -> Any:
        self.observers.append(cb)
        return lambda: self.observers.remove(cb) if cb in self.observers else None

    def dispatch(self, message: str, **_: Any) -> Receipt:
        for e in (
            ev.SubmissionRunning(submission_id="s1", attempt=1, agent="a"),
            ev.TextDelta(submission_id="s1", delta="The answer"),
            ev.MessageEnd(submission_id="s1", role="assistant", text="The answer"),
            ev.TurnEnd(submission_id="s1", turn=1, usage=self.turn_usage),
            ev.SubmissionSettled(submission_id="s1", outcome="completed", result="The answer"),
        ):
            for cb in list(self.observers):
                cb(e)
        return Receipt("s1", time.time(), "c")

    def read(self, receipt: Receipt, timeout: float | None = None) -> str:
        return "what the store says"

    def usage(self, submission_id: str | None = None) -> Usage:
        raise AssertionError("the cell's totals come from its events")


def test_a_cells_answer_and_totals_come_from_its_events_once(capsys: Any) -> None:
    run = CellRun(_Session(), "hi", agent="a", model="m", background=False, stream=False)  # type: ignore[arg-type]
    run.run()
    view = run.view
    assert view.status == "completed" and view.reply == "The answer"
    assert view.tokens == {"input": 10, "output": 5, "cache_read": 0, "cache_write": 0, "total": 15}
    # The answer is drawn once: the streamed text and its stored copy are one part.
    assert view.text_plain().count("The answer") == 1
    assert "what the store says" not in view.text_plain()


def test_a_server_that_reports_no_usage_is_said_so_not_zero(capsys: Any) -> None:
    run = CellRun(_Session(usage=None), "hi", agent="a", model="m", background=False, stream=False)  # type: ignore[arg-type]
    run.run()
    assert run.view.notes["tokens_reported"] is False
    reported = CellRun(_Session(), "hi", agent="a", model="m", background=False, stream=False)  # type: ignore[arg-type]
    reported.run()
    assert "tokens_reported" not in reported.view.notes
