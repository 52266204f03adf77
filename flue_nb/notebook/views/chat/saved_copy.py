"""The static copy a chat keeps beside itself, so a saved notebook reads its conversation.

`%flue chat` shows two outputs: the live widget, and under it the conversation as a static
bundle (no widget in it: `text/html`, `text/markdown`, `text/plain`). The copy is rewritten
(`update_display_data` on its display id) each time a submission settles, so whatever moment
the notebook is saved, the file holds the conversation up to then. While the widget is drawn, a
CSS rule shipped with the widget hides the copy; where the widget cannot be drawn (a new kernel,
no kernel, nbconvert, GitHub) the rule is not loaded, or the widget is gone, and the copy shows.

When the frontend shuts the kernel down or restarts it, `retire_all()` writes each copy a last
time and empties the widget's own output, so a notebook saved after that shows no widget error.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from typing import TYPE_CHECKING, Any

from IPython.display import display

from flue_nb.notebook.views.static import STATIC_CLASS, StaticView, blocks_markdown

if TYPE_CHECKING:
    from flue_nb.notebook.views.chat.widget import ChatWidget
    from flue_nb.runtime.session import Page

__all__ = [
    "COPY_CLASS",
    "COPY_LAST",
    "HIDE_COPY_CSS",
    "HIDE_PLACEHOLDER_CSS",
    "SavedCopy",
    "retire_all",
    "with_changes",
]

HIDE_COPY_CSS = f"""
/* flue: the static copy under a live chat (issue 19.1) is hidden while the chat is drawn. */
.jp-OutputArea-child:has(.flue-chat) + .jp-OutputArea-child:has(.{STATIC_CLASS}) {{ display: none; }}
"""

COPY_LAST = 50
"""How many of the newest submissions the static copy holds (the chat's first page)."""

COPY_CLASS = "flue-chat-copy"
# Carried by the copy itself, so it applies in a reopened notebook before any widget code runs
# (issue 33.5): the chat's own output, until it holds a drawn chat, shows nothing; not the
# widget manager's "Loading widget..." while the kernel starts, nor its "Error displaying
# widget: model not found". An untrusted notebook loses the rule, but draws no widget either.
HIDE_PLACEHOLDER_CSS = (
    f'<style class="{COPY_CLASS}">.jp-OutputArea-child:has(+ .jp-OutputArea-child .{COPY_CLASS})'
    ":not(:has(.flue-chat)) { display: none; }</style>"
)

_copies: weakref.WeakSet[SavedCopy] = weakref.WeakSet()


class SavedCopy:
    """The live chat's display and its static copy under it, kept current."""

    def __init__(self, widget: ChatWidget) -> None:
        self.widget = widget
        self._lock = threading.Lock()
        self._retired = False
        # Only a blank text beside the widget: nbconvert and terminals read the copy below.
        self._live = display(_LiveOnly(widget), display_id=True)
        self._copy = display(self.view(widget.opening_page(COPY_LAST)), display_id=True)
        widget.saved = self
        _copies.add(self)

    def view(self, page: Page | None = None) -> _Copy:
        """The conversation's newest submissions (`COPY_LAST`), from the store or from `page`
        (the chat's, of as many), and a note of how many earlier ones it left out and how to
        see them."""
        from flue_nb.notebook.views.history import earlier_note, history_view

        session = self.widget.session
        cid = session.conversation_id
        # A page of the newest turns, read by index: the whole conversation made this copy
        # megabytes long and was read again at every settlement.
        turns = session.turns(COPY_LAST, page=page)
        first = next((t.submission for t in turns if t.submission is not None), None)
        if page is not None:
            left_out = page.older
        else:
            left_out = session.store.count_submissions(cid, before_seq=first.seq) if first is not None else 0
        how = f"`%flue history -c {cid} --last N` or `flue-nb history {cid} --last N` shows them"
        note = earlier_note(left_out, how) if left_out else ""
        # Figures are drawn from the store's blobs (read once, then cached): no copy of their
        # bytes in the markdown, which names them.
        messages = [m for t in turns for m in t.messages]
        view = history_view(cid, messages, embed=False, summaries=session.summaries, note=note)
        with_changes(view, self.widget, {t.submission.id for t in turns if t.submission is not None})
        return _Copy(StaticView(view, title=f"flue chat · {cid}", blobs=session.store.blob))

    def refresh(self) -> None:
        """Rewrite the copy (a submission settled); any thread."""
        with self._lock:
            if self._retired or self._copy is None:
                return
            view = self.view()
            contextvars.Context().run(self._copy.update, view)

    def retire(self) -> None:
        """The kernel is going: write the copy a last time and leave no widget in the outputs."""
        self.refresh()
        with self._lock:
            if self._retired:
                return
            self._retired = True
            if self._live is not None:
                contextvars.Context().run(self._live.update, _Gone())


def with_changes(view: Any, widget: ChatWidget, runs: set[str] | None = None) -> None:
    """Add each run's changes panel (as the chat shows it: undone and kept marked; of `runs`
    only, when given) after the conversation, so a saved notebook still reads what the agent
    changed."""
    from flue_nb.notebook.views.changes import ChangesPanel, PanelItem

    shown = {sid: c for sid, c in widget.changes.items() if runs is None or sid in runs}
    if not shown or view.blocks is None:
        return
    store = widget.session.store
    for sid, c in shown.items():
        items = [
            PanelItem(
                i["key"], i["ident"], i["step"], i["call_id"], i["tool"], i["kind"], i["action"], i["target"],
                i["title"], i["summary"], list(i["diff"]), i["diff_note"], i["lang"], i["undone"], i["undoable"],
                i["note"],
            )
            for i in c["items"]
        ]  # fmt: skip
        sub = store.submission(sid)
        said = " ".join((sub.text if sub is not None else "").split())
        p = ChangesPanel(items, title=f"“{said[:60]}{'…' if len(said) > 60 else ''}”" if said else sid)
        view.plain += "\n" + p.text_plain()
        view.blocks.append(p)
    view.md = blocks_markdown(view.blocks)


def retire_all() -> None:
    """Retire every chat's copy (the frontend shuts this kernel down or restarts it)."""
    for copy in list(_copies):
        try:
            copy.retire()
        except Exception:  # noqa: BLE001 - one chat's store failing must not keep the others live
            continue


class _Copy:
    """The static view with the rule that hides the live output above it until a chat is drawn."""

    def __init__(self, view: StaticView) -> None:
        self.view = view

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
        data, meta = self.view._repr_mimebundle_(include, exclude)
        return {**data, "text/html": HIDE_PLACEHOLDER_CSS + data["text/html"]}, meta

    def __repr__(self) -> str:
        return repr(self.view)


class _LiveOnly:
    """The widget's view and an empty text: readers without widgets see the copy instead."""

    def __init__(self, widget: ChatWidget) -> None:
        self.widget = widget

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        drawn: Any = self.widget._repr_mimebundle_() or {}  # ipywidgets' untyped (bundle, metadata)
        view: dict[str, Any] = drawn[0] if isinstance(drawn, tuple) else drawn
        key = "application/vnd.jupyter.widget-view+json"
        return {"text/plain": "", **({key: view[key]} if key in view else {})}


class _Gone:
    """What the live chat's output becomes when its kernel goes: nothing (the copy says it all)."""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": ""}
