"""One `%flue` message, run and shown: the live display, waiting, interrupts, the outcome.

Where a person watches (a frontend with a widget manager), the cell's one output streams and
ends as the final transcript. In a headless run (nbclient, nbval, `flue-nb run`) nobody watches,
so the final transcript is displayed once at the end: the stored notebook and its re-run hold the
same single output (nbval compares outputs as first sent and ignores display updates). A
`--background` cell keeps its live display, which the runtime thread goes on updating.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from IPython import get_ipython
from IPython.display import clear_output, display

from flue_nb.notebook.kernel import drawing
from flue_nb.notebook.kernel.approve import prompts as _prompts
from flue_nb.notebook.magics._display import BLANK, LiveOutput, handle_publisher
from flue_nb.notebook.magics._line import FlueCellError
from flue_nb.notebook.views.transcript import CellView
from flue_nb.runtime import tracing
from flue_nb.runtime.coordinator import coordinator
from flue_nb.runtime.errors import FlueError
from flue_nb.runtime.events import ErrorInfo

if TYPE_CHECKING:
    from flue_nb.notebook.views.chat.cell import CellChat
    from flue_nb.runtime.messages import ImagePart
    from flue_nb.runtime.session import Receipt, Session

__all__ = ["CellRun", "run_message"]

INTERRUPTED = "flue: interrupted: the submission was aborted; the conversation is ready for the next cell."


def run_message(
    session: Session,
    message: str,
    *,
    agent: str,
    model: str,
    background: bool,
    opened_at: float | None = None,
    widget: bool = False,
    stream: bool | None = None,
    images: Sequence[ImagePart] = (),
    max_turns: int | None = None,
    max_cost_usd: float | None = None,
) -> None:
    """Dispatch `message` and show it; block until it settles unless `background` (a `CellRun`)."""
    run = CellRun(
        session, message, agent=agent, model=model, background=background, opened_at=opened_at, widget=widget,
        stream=stream,
    )  # fmt: skip
    run.run(images=images, max_turns=max_turns, max_cost_usd=max_cost_usd)


class CellRun:
    """One `%flue` message in its cell, in three phases: `send` it, `watch` it run, `finish` the
    cell's output.

    The cell's view is a fold of its submission's events, and that is the one way the answer and
    the token totals reach it: the streamed text (its stored text, `MessageEnd`, corrects it),
    the settled result (`view.reply`) and the totals of its model calls (`TurnEnd`). Events the
    run sent before the view watched are replayed when it binds, so nothing needs the store
    again at the end (`Session.read` only waits, and says how a run that did not complete ended).
    """

    def __init__(
        self,
        session: Session,
        message: str,
        *,
        agent: str,
        model: str,
        background: bool,
        opened_at: float | None = None,
        widget: bool = False,
        stream: bool | None = None,
    ) -> None:
        """`opened_at` is when this kernel opened the conversation, if this cell did: work admitted
        before then and unsettled at that time was left by an earlier kernel, and opening the
        session started its recovery, perhaps before this cell could watch its events.

        `widget`: the frontend draws widgets, so the cell shows the chat view of its submission,
        with the text transcript as the fallback in the same bundle (see `notebook.chat`).
        `stream`: update the output while the run goes (None: when a person's frontend watches).
        """
        self.session, self.message, self.background, self.opened_at = session, message, background, opened_at
        self.view = CellView(message, session.conversation_id, agent=agent, summaries=session.summaries)
        self.view.notes["model"] = model
        _note_lease(session, self.view)
        self.chat = _cell_chat(session, model, background) if widget else None
        # A person watching sees the transcript stream into one output, which ends as the final
        # transcript. A headless run (nbclient, nbval, `flue-nb run`) has nobody watching: it gets
        # the final transcript as the cell's one output, so a stored notebook and its re-run match
        # (nbval compares outputs as first sent) and no empty output is left before the answer.
        self.watched = background or (_watched_live() if stream is None else stream)
        self.display_id = ""
        self.publish: Callable[[object], None] = _nowhere
        self.sent: list[object] = []
        """A background cell's last output sent (`_remembering`)."""
        if self.watched:
            first = self.view if background else BLANK
            handle = display(first if self.chat is None else self.chat.bundle(first), display_id=True)
            self.publish, self.display_id = handle_publisher(handle), handle.display_id
            if background:
                self.publish = _remembering(self.publish, self.sent)
        # With the widget, the display is never re-sent while the run streams (a frontend would
        # rebuild the widget's view at each update); the widget updates itself over its comm.
        self.live = LiveOutput(self.view, self.publish if self.chat is None else self.chat.quiet)
        self.stop = session.observe(self.live.feed)
        _show_recovery(session, self.view, opened_at)
        self.prompts_before = _prompts()

    def run(
        self, *, images: Sequence[ImagePart] = (), max_turns: int | None = None, max_cost_usd: float | None = None
    ) -> None:
        """Send the message, then (unless in the background) watch it until it settles."""
        with contextlib.ExitStack() as waiting:
            if not self.background:
                # Count this thread as waiting from admission on, so the `python` tool's code runs
                # here on the kernel's main thread even if the model calls it before `read` begins.
                waiting.enter_context(coordinator().waiting())
            receipt = self.send(images=images, max_turns=max_turns, max_cost_usd=max_cost_usd)
            if self.background:
                return
            if self.chat is None:  # a text transcript only names figures: they go under this cell
                waiting.enter_context(drawing.shown_in_cell(receipt.submission_id))
            self.watch(receipt)

    def send(
        self, *, images: Sequence[ImagePart] = (), max_turns: int | None = None, max_cost_usd: float | None = None
    ) -> Receipt:
        """Dispatch the message and bind the view to its submission (a background cell is then
        finished by the runtime thread when it settles)."""
        try:
            extra: dict[str, Any] = {"images": images} if images else {}
            if max_turns is not None:
                extra["max_turns"] = max_turns
            if max_cost_usd is not None:
                extra["max_cost_usd"] = max_cost_usd
            receipt = self.session.dispatch(self.message, **extra)
        except BaseException as exc:
            self.stop()
            if isinstance(exc, FlueError):
                raise FlueCellError(f"flue: the message was not accepted: {exc.message}") from None
            raise
        _tag_cell(receipt.submission_id)
        if self.chat is not None:
            self.chat.bind(receipt.submission_id)
        if self.background:
            # Set before `bind`, which replays early events: a fast run may have settled already.
            def settled() -> None:
                self.stop()
                _again_at_next_cell(self.publish, self.sent)  # first: the next cell may start at once
                self.finish()

            self.live.on_settled = settled
        self.live.bind(receipt.submission_id)
        return receipt

    def watch(self, receipt: Receipt) -> None:
        """Block until the submission settles; an interrupt aborts it, a failure is the cell's error."""
        try:
            self.session.read(receipt)  # waits; the answer itself came with the events
        except KeyboardInterrupt:
            # `Session.read` has already aborted durably; say so instead of a KeyboardInterrupt trace.
            self.view.settle("aborted", "interrupted (kernel interrupt)")
            self.finish()
            raise FlueCellError(INTERRUPTED) from None
        except FlueError as exc:  # failed or aborted; a bug in flue_nb keeps its traceback
            # No model could be asked: the error says it all, once (not in a transcript above it).
            self.finish(quiet=_not_configured(exc))
            raise FlueCellError(_failure_text(exc, self.view)) from None
        finally:
            self.stop()
        self.view.settle("completed")
        self.finish()

    def finish(self, result: str | None = None, *, quiet: bool = False) -> None:
        """The cell's last output: the final transcript (or chat), once; `quiet`: none (the
        cell's error says what happened)."""
        view, chat = self.view, self.chat
        if quiet:
            self.live.finish(BLANK)
            if self.watched:
                self.publish(BLANK)
            return
        if view.tokens_unreported:
            view.notes["tokens_reported"] = False  # the server said nothing: not "0 in, 0 out"
        _show_recovery(self.session, view, self.opened_at)
        _note_trace(view)
        _note_changes(self.session, view)
        self.live.finish(result)
        if not self.watched:
            display(view if chat is None else chat.final(view, None))
            return
        prompted = not self.background and _prompts() != self.prompts_before
        _last_output(view, result, chat, self.publish, self.display_id, prompted)


def _last_output(
    view: CellView, result: str | None, chat: CellChat | None, publish: Callable[[object], None], display_id: str,
    prompted: bool,
) -> None:  # fmt: skip
    """A watched cell's final output; after a stdin prompt, the only output of the cell."""
    shown = chat.final(view, result) if chat is not None else None
    if prompted:
        # The frontend left its echo of the stdin answer ("flue: allow …? [y/N] y"), or the box
        # an interrupt cut short, under the view: the cell's output becomes the view alone.
        clear_output()
        display(shown if shown is not None else (view if result is None else result), display_id=display_id)
    elif shown is not None:
        publish(shown)


def _nowhere(_obj: object) -> None:
    """The live publisher of a headless cell: nobody watches until the final output."""


def _watched_live() -> bool:
    from flue_nb.notebook.views.chat.frontend import watched_live

    return watched_live()


def _remembering(publish: Callable[[object], None], sent: list[object]) -> Callable[[object], None]:
    """`publish`, keeping the last object it sent in `sent`."""

    def remembered(obj: object) -> None:
        sent[:] = [obj]
        publish(obj)

    return remembered


def _again_at_next_cell(publish: Callable[[object], None], sent: list[object]) -> None:
    """Send a background cell's last output (the newest in `sent` then) once more when the next
    cell starts. Sent between two cells, its final update carried the finished cell's parent
    header, which nbclient (`flue-nb run`, nbval) drops: the saved notebook kept "running" for a
    run that had settled. A front end gets the same output twice."""
    shell = get_ipython()
    if shell is None:
        return

    def again(*_info: object) -> None:
        shell.events.unregister("pre_run_cell", again)
        if sent:
            publish(sent[-1])

    shell.events.register("pre_run_cell", again)


def _cell_chat(session: Session, model: str, background: bool) -> CellChat:
    from flue_nb.notebook.views.chat.cell import CellChat

    return CellChat(session, model, background=background)


def _show_recovery(session: Session, view: CellView, opened_at: float | None) -> None:
    if opened_at is None:
        return
    for sub in session.submissions():
        if sub.id == view.submission_id or sub.accepted_at >= opened_at:
            continue
        settled = sub.state.value == "settled"
        if settled and (sub.settled_at or 0) < opened_at:
            continue  # settled before this kernel opened the conversation: nothing to recover
        if settled and sub.outcome:
            view.recovery(sub.id, sub.outcome.value, result=sub.result, error=ErrorInfo.of(sub.error))
        else:
            view.recovery(sub.id)


def _not_configured(exc: Exception) -> bool:
    return getattr(exc, "type", "") == "model_not_configured"


def _failure_text(exc: Exception, view: CellView) -> str:
    if _not_configured(exc):
        from flue_nb.notebook.kernel.assistant import NO_MODEL_HELP, missing_key_help

        # Nothing named a model: say how to set one. With a model named, what its provider
        # lacks (say, an API key) and the line that gives it.
        model = str(view.notes.get("model") or "")
        return missing_key_help(model, getattr(exc, "message", str(exc))) if model else NO_MODEL_HELP
    outcome = view.status if view.status in ("failed", "aborted") else "failed"
    return f"flue: the submission {outcome}: {getattr(exc, 'message', str(exc))}"


def _note_lease(session: Session, view: CellView) -> None:
    # One store read at each cell (not `status()`, which reads the whole history).
    lease = session.lease()
    # Another holder is an earlier kernel (or another process) whose claim has not lapsed yet;
    # one whose process is gone is taken over at once, so there is nothing to wait for.
    if lease is not None and not lease.here and not lease.gone and lease.expires > time.time():
        left = lease.expires - time.time()
        view.note(f"(waiting up to {math.ceil(left)} s for an earlier kernel's claim to lapse)")


def _note_changes(session: Session, view: CellView) -> None:
    """The run's changes panel under its transcript: each cell, file and variable it changed."""
    if view.submission_id is None or view.status in ("queued", "running"):
        return
    from flue_nb.notebook.views.changes import ChangesPanel, panel

    try:
        shown = ChangesPanel(panel(session.store, session.changes(view.submission_id)))
        view.changes = shown if shown else None
    except Exception:  # noqa: BLE001 - a review aid: the transcript stands without it
        view.changes = None


def _note_trace(view: CellView) -> None:
    """Keep the run's trace id in the cell's metadata, so the saved notebook links to its trace."""
    trace = tracing.trace_id(view.submission_id) if view.submission_id else None
    if trace is not None:
        view.notes["trace_id"] = trace


def _tag_cell(submission_id: str) -> None:
    """Name the notebook and the cell on the submission's span (when tracing is on)."""
    if tracing.instrumented():
        tracing.tag_submission(submission_id, _cell_attributes())


def _cell_attributes() -> dict[str, str]:
    """The notebook path and cell id of the running cell, for its submission's span."""
    from IPython import get_ipython

    attrs = {"flue.notebook.path": os.environ.get("JPY_SESSION_NAME", "")}
    kernel = getattr(get_ipython(), "kernel", None)
    parent = kernel.get_parent() if kernel is not None and hasattr(kernel, "get_parent") else {}
    cell = ((parent or {}).get("metadata") or {}).get("cellId")
    if cell:
        attrs["flue.cell.id"] = str(cell)
    return {k: v for k, v in attrs.items() if v}
