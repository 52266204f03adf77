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

from IPython.display import clear_output, display

from flue_nb.notebook.chat._approve import prompts as _prompts
from flue_nb.notebook.kernel import _figures
from flue_nb.notebook.magics._line import FlueCellError
from flue_nb.notebook.magics._live import BLANK, LiveOutput, handle_publisher
from flue_nb.notebook.view.transcript import CellView
from flue_nb.runtime import tracing
from flue_nb.runtime.coordinator import coordinator
from flue_nb.runtime.errors import FlueError
from flue_nb.runtime.events import ErrorInfo

if TYPE_CHECKING:
    from flue_nb.notebook.chat.cell import CellChat
    from flue_nb.runtime.messages import ImagePart
    from flue_nb.runtime.session import Receipt, Session

__all__ = ["run_message"]

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
    """Dispatch `message` and show it; block until it settles unless `background`.

    `opened_at` is when this kernel opened the conversation, if this cell did: work admitted
    before then and unsettled at that time was left by an earlier kernel, and opening the
    session started its recovery, perhaps before this cell could watch its events.

    `widget`: the frontend draws widgets, so the cell shows the chat view of its submission,
    with the text transcript as the fallback in the same bundle (see `notebook.chat`).
    `stream`: update the output while the run goes (None: when a person's frontend watches).
    """
    view = CellView(message, session.conversation_id, agent=agent)
    view.notes["model"] = model
    _note_lease(session, view)
    chat = _cell_chat(session, model, background) if widget else None
    # A person watching sees the transcript stream into one output, which ends as the final
    # transcript. A headless run (nbclient, nbval, `flue-nb run`) has nobody watching: it gets
    # the final transcript as the cell's one output, so a stored notebook and its re-run match
    # (nbval compares outputs as first sent) and no empty output is left before the answer.
    watched = background or (_watched_live() if stream is None else stream)
    if watched:
        first = view if background else BLANK
        handle = display(first if chat is None else chat.bundle(first), display_id=True)
        publish = handle_publisher(handle)
    else:
        publish = _nowhere
    # With the widget, the display is never re-sent while the run streams (a frontend would
    # rebuild the widget's view at each update); the widget updates itself over its comm.
    live = LiveOutput(view, publish if chat is None else chat.quiet)
    stop = session.observe(live.feed)
    _show_recovery(session, view, opened_at)
    prompts_before = _prompts()

    def final(result: str | None = None) -> None:
        u = session.usage(view.submission_id) if view.submission_id else None
        if u is not None:
            view.tokens = {
                "input": u.input_tokens,
                "output": u.output_tokens,
                "cache_read": u.cache_read_tokens,
                "cache_write": u.cache_write_tokens,
                "total": u.total,
            }
        _show_recovery(session, view, opened_at)
        _note_trace(view)
        live.finish(result)
        if not watched:
            display(view if chat is None else chat.final(view, None))
            return
        prompted = not background and _prompts() != prompts_before
        _last_output(view, result, chat, publish, handle.display_id, prompted)

    with contextlib.ExitStack() as waiting:
        if not background:
            # Count this thread as waiting from admission on, so the `python` tool's code runs
            # here on the kernel's main thread even if the model calls it before `read` begins.
            waiting.enter_context(coordinator().waiting())
        try:
            extra: dict[str, Any] = {"images": images} if images else {}
            if max_turns is not None:
                extra["max_turns"] = max_turns
            if max_cost_usd is not None:
                extra["max_cost_usd"] = max_cost_usd
            receipt = session.dispatch(message, **extra)
        except BaseException as exc:
            stop()
            if isinstance(exc, FlueError):
                raise FlueCellError(f"flue: the message was not accepted: {exc.message}") from None
            raise
        _tag_cell(receipt.submission_id)
        if chat is not None:
            chat.bind(receipt.submission_id)
        if background:
            # Set before `bind`, which replays early events: a fast run may have settled already.
            def settled() -> None:
                stop()
                final()

            live.on_settled = settled
        live.bind(receipt.submission_id)
        if background:
            return
        if chat is None:  # a text transcript only names figures: they go under this cell
            waiting.enter_context(_figures.shown_in_cell(receipt.submission_id))
        _wait(session, receipt, view, live, stop, final, chat)


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
    from flue_nb.notebook.chat._frontend import watched_live

    return watched_live()


def _cell_chat(session: Session, model: str, background: bool) -> CellChat:
    from flue_nb.notebook.chat.cell import CellChat

    return CellChat(session, model, background=background)


def _wait(
    session: Session,
    receipt: Receipt,
    view: CellView,
    live: LiveOutput,
    stop: Callable[[], None],
    final: Callable[[], None],
    chat: CellChat | None = None,
) -> None:
    try:
        view.reply = session.read(receipt)
    except KeyboardInterrupt:
        # `Session.read` has already aborted durably; say so instead of a KeyboardInterrupt trace.
        view.settle("aborted", "interrupted (kernel interrupt)")
        final()
        raise FlueCellError(INTERRUPTED) from None
    except FlueError as exc:  # failed or aborted; a bug in flue_nb keeps its traceback
        final()
        raise FlueCellError(_failure_text(exc, view)) from None
    finally:
        stop()
    view.settle("completed")
    final()


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


def _failure_text(exc: Exception, view: CellView) -> str:
    if getattr(exc, "type", "") == "model_not_configured" and not view.notes.get("model"):
        # Nothing named a model: say how to set one. With a model named, its provider's own
        # message (say, a missing API key) is the one that helps.
        from flue_nb.notebook.assistant import NO_MODEL_HELP

        return NO_MODEL_HELP
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
