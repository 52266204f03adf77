"""The chat view of one `%%flue` cell's submission, beside the cell's text transcript."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flue_nb.notebook.views.chat.frontend import WithWidget
from flue_nb.notebook.views.chat.widget import ChatWidget
from flue_nb.notebook.views.static import StaticView

if TYPE_CHECKING:
    from flue_nb.runtime.session import Session

__all__ = ["CellChat"]


class CellChat:
    """A `ChatWidget` in cell mode, and the display bundles that carry it."""

    def __init__(self, session: Session, model: str, *, background: bool = False) -> None:
        # A blocking cell holds the kernel's main thread, so the browser's clicks would wait.
        self.widget = ChatWidget(session, mode="cell", interactive=background, model=model, redraw=False)
        self.widget.hold()

    def bind(self, submission_id: str) -> None:
        """The cell's submission is known: draw it (and what it did already)."""
        self.widget.bind(submission_id)

    def bundle(self, fallback: Any) -> WithWidget:
        """`fallback` (the transcript, or an empty output) with the widget's view."""
        return WithWidget(fallback, self.widget)

    def quiet(self, _obj: Any) -> None:
        """The live display's publisher while the widget streams: nothing to re-send."""

    def final(self, view: Any, result: Any) -> Any:
        """The live display's last content: the run as a static bundle with no widget in it, so
        the saved notebook reads the same in a new kernel, with none, in nbconvert and on
        GitHub (issue 19.1); the widget stops following the conversation."""
        self.widget.flush()
        self.widget.detach()
        if result is not None:
            return result  # a final content chosen by the caller
        return StaticView(view, blobs=self.widget.session.store.blob)
