"""The chat widget: an `anywidget.AnyWidget` drawing one conversation from its events.

`ChatWidget(session)` redraws the conversation from the store (`Session.events()`), then
observes it live. Events arrive on the runtime's thread; they are folded at once (`ChatFold`)
and sent to the browser at most `rate` times a second (a timer on the runtime loop sends the
last pending change), plus at once when a submission settles.

Synced traits (snake_case, plain JSON, shapes in `chat.wire`): `history` (settled
submissions), `live` (queued and running ones), `status` (the gauge and the queue), `images`
(data URLs of the figures tool cards show, by digest), `mode` (`chat`, or `cell` for one
`%%flue` cell's submission), `title`, `vendor` (the shared model with the front end's
libraries, `chat._vendor`), `holding` (an outside call holding the kernel's main thread, which
Stop then interrupts by the control channel, `serve._stop`) and `ref` (its own model id). The
browser sends three messages: `send` (a new message with the browser's id for it, admitted with
`Session.dispatch` and acknowledged in `sent`), `stop` (`Session.abort`, the same durable path as
the kernel's stop button) and `approve` (the answer to a tool card under the `ask` policy). The
kernel sends `beat` every few seconds (`chat._heartbeat`): a view whose beats stop says its kernel is
gone.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anywidget
import traitlets
from ipywidgets import widget_serialization

from flue_nb.notebook.kernel import approve, drawing
from flue_nb.notebook.views.chat import _heartbeat as heartbeat
from flue_nb.notebook.views.chat._fold import ChatFold
from flue_nb.notebook.views.chat._vendor import Vendor, vendor
from flue_nb.notebook.views.chat.saved_copy import HIDE_COPY_CSS
from flue_nb.notebook.views.chat.wire import (
    ApproveMsg,
    BlockJSON,
    ChangesJSON,
    KeepMsg,
    OfferJSON,
    RewindMsg,
    SendMsg,
    StatusJSON,
    UndoMsg,
    changes_json,
)
from flue_nb.notebook.views.parts import ImageRef, Part, ToolPart
from flue_nb.notebook.views.transcript import cost_text, share_of
from flue_nb.runtime.effects import EFFECTS_KEY
from flue_nb.runtime.events import Event, TextDelta, ThinkingDelta
from flue_nb.runtime.providers import context_window_of

if TYPE_CHECKING:
    from flue_nb.runtime.session import Page, Session

__all__ = ["PAGE", "RATE", "ChatWidget", "model_name"]

RATE = 30.0
"""Most updates sent to the browser per second while text streams."""
PAGE = 50
"""Submissions a chat draws when it opens, and per older page the browser asks for."""
_HERE = Path(__file__).resolve().parent

_ECHOES = 50
"""How many recent browser message ids a chat remembers (to admit a re-sent message once)."""
_open: weakref.WeakSet[ChatWidget] = weakref.WeakSet()
_by_cell: weakref.WeakValueDictionary[str, ChatWidget] = weakref.WeakValueDictionary()
"""The chat widget each notebook cell made last (by the frontend's cell id)."""


def _current_cell_id() -> str | None:
    """The id of the cell executing now, as JupyterLab, Notebook 7 and VS Code send it."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    if kernel is None or not hasattr(kernel, "get_parent"):
        return None
    cell = (kernel.get_parent("shell") or {}).get("metadata", {}).get("cellId")
    return cell if isinstance(cell, str) and cell else None


"""Widgets showing a conversation now: the notebook approver asks the one showing a call."""


def open_widgets() -> list[ChatWidget]:
    """The chat widgets alive in this kernel (for approvals)."""
    return list(_open)


def _draws(submission_id: str) -> bool:
    """Whether a widget of this kernel draws the submission's cards (its figures in them)."""
    return any(submission_id in w.fold.blocks for w in list(_open))


drawing.drawn_in_views(_draws)
approve.asked_in_views(open_widgets)


class ChatWidget(anywidget.AnyWidget):
    """A conversation as a chat: streaming text, tool cards, gauge, queue, Stop, Approve/Deny."""

    _esm = _HERE / "chat.js"
    _css = (_HERE / "chat.css").read_text(encoding="utf-8") + HIDE_COPY_CSS

    mode = traitlets.Unicode("chat").tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    history: traitlets.List[Any] = traitlets.List().tag(sync=True)
    live: traitlets.List[Any] = traitlets.List().tag(sync=True)
    status = traitlets.Dict().tag(sync=True)
    interactive = traitlets.Bool(True).tag(sync=True)
    """Whether clicks reach the kernel while a run goes on: True for a chat (the kernel stays
    idle) and a `--background` cell; False for a blocking `%%flue` cell, whose run holds the
    kernel's main thread (Stop is then the kernel's interrupt, approvals go to stdin)."""
    sent = traitlets.Dict().tag(sync=True)
    """The browser's id of each recent message it sent -> its submission id ("" when refused):
    the optimistic echo drawn at once (a user cell may hold the kernel) finds its message here."""
    error = traitlets.Unicode("").tag(sync=True)
    """A problem the last browser request ran into (a message not accepted), shown once."""
    holding = traitlets.Unicode("").tag(sync=True)
    """The call id of an outside call (`%flue serve`) of this conversation whose code holds the
    kernel's main thread now, else "": Stop then goes by the control channel (`serve._stop`)."""
    images = traitlets.Dict().tag(sync=True)
    """Digest → data URL of every image a tool card of this view shows."""
    changes = traitlets.Dict().tag(sync=True)
    """Submission id → the changes panel of a settled run that changed something (`wire.ChangesJSON`)."""
    vendor = traitlets.Instance(Vendor, allow_none=True).tag(sync=True, **widget_serialization)
    older = traitlets.Int(0).tag(sync=True)
    """How many submissions came before the oldest one drawn: the browser offers them (it sends
    `older` for the page before, as the user scrolls to the top or asks)."""
    ref = traitlets.Unicode("").tag(sync=True)
    """This widget's own model id: the browser names it in the notebook's widget state so a
    notebook saved while the chat was live reopens without a widget error (issue 19.1)."""

    def __init__(
        self,
        session: Session,
        *,
        mode: str = "chat",
        interactive: bool = True,
        model: str = "",
        rate: float = RATE,
        redraw: bool = True,
        clock: Callable[[], float] = time.monotonic,
        describe: Callable[[], tuple[str, str]] | None = None,
        follow: bool = True,
    ) -> None:
        super().__init__(mode=mode, interactive=interactive, vendor=vendor())
        self.ref = self.model_id or ""
        self.session = session
        self.model_label = model
        self.describe = describe
        """Who answers the next message: (agent name, model label), asked at each status."""
        self.saved: Any = None
        """The static copy under a chat (`saved_copy.SavedCopy`), rewritten when a submission settles."""
        self.follower: Any = None
        """How a chat follows what other kernels do to its conversation (`_follow.StoreFollower`)."""
        self.fold = ChatFold(only=None, summaries=session.summaries)
        self.interval = 1.0 / rate
        self.updates = 0
        """How many state updates were sent (for tests and the benchmark)."""
        self._clock = clock
        self._lock = threading.RLock()
        self._last = float("-inf")
        self._timer: asyncio.TimerHandle | None = None
        self._approvals: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[bool]]] = {}
        self._pending: list[Event] | None = None
        self._catching: list[list[Event]] = []
        """Live events kept for each redraw under way: they go into its new fold too."""
        self.title = f"{session.conversation_id}"
        # Watch first and keep what arrives while the store is read, then fold it in after the
        # redraw: a run going on meanwhile (a recovery) loses nothing (the fold drops repeats).
        self._pending = []
        self._stop = session.observe(self._feed)
        self._remote: dict[str, int] = {}
        """Call id -> seq of another kernel's approval request this chat offers (`_remote`)."""
        self._first_seq: int | None = None
        """The seq of the oldest submission drawn (the next older page ends before it)."""
        self._fold_first: int | None = None
        """The seq of the oldest submission the fold holds (older pages are `_earlier`)."""
        self._older = 0
        """What `older` says at the next update (sent with the history it goes with)."""
        self._earlier: list[BlockJSON] = []
        """Older pages the browser asked for, drawn once (settled: they no longer change)."""
        self._kept: set[str] = set()
        """Items the person chose to Keep (`Change.ident`): their Undo goes."""
        self._said: dict[str, tuple[str, list[str], OfferJSON | None]] = {}
        """Per run: what its last Undo or Rewind said, what it refused, what it offers with force."""
        self._opening: Page | None = None
        """The page the chat opened on, until its static copy takes it (`opening_page`)."""
        baseline = None
        if redraw:
            # One page of the newest submissions, read by index: a chat on 10,000 submissions
            # opens as fast as one on 100 (it read the whole conversation several times).
            unsettled = _unsettled(session) if follow and mode == "chat" else ()
            page = _page(session, PAGE)
            self._opening = page
            for event in page.events:
                self.fold.apply(event)
            self._remote = _overlay(self.fold, session, page.after_seq)
            self._first_seq = self._fold_first = page.first_seq
            self._older = page.older
            baseline = (page.last_seq, unsettled)
        drawn = set(self.fold.settled_now)
        with self._lock:
            pending, self._pending = self._pending, None
            for event in pending:
                self.fold.apply(event)
        if redraw:
            self.refresh_changes(None)
            with self._lock:
                self.fold.settled_now -= drawn  # their panels were just read: not again at the first push
        self.on_msg(self._on_browser_msg)
        _open.add(self)
        heartbeat.start(open_widgets)  # the browser tells a dead kernel by its missing beats
        if mode == "chat":
            self._replace_the_cells_previous_chat()
            if redraw and follow:
                from flue_nb.notebook.views.chat._follow import StoreFollower

                self.follower = StoreFollower(self, baseline=baseline)
        self._push(status=True)

    def _replace_the_cells_previous_chat(self) -> None:
        # A frontend keeps a replaced output's widget open, so re-running a `%flue chat` cell
        # would leave one more widget observing the conversation each time: the cell's previous
        # chat (known by the cell id the frontend sends with each execution) is closed instead.
        cell = _current_cell_id()
        if cell is None:
            return
        previous = _by_cell.get(cell)
        _by_cell[cell] = self
        if previous is not None and previous is not self:
            previous.close()

    def __repr__(self) -> str:
        return f"<flue_nb ChatWidget conversation={self.session.conversation_id!r} mode={self.mode!r}>"

    # --- cell mode ----------------------------------------------------------------------------

    def hold(self) -> None:
        """Cell mode: keep events until `bind` says which submission this view is for."""
        with self._lock:
            self._pending = []

    def bind(self, submission_id: str) -> None:
        """Cell mode: show only `submission_id`, folding in what arrived since `hold`."""
        with self._lock:
            self.fold = ChatFold(only=submission_id, summaries=self.session.summaries)
            pending, self._pending = self._pending or [], None
            for event in pending:
                self.fold.apply(event)
        self._push(status=True)

    # --- events (runtime thread) --------------------------------------------------------------

    def _feed(self, event: Event) -> None:
        if self.follower is not None:
            self.follower.own_event()
        with self._lock:
            if self._pending is not None:
                self._pending.append(event)
                return
            for caught in self._catching:
                caught.append(event)
            if not self.fold.apply(event) and not self.fold.status_dirty:
                return
            now = event.type == "submission_settled" or event.type == "submission_queued"
            wait = self._last + self.interval - self._clock()
            if wait > 0 and not now:
                if self._timer is None:
                    self._timer = _later(wait, self._on_timer)
                    if self._timer is not None:
                        return
                else:
                    return
        self._push(status=self.fold.status_dirty)

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
        self._push(status=self.fold.status_dirty)

    def flush(self) -> None:
        """Send whatever changed now (the final update of a cell view)."""
        self._push(status=True)

    def _push(self, *, status: bool = False) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            fold = self.fold
            settled = bool(fold.settled_now)
            runs = set(fold.settled_now)
            history = self._earlier + fold.history() if (fold.settled_now or not self.history) else None
            live = fold.live()
            fold.settled_now.clear()
            fold.dirty.clear()
            state = self._status() if status else None
            fold.status_dirty = False
            images = self._new_images()
            self._last = self._clock()
            self.updates += 1
            # An empty context: ipykernel then addresses the update to the cell running now (as
            # `handle_publisher` does for display updates), which nbclient and frontends accept.
            contextvars.Context().run(self._set, history, live, state, images)
        if settled:
            # Only runs that can have a panel: one whose tool calls recorded effects, or one
            # showing a panel now (a chat opening on 50 runs read each run's records, and a
            # compaction's aside, no submission's, read the conversation's whole journal).
            self.refresh_changes(None if runs & {"store", "older"} else self._drawn(runs) | (runs & set(self.changes)))
        if settled and self.saved is not None:
            self.saved.refresh()

    def _new_images(self, blocks: Any = None) -> dict[str, str] | None:
        """The image map with the figures first seen since the last update, or None if none were."""
        shown = self.fold.blocks.values() if blocks is None else blocks
        wanted = {i.digest: i.media_type for b in shown for i in _block_images(b.parts)}
        new = {d: m for d, m in wanted.items() if d not in self.images}
        if not new:
            return None
        out = dict(self.images)
        for digest, media_type in new.items():
            data = self.fold.images.get(digest)
            if data is None:
                try:  # rebuilt from the store: the events carry references only
                    data = self.session.store.blob(digest)
                except Exception:  # noqa: BLE001 - a figure not found is drawn as its label
                    data = None
            if data is not None:
                out[digest] = f"data:{media_type};base64,{base64.b64encode(data).decode()}"
        return out

    def _set(self, history: Any, live: Any, state: Any, images: Any = None) -> None:
        with self.hold_sync():
            if images is not None:
                self.images = images
            if history is not None:
                self.history = history
            self.older = self._older
            self.live = live
            if state is not None:
                self.status = state

    def _status(self) -> StatusJSON:
        st: Any = None
        try:
            st = self.session.status()
        except Exception:  # noqa: BLE001 - the gauge is best-effort; the transcript goes on
            st = None
        get = (lambda k: st.get(k)) if isinstance(st, dict) else (lambda k: getattr(st, k, None))
        usage = dict(self.fold.usage)
        totals = get("usage")
        if totals is not None:
            for key, name in (("input", "input_tokens"), ("output", "output_tokens"),
                              ("cache_read", "cache_read_tokens"), ("cache_write", "cache_write_tokens")):  # fmt: skip
                value = getattr(totals, name, None)
                if value is None and isinstance(totals, dict):
                    value = totals.get(key, totals.get(name))
                if isinstance(value, int):
                    usage[key] = value
        for key in ("input", "output", "cache_read", "cache_write"):
            value = get(f"{key}_tokens")
            if isinstance(value, int):
                usage[key] = value
        queued = list(get("queued") or [])
        running = list(get("running") or [])
        agent, model = get("agent") or "", get("model") or self.model_label
        if self.describe is not None:
            # The title names who answers the next message: after `%flue use` (or a cell with
            # another --agent or -m) that is not the last run's agent and model.
            next_agent, next_label = self.describe()
            if next_agent and (next_agent != agent or next_label):
                agent, model = next_agent, next_label or (model if next_agent == agent else "")
        window, threshold = get("context_window"), get("compaction_threshold")
        if window is None and isinstance(model, str) and model:
            window = context_window_of(model)  # a fresh chat: the window of the model that will answer
        model = model_name(model)
        return {
            "agent": agent,
            "model": model,
            "used_tokens": get("used_tokens"),
            "context_window": window,
            "threshold": threshold,
            "queued": len(queued),
            "running": bool(running),
            "usage": {
                "input": usage["input"],
                "output": usage["output"],
                "cache_read": usage["cache_read"],
                "cache_write": usage["cache_write"],
            },
            "cost": cost_text(get("cost_usd"), short=True),
            "cost_note": cost_text(get("cost_usd"), get("unpriced_responses") or 0),
            "cache_share": share_of(usage),
            "tokens_reported": not ((get("unreported_responses") or self.fold.unreported) and not any(usage.values())),
        }

    # --- the browser's requests (kernel main thread) ------------------------------------------

    def _on_browser_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        # What the browser sends is checked, never coerced: bool("false") is True, and a
        # message a frontend bug or another client got wrong is dropped, not a traceback. The
        # casts name the declared shape (`wire.BrowserMsg`), so mypy checks the keys indexed;
        # a key may still be missing and a value of any type until checked here.
        if not isinstance(content, dict):
            return
        kind = content.get("type")
        if kind == "send":
            send = cast("SendMsg", content)
            text = send["text"] if "text" in send else None
            echo = send["id"] if "id" in send else None
            if not isinstance(text, str):
                self.error = "not sent: the message text must be a string"
            elif echo is not None and not isinstance(echo, str):
                self.error = "not sent: the message id must be a string"
            elif echo is not None and echo in self.sent:
                return  # the same message again (the browser re-sent its echo): admitted once
            elif text.strip():
                receipt = self.send_message(text.strip())
                if echo is not None:
                    # Tells the browser's optimistic echo what became of it (issue 19.7).
                    done = {echo: receipt.submission_id if receipt is not None else ""}
                    self.sent = dict(list({**self.sent, **done}.items())[-_ECHOES:])
        elif kind == "older":
            self.load_older()
        elif kind == "stop":
            self.stop()
        elif kind == "approve":
            approve = cast("ApproveMsg", content)
            call_id = approve["call_id"] if "call_id" in approve else None
            approved = approve["approved"] if "approved" in approve else None
            if isinstance(call_id, str) and isinstance(approved, bool):
                if approved and approve.get("always") is True:
                    from flue_nb.notebook.kernel.approve import always_allow

                    always_allow(call_id, self.session)
                self.answer(call_id, approved)
        elif kind in ("undo", "keep", "rewind"):
            self._on_changes_msg(kind, content)

    # --- the changes panel (issue 34.2) --------------------------------------------------------

    def _on_changes_msg(self, kind: str, content: dict[str, Any]) -> None:
        """The changes panel's Keep, Undo and Rewind (checked as `_on_browser_msg` checks)."""
        if kind in ("undo", "keep"):
            msg = cast("UndoMsg | KeepMsg", content)
            sid = msg["submission_id"] if "submission_id" in msg else None
            keys = msg["items"] if "items" in msg else None
            force = content.get("force", False)
            if not isinstance(sid, str) or not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                return
            if kind == "keep":
                self.keep(sid, keys)
            elif isinstance(force, bool):
                self.undo(sid, keys, force=force)
        else:
            rw = cast("RewindMsg", content)
            sid = rw["submission_id"] if "submission_id" in rw else None
            call = rw["call_id"] if "call_id" in rw else None
            force = rw["force"] if "force" in rw else False
            if isinstance(sid, str) and isinstance(call, str) and isinstance(force, bool):
                self.rewind(sid, call, force=force)

    def _drawn(self, among: set[str] | None = None) -> set[str]:
        """The submissions this chat draws now (its page, and older pages it was asked for; of
        `among` only, when given) whose tool calls recorded effects: only those have a panel to
        read from the store."""
        with self._lock:
            blocks = self.fold.blocks
            keys = blocks if among is None else [k for k in among if k in blocks]
            ids = {k for k in keys if blocks[k].kind == "submission" and _effects_in(blocks[k].parts)}
            if among is None:
                ids.update(b["id"] for b in self._earlier if b["kind"] == "submission" and _effects_json(b["parts"]))
        return ids

    def refresh_changes(self, runs: set[str] | None) -> None:
        """Rebuild the changes panels of `runs` (of every run drawn when None, each read by its
        own submission: never the whole conversation); any thread."""
        from flue_nb.notebook.views.changes import panel
        from flue_nb.runtime.undo import changes

        store, cid = self.session.store, self.session.conversation_id
        wanted = self._drawn() if runs is None else runs
        try:
            by_run = {sid: changes(store, cid, sid) for sid in wanted}
        except Exception:  # noqa: BLE001 - the panel is a review aid; the chat goes on without it
            return
        out: dict[str, ChangesJSON] = {} if runs is None else dict(self.changes)
        for sid, items in by_run.items():
            shown = panel(store, items)
            if not shown:
                out.pop(sid, None)
                continue
            said, refused, offer = self._said.get(sid, ("", [], None))
            out[sid] = changes_json(sid, shown, kept=self._kept, said=said, refused=refused, offer=offer)
        contextvars.Context().run(self._set_changes, out)

    def _set_changes(self, value: dict[str, ChangesJSON]) -> None:
        self.changes = value

    def _resave(self) -> None:
        """Rewrite the static copy, so a notebook saved now reads what was undone or kept."""
        if self.saved is not None:
            self.saved.refresh()

    def keep(self, submission_id: str, keys: list[str]) -> None:
        """Keep items of a run (`["all"]` for all): their Undo buttons go."""
        shown = self.changes.get(submission_id)
        if shown is None:
            return
        every = "all" in keys
        self._kept.update(i["ident"] for i in shown["items"] if every or i["key"] in keys)
        self._said.pop(submission_id, None)
        self.refresh_changes({submission_id})
        self._resave()

    def undo(self, submission_id: str, keys: list[str], *, force: bool = False) -> Any:
        """Undo items of a run (`["all"]` for all) and show what was done, or why not (and offer
        to undo anyway); the model is told on its next turn."""
        from flue_nb.runtime.errors import FlueError

        _undo_targets()
        wanted: Any = "all" if not keys or "all" in keys else keys
        try:
            result = self.session.undo(wanted, submission_id=submission_id, force=force)
        except (LookupError, FlueError) as exc:
            self._said[submission_id] = (f"not undone: {getattr(exc, 'message', None) or exc}", [], None)
            self.refresh_changes({submission_id})
            return None
        offer: OfferJSON | None = None
        if not result.done:
            offer = {"what": "undo", "items": ["all"] if wanted == "all" else list(keys)}
        self._record(submission_id, result, offer)
        self.refresh_changes({submission_id})
        self._resave()
        return result

    def rewind(self, submission_id: str, call_id: str, *, force: bool = False) -> Any:
        """Rewind to before the step of `call_id`: that step's effects and every later one's are
        undone, newest first (all or nothing unless `force`)."""
        from flue_nb.runtime.errors import FlueError

        _undo_targets()
        try:
            result = self.session.rewind(call_id, submission_id=submission_id, force=force)
        except (LookupError, FlueError) as exc:
            self._said[submission_id] = (f"not rewound: {getattr(exc, 'message', None) or exc}", [], None)
            self.refresh_changes({submission_id})
            return None
        offer: OfferJSON | None = None if result.done else {"what": "rewind", "items": [call_id]}
        self._record(submission_id, result, offer)
        self.refresh_changes(None)  # later runs' items are undone too
        self._resave()
        return result

    def _record(self, submission_id: str, result: Any, offer: OfferJSON | None) -> None:
        refused = [f"{c.key} {c.target} — {why}" for c, why in result.refused]
        self._said[submission_id] = (result.text(), refused, offer)

    def send_message(self, text: str) -> Any:
        """Admit `text` as a new submission (it joins a live response or waits its turn)."""
        from flue_nb.runtime.errors import FlueError

        try:
            receipt = self.session.dispatch(text)
        except FlueError as exc:
            self.error = f"not sent: {exc.message}"
            return None
        self.error = ""
        return receipt

    def show_holding(self, call_id: str) -> None:
        """Say which outside call holds the kernel's main thread ("" once none does); any thread."""
        if self.comm is not None and self.holding != call_id:
            self.holding = call_id

    def stop(self) -> list[str]:
        """Abort every unsettled submission of the conversation durably (contract 11.5)."""
        aborted: list[str] = self.session.abort()
        return aborted

    # --- approvals (runtime thread asks, browser answers) -------------------------------------

    def shows(self, call_id: str) -> bool:
        """Whether this widget draws the tool call `call_id` and can take a click for it."""
        with self._lock:
            return self.comm is not None and self.fold.tool(call_id) is not None

    async def ask(self, call_id: str, summary: str) -> bool:
        """Show Approve / Deny on the call's card and wait for the click."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        grant = approve.offered(call_id)  # what "Always allow" would grant, when the rules offer it
        with self._lock:
            self._approvals[call_id] = (loop, fut)
            # When it started: a card waiting with nobody answering says for how long.
            self.fold.mark_tool(
                call_id,
                status="awaiting_approval",
                ask=summary,
                asked_at=time.time(),
                always=grant.pattern if grant is not None else None,
            )
        self._push()
        try:
            approved = await fut
        except asyncio.CancelledError:
            # Answered elsewhere or timed out: the buttons go, the tool's result says the rest.
            with self._lock:
                self.fold.mark_tool(call_id, status="running", ask=None, asked_at=None, always=None)
            self._push()
            raise
        finally:
            with self._lock:
                self._approvals.pop(call_id, None)
        with self._lock:
            self.fold.mark_tool(
                call_id, status="running" if approved else "denied", ask=None, asked_at=None, always=None
            )
        self._push()
        return approved

    def asking(self, call_id: str, summary: str | None) -> None:
        """Mark the call's card as waiting for an answer given elsewhere (stdin), or no longer."""
        with self._lock:
            if summary is not None:
                self.fold.mark_tool(call_id, status="awaiting_approval", ask=summary, asked_at=time.time())
            else:
                self.fold.mark_tool(call_id, status="running", ask=None, asked_at=None, always=None)
        self._push()

    def answer(self, call_id: str, approved: bool) -> bool:
        """Answer a waiting approval (any thread), this kernel's or one another kernel asked for
        (the store decides whether it came first); False when nothing waits for `call_id`."""
        with self._lock:
            found = self._approvals.get(call_id)
            remote = self._remote.get(call_id)
        if found is not None:
            loop, fut = found
            loop.call_soon_threadsafe(_resolve, fut, approved)
            return True
        if remote is None:
            return False
        from flue_nb.notebook.views.chat import _remote

        try:
            _remote.answer(self.session, remote, approved)
        except Exception as exc:  # noqa: BLE001 - a store hiccup: say so, the card stays to click again
            self.error = f"the answer was not recorded: {exc}"
            return False
        self.redraw_from_store()  # the card shows the answer that won, and who gave it
        return True

    def opening_page(self, last: int) -> Page | None:
        """The page of the newest `last` submissions this chat opened on, once (the static copy
        under it is drawn from the same read of the store); None when it read another page."""
        page, self._opening = self._opening, None
        return page if page is not None and last == PAGE else None

    def load_older(self, count: int = 0) -> int:
        """Draw the page of submissions before the oldest one drawn (the browser's `older`
        message: the user scrolled to the top, or asked); how many submissions it added."""
        with self._lock:
            first = self._first_seq
        if first is None or not self._older:
            return 0
        page = _page(self.session, count or PAGE, before_seq=first)
        fold = ChatFold(only=None, summaries=self.session.summaries)
        for event in page.events:
            fold.apply(event)
        _overlay(fold, self.session, page.after_seq)
        # Ids of its own for the page's asides: each fold numbers them from 1.
        blocks = fold.history()
        for b in blocks:
            if b["kind"] == "aside":
                b["id"] = f"{b['id']}@{page.first_seq}"
        images = self._new_images(fold.blocks.values())
        if images is not None:
            self.images = images  # before the blocks that show them
        with self._lock:
            self._earlier = blocks + self._earlier
            self._first_seq, self._older = page.first_seq, page.older
            self.fold.settled_now.add("older")  # send the whole history
        self._push()
        return len(page.submissions)

    def redraw_from_store(self) -> None:
        """Draw the conversation again from the store (another kernel changed it); any thread.

        The submissions drawn since the chat opened (the older pages the browser asked for
        stay as drawn), read by index: not the whole conversation.
        """
        session = self.session
        with self._lock:
            first = self._fold_first
        shown = PAGE
        if first is not None:
            store, cid = session.store, session.conversation_id
            shown = store.count_submissions(cid) - store.count_submissions(cid, before_seq=first)
        fold = ChatFold(only=None, summaries=session.summaries)
        caught: list[Event] = []
        with self._lock:
            self._catching.append(caught)
        try:
            page = _page(session, max(shown, 1))
            for event in page.events:
                fold.apply(event)
            remote = _overlay(fold, session, page.after_seq)
        finally:
            with self._lock:
                self._catching.remove(caught)
        with self._lock:
            # What arrived live while the store was read (this kernel's own settlement, say) may
            # be missing from what was read: the new fold takes it too (it drops repeats).
            for event in caught:
                if not isinstance(event, (TextDelta, ThinkingDelta)):  # a delta would repeat stored text
                    fold.apply(event)
            self.fold = fold
            self._remote = remote
            if first is None:
                self._first_seq = self._fold_first = page.first_seq
                self._older = page.older
            self.fold.settled_now.add("store")  # send the whole history, not only the live part
        self._push(status=True)

    def detach(self) -> None:
        """Stop following the conversation (a cell view whose submission settled)."""
        if getattr(self, "follower", None) is not None:
            self.follower.stop()
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop()
        _open.discard(self)

    def close(self) -> None:
        """Stop observing and close the comm."""
        if getattr(self, "follower", None) is not None:
            self.follower.stop()
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop()
        _open.discard(self)
        for loop, fut in list(getattr(self, "_approvals", {}).values()):
            loop.call_soon_threadsafe(_resolve, fut, False)  # a closed widget denies
        super().close()


def _effects_in(parts: list[Part]) -> bool:
    """Whether a tool call among `parts` (a subagent's included) recorded effects."""
    for p in parts:
        if isinstance(p, ToolPart):
            if p.details and p.details.get(EFFECTS_KEY):
                return True
            if p.task is not None and _effects_in(p.task.parts):
                return True
    return False


def _effects_json(parts: list[Any]) -> bool:
    for p in parts:
        if p.get("kind") == "tool" and (p.get("effects") or (p.get("task") and _effects_json(p["task"]["parts"]))):
            return True
    return False


def _undo_targets() -> None:
    """In a kernel, undo acts on its namespace and its notebook, live or saved (as `%flue undo` does)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from flue_nb.notebook.document.saved import notebook_path
    from flue_nb.notebook.document.undo_cells import DocumentCells
    from flue_nb.runtime.undo import use_cells, use_namespace

    use_namespace(lambda: shell.user_ns)
    use_cells(DocumentCells(notebook_path(shell.user_ns), shell.user_ns))


def _resolve(fut: asyncio.Future[bool], approved: bool) -> None:
    if not fut.done():
        fut.set_result(approved)


def _later(delay: float, fn: Callable[[], None]) -> asyncio.TimerHandle | None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None  # not on the runtime loop: send now instead
    return loop.call_later(delay, fn)


def model_name(spec: str) -> str:
    """A model as every widget's title names it: the id, without the default `anthropic/` prefix."""
    return spec.removeprefix("anthropic/") if isinstance(spec, str) else ""


def _block_images(parts: list[Part]) -> list[ImageRef]:
    out: list[ImageRef] = []
    for p in parts:
        if isinstance(p, ToolPart):
            out.extend(p.images)
            if p.task is not None:
                out.extend(_block_images(p.task.parts))
    return out


def _overlay(fold: ChatFold, session: Session, after_seq: int = 0) -> dict[str, int]:
    """Other kernels' approval requests on the cards (`_remote.overlay`), those recorded after
    `after_seq` (where the drawn page's records begin); none if unreadable."""
    from flue_nb.notebook.views.chat._remote import overlay

    try:
        return overlay(fold, session, after_seq)
    except Exception:  # noqa: BLE001 - a view without them still draws the conversation
        return {}


def _page(session: Session, last: int, *, before_seq: int | None = None) -> Page:
    """A page of the conversation's events, rebuilt from the store (contract 15.3)."""
    return session.page(last, before_seq=before_seq)


def _unsettled(session: Session) -> tuple[tuple[str, str], ...]:
    """The unsettled submissions (by their own index), as the follower compares them."""
    subs = session.store.submissions(session.conversation_id, unsettled=True)
    return tuple((s.id, s.state.value) for s in subs)
