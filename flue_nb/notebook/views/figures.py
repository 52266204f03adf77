"""Figures in a conversation's static copies: named in text, drawn in HTML, scaled to a cap.

A static copy (a settled cell's bundle, a chat's copy under it, `%flue history`) outlives the
kernel, so its images are embedded as `data:` URIs. Only PNG, JPEG, GIF and WebP are embedded,
and only when the bytes' own header says so (SVG never gets here: the `python` tool rasterises
it to PNG when it captures it). An image larger than `STATIC_EDGE` px on its long edge or
`STATIC_BYTES` bytes is scaled down (Pillow) so a notebook with many figures stays small. The
bytes come with the view (seen live) or from the store's blobs, so a copy rewritten later (at a
settlement, at shutdown) still has them. Each image's bytes go in an output once: the HTML draws
it, the markdown and the text name it (`[figure 1: 640×480 PNG]`).
"""

from __future__ import annotations

import base64
import html
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.images import IMAGE_MEDIA_TYPES, downscale, sniff

__all__ = [
    "FIGURE_CSS",
    "STATIC_BYTES",
    "STATIC_EDGE",
    "Blobs",
    "Figure",
    "embedded",
    "figure_html",
    "figure_line",
    "figure_markdown",
    "named_markdown",
]

STATIC_EDGE = 1024
"""Longest edge of an image in a static copy, in pixels (a 640×480 figure is kept as it is)."""
STATIC_BYTES = 300_000
"""Largest encoded image in a static copy; a bigger one is re-encoded (JPEG) or scaled down."""

Blobs = Callable[[str], "bytes | None"]
"""The store's `blob(digest)`: an image's bytes by digest."""

FIGURE_CSS = """<style>
.flue-static .flue-figure { margin: 0.3em 0 0.8em 1.2em; }
.flue-static .flue-figure summary { display: block; list-style: none; cursor: zoom-in; }
.flue-static .flue-figure summary::-webkit-details-marker { display: none; }
.flue-static .flue-figure details:not([open]) img { max-width: min(100%, 480px) !important; max-height: 360px; width: auto; height: auto; }
.flue-static .flue-figure details[open] { overflow-x: auto; }
.flue-static .flue-figure details[open] summary { cursor: zoom-out; }
.flue-static .flue-figure details[open] img { max-width: none !important; max-height: none; }
.flue-static .flue-figure figcaption { font-size: 85%; opacity: 0.75; }
</style>"""
"""Scaled until clicked, full size after (a `<details>` toggles). Where a viewer strips styles
(GitHub, an untrusted notebook) the image shows at its capped size, fitted to the page."""

_CACHE_LIMIT = 32_000_000
"""Bytes of encoded images kept between rewrites of a copy (each settlement rewrites it)."""


@dataclass(frozen=True, slots=True)
class Figure:
    """An image drawn in its tool card's place in a static view."""

    digest: str
    media_type: str
    width: int
    height: int
    label: str = ""
    data: bytes | None = field(default=None, compare=False, repr=False)
    """The bytes when the view has them (seen live); else they are read from the store."""

    @classmethod
    def of(cls, image: Any, data: bytes | None = None) -> Figure:
        """A figure for an `ImagePart` or a view's `ImageRef` (with `data` if known)."""
        got = data if data is not None else getattr(image, "data", None)
        return cls(image.digest, image.media_type, image.width, image.height, image.label, got)


def figure_line(f: Figure) -> str:
    """The figure named in one line: `[figure 1: 640×480 PNG]`."""
    fmt = f.media_type.rsplit("/", 1)[-1].upper()
    return f"[{f.label or 'image'}: {f.width}×{f.height} {fmt}]"


class _Cache:
    """Encoded `data:` URIs by digest, least recently used dropped past `_CACHE_LIMIT` bytes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[str, int, int]] = OrderedDict()
        self._size = 0

    def get(self, digest: str) -> tuple[str, int, int] | None:
        with self._lock:
            got = self._items.get(digest)
            if got is not None:
                self._items.move_to_end(digest)
            return got

    def put(self, digest: str, value: tuple[str, int, int]) -> None:
        with self._lock:
            if digest in self._items:
                return
            self._items[digest] = value
            self._size += len(value[0])
            while self._size > _CACHE_LIMIT and len(self._items) > 1:
                _, old = self._items.popitem(last=False)
                self._size -= len(old[0])


_cache = _Cache()


def embedded(f: Figure, blobs: Blobs | None = None) -> tuple[str, int, int] | str:
    """(`data:` URI, width, height) of the figure as a static copy embeds it, or why it cannot be."""
    if f.media_type not in IMAGE_MEDIA_TYPES:
        return f"{f.media_type} is not embedded (only PNG, JPEG, GIF and WebP)"
    cached = _cache.get(f.digest)
    if cached is not None:
        return cached
    data = f.data
    if data is None and blobs is not None:
        try:
            data = blobs(f.digest)
        except Exception as exc:  # noqa: BLE001 - a store that cannot answer: the figure is named
            return f"its bytes could not be read from the store ({type(exc).__name__})"
    if not data:
        return "its bytes are not in the store"
    head = sniff(data)
    if head is None or head[0] not in IMAGE_MEDIA_TYPES:
        return "its bytes are not a PNG, JPEG, GIF or WebP image"
    media_type, width, height = head
    if max(width, height) > STATIC_EDGE or len(data) > STATIC_BYTES:
        try:
            data, media_type, width, height = downscale(
                data, label=f.label, max_edge=STATIC_EDGE, max_bytes=STATIC_BYTES
            )
        except ConfigError as exc:
            return exc.message
        except Exception as exc:  # noqa: BLE001 - an image Pillow cannot decode is named, not drawn
            return f"it could not be scaled down ({type(exc).__name__})"
    value = (f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}", width, height)
    _cache.put(f.digest, value)
    return value


def figure_html(f: Figure, blobs: Blobs | None = None) -> str:
    """The figure as HTML: scaled, full size on click; its line alone when it cannot be embedded."""
    line = html.escape(figure_line(f))
    got = embedded(f, blobs)
    if isinstance(got, str):
        return f'<p class="flue-figure-missing"><em>{line} (not shown: {html.escape(got)})</em></p>'
    uri, width, height = got
    scaled = f" · scaled to {width}×{height} for this copy" if (width, height) != (f.width, f.height) else ""
    return (
        # `display:block` inline too: a sanitiser that drops the stylesheet keeps it (no ▸ marker).
        f'<figure class="flue-figure"><details><summary title="click for full size" style="display:block">'
        f'<img src="{uri}" alt="{line}" width="{width}" height="{height}"></summary></details>'
        f"<figcaption>{line}{scaled}</figcaption></figure>"
    )


def named_markdown(f: Figure) -> str:
    """The figure's line as a markdown quote (where its bytes are not embedded)."""
    return "> *" + figure_line(f).replace("*", "\\*").replace("_", "\\_") + "*"


def figure_markdown(f: Figure, blobs: Blobs | None = None) -> str:
    """The figure as markdown: the embedded image, or its line when it cannot be embedded."""
    got = embedded(f, blobs)
    if isinstance(got, str):
        return named_markdown(f)
    alt = figure_line(f).strip("[]").replace("[", "(").replace("]", ")").replace("\\", "")
    return f"![{alt}]({got[0]})"
