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

from flue_nb.notebook.view.static import STATIC_CLASS, StaticView

if TYPE_CHECKING:
    from flue_nb.notebook.chat.widget import ChatWidget

__all__ = ["HIDE_COPY_CSS", "SavedCopy", "retire_all"]

HIDE_COPY_CSS = f"""
/* flue: the static copy under a live chat (issue 19.1) is hidden while the chat is drawn. */
.jp-OutputArea-child:has(.flue-chat) + .jp-OutputArea-child:has(.{STATIC_CLASS}) {{ display: none; }}
"""

_copies: weakref.WeakSet[SavedCopy] = weakref.WeakSet()


class SavedCopy:
    """The live chat's display and its static copy under it, kept current."""

    def __init__(self, widget: ChatWidget) -> None:
        self.widget = widget
        self._lock = threading.Lock()
        self._retired = False
        # Only a blank text beside the widget: nbconvert and terminals read the copy below.
        self._live = display(_LiveOnly(widget), display_id=True)
        self._copy = display(self.view(), display_id=True)
        widget.saved = self
        _copies.add(self)

    def view(self) -> StaticView:
        """The conversation as it stands, from the store."""
        from flue_nb.notebook.view.history import history_view

        session = self.widget.session
        cid = session.conversation_id
        # Figures are drawn from the store's blobs (read once, then cached): no copy of their
        # bytes in the markdown, which names them.
        view = history_view(cid, session.history(), embed=False)
        return StaticView(view, title=f"flue chat · {cid}", blobs=session.store.blob)

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


def retire_all() -> None:
    """Retire every chat's copy (the frontend shuts this kernel down or restarts it)."""
    for copy in list(_copies):
        try:
            copy.retire()
        except Exception:  # noqa: BLE001 - one chat's store failing must not keep the others live
            continue


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
