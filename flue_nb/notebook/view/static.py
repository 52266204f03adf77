"""A settled run or conversation as a static output that every reader of a notebook can draw.

An output carrying the chat widget's view is drawn as the widget only; without its model (a new
kernel, no kernel) JupyterLab and Notebook 7 show "Error displaying widget: model not found" and
ignore the bundle's other types. What must survive a save is therefore a separate bundle with no
widget in it: `text/html` (JupyterLab, Notebook 7, nbconvert, GitHub), `text/markdown` and
`text/plain` (terminals, `flue-nb run`, nbval), with the view's metadata (provenance).

The model's text is untrusted: it is rendered by markdown-it with raw HTML disabled, so a
`<script>` in an answer shows as text.
"""

from __future__ import annotations

import html
from typing import Any

__all__ = ["STATIC_CLASS", "StaticView", "markdown_html"]

STATIC_CLASS = "flue-static"
"""The class of a static output's root element (the live chat hides the copy beside it)."""

_md: Any = None


def markdown_html(text: str) -> str:
    """Markdown (CommonMark with tables and strikethrough) as HTML, raw HTML escaped."""
    global _md
    if _md is None:
        from markdown_it import MarkdownIt

        _md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])
    rendered: str = _md.render(text)
    return rendered


class StaticView:
    """`view`'s text and markdown, plus the markdown rendered as HTML: no widget in the bundle."""

    def __init__(self, view: Any, *, title: str = "") -> None:
        self.view = view
        self.title = title

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
        got = self.view._repr_mimebundle_(include, exclude)
        data, meta = got if isinstance(got, tuple) else (got, {})
        plain = data.get("text/plain", "")
        md = data.get("text/markdown", plain)
        head = f'<div class="flue-static-title"><b>{html.escape(self.title)}</b></div>' if self.title else ""
        body = markdown_html(md)
        out = {
            "text/plain": plain,
            "text/markdown": md,
            "text/html": f'<div class="{STATIC_CLASS}">{head}{body}</div>',
        }
        return out, dict(meta or {})

    def __repr__(self) -> str:
        return repr(self.view)
