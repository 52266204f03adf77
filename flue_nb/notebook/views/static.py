"""A settled run or conversation as a static output that every reader of a notebook can draw.

An output carrying the chat widget's view is drawn as the widget only; without its model (a new
kernel, no kernel) JupyterLab and Notebook 7 show "Error displaying widget: model not found" and
ignore the bundle's other types. What must survive a save is therefore a separate bundle with no
widget in it: `text/html` (JupyterLab, Notebook 7, nbconvert, GitHub), `text/markdown` and
`text/plain` (terminals, `flue-nb run`, nbval), with the view's metadata (provenance).

The model's text is untrusted: it is rendered by markdown-it with raw HTML disabled, so a
`<script>` in an answer shows as text. A view with figures gives its blocks (`static_blocks()`:
markdown, and `Figure`s in their tool card's place); the HTML draws each figure there from the
view's bytes or the store's (`views.figures`), the markdown and the text name it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from flue_nb.notebook.views.changes import ChangesPanel
from flue_nb.notebook.views.figures import FIGURE_CSS, Blobs, Figure, figure_html, named_markdown

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

__all__ = ["STATIC_CLASS", "Block", "StaticView", "blocks_markdown", "literal_markdown", "markdown_html"]

Block = str | Figure | ChangesPanel
"""One markdown block of a view, a figure drawn in its place, or a run's changes panel (its
markdown in the markdown, its own escaped HTML in the HTML)."""

STATIC_CLASS = "flue-static"
"""The class of a static output's root element (the live chat hides the copy beside it)."""

_md: MarkdownIt | None = None


class Bundled(Protocol):
    """A view IPython can display: what `StaticView` renders again as HTML."""

    def _repr_mimebundle_(
        self, include: Any = None, exclude: Any = None
    ) -> dict[str, str] | tuple[dict[str, str], dict[str, Any]]:
        """Its text/plain and text/markdown (with metadata, as a pair)."""
        ...


def markdown_html(text: str) -> str:
    """Markdown (CommonMark with tables and strikethrough) as HTML, raw HTML escaped."""
    global _md
    if _md is None:
        from markdown_it import MarkdownIt

        _md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])
    rendered: str = _md.render(text)
    return rendered


_CODE_SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_SPECIAL = re.compile(r"([\\`*_\[\]<>|~#&!])")


def literal_markdown(text: str) -> str:
    """A tool's or model's one-line text as markdown that reads as written: its code spans stay
    code (a backslash in one would show), every other character that markdown would read is
    escaped."""
    out, at = [], 0
    for m in _CODE_SPAN.finditer(text):
        out += [_SPECIAL.sub(r"\\\1", text[at : m.start()]), m.group(0)]
        at = m.end()
    out.append(_SPECIAL.sub(r"\\\1", text[at:]))
    return "".join(out)


def blocks_markdown(blocks: list[Block], figure: Callable[[Figure], str] | None = None) -> str:
    """The blocks as one markdown text; a figure as `figure(f)`, by default its line."""
    out = []
    for b in blocks:
        if isinstance(b, Figure):
            out.append((figure or named_markdown)(b))
        elif isinstance(b, ChangesPanel):
            out.append(b.markdown())
        elif b:
            out.append(b)
    return "\n\n".join(out)


def _blocks_html(blocks: list[Block], blobs: Blobs | None) -> str:
    """Markdown runs rendered together, each figure drawn between them in its place."""
    out: list[str] = []
    run: list[str] = []
    for b in blocks:
        if isinstance(b, Figure):
            out += [markdown_html("\n\n".join(run)), figure_html(b, blobs)]
            run = []
        elif isinstance(b, ChangesPanel):
            out += [markdown_html("\n\n".join(run)), b.html()]
            run = []
        elif b:
            run.append(b)
    out.append(markdown_html("\n\n".join(run)))
    has_figures = any(isinstance(b, Figure) for b in blocks)
    return (FIGURE_CSS if has_figures else "") + "".join(out)


class StaticView:
    """`view`'s text and markdown, plus the markdown rendered as HTML: no widget in the bundle.

    `blobs` (the store's `blob`) gives the bytes of figures the view has not seen live.
    """

    def __init__(self, view: Bundled, *, title: str = "", blobs: Blobs | None = None) -> None:
        self.view = view
        self.title = title
        self.blobs = blobs

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
        got = self.view._repr_mimebundle_(include, exclude)
        data, meta = got if isinstance(got, tuple) else (got, {})
        plain = data.get("text/plain", "")
        md = data.get("text/markdown", plain)
        head = f'<div class="flue-static-title"><b>{html.escape(self.title)}</b></div>' if self.title else ""
        static_blocks = getattr(self.view, "static_blocks", None)
        blocks: list[Block] | None = static_blocks() if static_blocks is not None else None
        if blocks is None:
            body = markdown_html(md)
        else:
            # The figures' bytes go in the HTML only; the markdown names them (one copy per output).
            md, body = blocks_markdown(blocks), _blocks_html(blocks, self.blobs)
        out = {
            "text/plain": plain,
            "text/markdown": md,
            "text/html": f'<div class="{STATIC_CLASS}">{head}{body}</div>',
        }
        return out, dict(meta or {})

    def __repr__(self) -> str:
        return repr(self.view)
