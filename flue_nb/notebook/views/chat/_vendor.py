"""The chat widget's vendored libraries (markdown, sanitiser, highlighting, math), sent once a page.

anywidget loads a widget's `_esm` from a blob URL, where relative imports cannot resolve, and
sends `_esm` with every widget. So the libraries in `vendor/` travel in one shared,
never-displayed model (`vendor()`), which every chat widget references; `chat.js` imports them
from blob URLs the first time a page draws a chat and keeps them for every other widget.
"""

from __future__ import annotations

import base64
import re
from functools import cache
from pathlib import Path

import anywidget
import traitlets

__all__ = ["Vendor", "sources", "vendor"]

_DIR = Path(__file__).resolve().parent / "vendor"
_FILES = {"marked": "marked.esm.js", "purify": "purify.es.mjs", "hljs": "highlight.min.js", "katex": "katex.mjs"}
_FONT = re.compile(r'url\(fonts/([\w-]+)\.woff2\) format\("woff2"\)(?:,url\(fonts/[^)]+\) format\("[^"]+"\))*')


def _katex_css() -> str:
    # The stylesheet is injected as text, where its relative font URLs mean nothing: the woff2
    # fonts go in as data URLs (the woff and ttf fallbacks are for browsers a notebook never runs in).
    css = (_DIR / "katex.min.css").read_text(encoding="utf-8")

    def inline(m: re.Match[str]) -> str:
        data = base64.b64encode((_DIR / "katex-fonts" / f"{m.group(1)}.woff2").read_bytes()).decode()
        return f'url(data:font/woff2;base64,{data}) format("woff2")'

    return _FONT.sub(inline, css)


@cache
def sources() -> dict[str, str]:
    """The vendored modules' sources by short name, plus `katex.css` (read once a process)."""
    out = {name: (_DIR / file).read_text(encoding="utf-8") for name, file in _FILES.items()}
    out["katex.css"] = _katex_css()
    return out


class Vendor(anywidget.AnyWidget):
    """A model holding the vendored sources; chat widgets reference it, nothing displays it."""

    _esm = "export default {};"
    sources = traitlets.Dict().tag(sync=True)


_shared: Vendor | None = None


def vendor() -> Vendor:
    """The one vendor model of this kernel (created, and sent to the page, at the first chat)."""
    global _shared
    if _shared is None or _shared.comm is None:
        _shared = Vendor(sources=sources())
    return _shared
