"""Whether the frontend draws widgets, and the bundle a `%%flue` cell shows with its widget.

A frontend with a widget manager (JupyterLab, Notebook 7) opens the `jupyter.widget.control`
comm when it connects to the kernel; nbclient, nbconvert and terminals never do. `watch()`
registers for that comm when the extension loads (before ipywidgets is imported, which would
register it itself) and hands it on to ipywidgets. `renders_widgets()` then says whether a cell
should draw the chat view or only the text transcript.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["WithWidget", "renders_widgets", "watch"]

_TARGET = "jupyter.widget.control"
_seen = False


def _opened(comm: Any, msg: Any) -> None:
    global _seen
    _seen = True
    from flue_nb.notebook.views.chat import available

    if not available():
        return  # a live frontend, but no widgets here: only the text transcript is drawn
    from ipywidgets import Widget  # importing registers ipywidgets' own targets from now on

    Widget.handle_control_comm_opened(comm, msg)


def watch() -> None:
    """Listen for a widget-drawing frontend (call when the extension loads in a kernel)."""
    if "ipykernel" not in sys.modules or "ipywidgets" in sys.modules:
        return
    try:
        import comm

        comm.get_comm_manager().register_target(_TARGET, _opened)
    except Exception:  # noqa: BLE001 - no comm manager (not a kernel): nothing draws widgets
        return


def renders_widgets() -> bool:
    """True once a frontend with a widget manager has connected to this kernel."""
    if _seen:
        return True
    widgets = sys.modules.get("ipywidgets")
    return getattr(getattr(widgets, "Widget", None), "_control_comm", None) is not None


def watched_live() -> bool:
    """Whether a person's frontend (one with a widget manager: JupyterLab, Notebook 7) shows this kernel's output
    as it happens; False for nbclient, nbval, nbconvert and `flue-nb run`, which keep outputs."""
    return renders_widgets()


class WithWidget:
    """A cell output drawn as the chat widget where widgets render, as `fallback` elsewhere.

    The fallback's `text/plain` and `text/markdown` (the transcript) stay in the same bundle, so
    nbconvert, nbval, `flue-nb run` and terminals read the transcript, and its metadata (the
    provenance `flue-nb run` checks) is kept.
    """

    def __init__(self, fallback: Any, widget: Any) -> None:
        self.fallback = fallback
        self.widget = widget

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        got = self.fallback._repr_mimebundle_(include, exclude)
        data, meta = got if isinstance(got, tuple) else (got, {})
        view = self.widget._repr_mimebundle_() or {}
        view = view[0] if isinstance(view, tuple) else view
        key = "application/vnd.jupyter.widget-view+json"
        if key in view:
            data = {**data, key: view[key]}
        return data, meta

    def __repr__(self) -> str:
        return repr(self.fallback)
