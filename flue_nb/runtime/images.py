"""Images the model sees: turning bytes, files, figures and rich objects into `ImagePart`s.

Everything an image goes through before a model sees it happens here: its type and size are read
from the header, it is scaled down to the provider's limits (long edge ≤ `MAX_EDGE` px, at most
`MAX_BYTES` bytes) and it gets its content address (sha256). Pillow does the scaling and is
imported only when an image needs it (the `images` extra); matplotlib only when a figure is
rendered. `import flue_nb` loads neither.
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
import os
import re
import struct
import zlib
from typing import Any

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.messages import ImagePart

__all__ = [
    "IMAGE_MEDIA_TYPES",
    "MAX_BYTES",
    "MAX_EDGE",
    "MAX_IMAGES_PER_RESULT",
    "cap_images",
    "downscale",
    "figure_png",
    "image_from_bytes",
    "image_from_object",
    "image_tokens",
    "repaired",
    "rich_image",
    "sniff",
    "svg_png",
    "svg_size",
    "undecodable",
]

MAX_EDGE = 1568
"""Longest edge sent, in pixels: Anthropic scales anything larger down itself, at a cost."""
MAX_BYTES = 1_000_000
"""Largest encoded image kept (well under the API's 5 MB): bigger ones are re-encoded smaller."""
MAX_IMAGES_PER_RESULT = 4
"""Images one tool result may carry; the rest are named in a text note instead."""
IMAGE_MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The formats the model accepts."""


def image_tokens(part: ImagePart) -> int:
    """Tokens an image occupies in the context: ≈ width × height / 750 (Anthropic's figure)."""
    return max(1, math.ceil(part.width * part.height / 750))


def sniff(data: bytes) -> tuple[str, int, int] | None:
    """(media type, width, height) from the header of a PNG, JPEG, GIF or WebP; else None."""
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
            w, h = struct.unpack(">II", data[16:24])
            return "image/png", w, h
        if data[:6] in (b"GIF87a", b"GIF89a"):
            w, h = struct.unpack("<HH", data[6:10])
            return "image/gif", w, h
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _sniff_webp(data)
        if data[:2] == b"\xff\xd8":
            return _sniff_jpeg(data)
    except (struct.error, IndexError):
        return None
    return None


def _sniff_webp(data: bytes) -> tuple[str, int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return "image/webp", w, h
    if chunk == b"VP8L":
        b = data[21:25]
        w = 1 + (((b[1] & 0x3F) << 8) | b[0])
        h = 1 + (((b[3] & 0x0F) << 10) | (b[2] << 2) | ((b[1] & 0xC0) >> 6))
        return "image/webp", w, h
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", data[26:30])
        return "image/webp", w & 0x3FFF, h & 0x3FFF
    return None


def _sniff_jpeg(data: bytes) -> tuple[str, int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        length = struct.unpack(">H", data[i + 2 : i + 4])[0]
        # SOF0..SOF15 carry the frame size, except DHT (C4), JPG (C8) and DAC (CC).
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return "image/jpeg", w, h
        i += 2 + length
    return None


def cap_images(content: str, images: list[ImagePart]) -> tuple[str, list[ImagePart]]:
    """At most `MAX_IMAGES_PER_RESULT` images for one tool result; a note names the ones left out."""
    if len(images) <= MAX_IMAGES_PER_RESULT:
        return content, images
    kept, left = images[:MAX_IMAGES_PER_RESULT], images[MAX_IMAGES_PER_RESULT:]
    names = ", ".join(p.label or f"{p.width}×{p.height}" for p in left)
    note = (
        f"[{len(left)} more image(s) not shown ({names}): a result carries at most "
        f"{MAX_IMAGES_PER_RESULT}. Draw fewer figures per call, or show them in another call.]"
    )
    return (f"{content}\n\n{note}" if content else note), kept


def image_from_bytes(data: bytes, *, label: str = "") -> ImagePart:
    """An `ImagePart` for encoded image bytes, scaled down to `MAX_EDGE` / `MAX_BYTES` if needed.

    Raises `ConfigError` when the bytes are not a PNG, JPEG, GIF or WebP image, or when they are
    too large and Pillow (`pip install 'flue_nb[images]'`) is not there to scale them.
    """
    head = sniff(data)
    if head is None:
        raise ConfigError(
            f"{label or 'the data'} is not a PNG, JPEG, GIF or WebP image ({len(data):,} bytes starting {data[:8]!r})"
        )
    media_type, width, height = head
    data = repaired(data)
    problem = undecodable(data)
    if problem:
        raise ConfigError(f"{label or 'the image'} looks like {media_type} but cannot be decoded: {problem}")
    if max(width, height) > MAX_EDGE or len(data) > MAX_BYTES:
        data, media_type, width, height = downscale(data, label=label)
    return ImagePart(media_type, hashlib.sha256(data).hexdigest(), width, height, label, data)


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def repaired(data: bytes) -> bytes:
    """`data` without the ancillary PNG chunks whose CRC is wrong (Pillow refuses the whole
    image for one); `data` itself when it has none. Every path that decodes an image goes
    through here.

    Ancillary chunks (a lower-case first letter: colour profiles, text, time) carry no pixels, so
    a decoder may skip them; Pillow refuses the whole image instead (servers and files carry such
    chunks: the reference MCP `server-everything`'s own tiny PNG has a bad iCCP checksum). A
    critical chunk with a bad CRC, or a file that is not a well-formed chunk list, is left alone.
    """
    if not data.startswith(_PNG_SIGNATURE):
        return data
    out = [_PNG_SIGNATURE]
    pos, dropped = len(_PNG_SIGNATURE), False
    while pos + 12 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        end = pos + 12 + length
        if end > len(data):
            return data
        kind, payload = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : end])
        if zlib.crc32(kind + payload) != crc:
            if not kind[:1].islower():
                return data
            dropped = True
        else:
            out.append(data[pos:end])
        pos = end
        if kind == b"IEND":
            break
    return b"".join(out) if dropped else data


def undecodable(data: bytes) -> str | None:
    """Why Pillow cannot decode `data` (truncated, corrupt, a decompression bomb), or None.

    Without Pillow nothing is checked: the header was read, and the provider is the judge.
    """
    try:
        from PIL import Image
    except ImportError:
        return None
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
    except Exception as exc:  # noqa: BLE001 - any decoder failure means "not an image we can send"
        return f"{type(exc).__name__}: {exc}"
    return None


def downscale(
    data: bytes, *, label: str = "", max_edge: int = MAX_EDGE, max_bytes: int = MAX_BYTES
) -> tuple[bytes, str, int, int]:
    """(bytes, media type, width, height) scaled to `max_edge` px on the long edge, then
    re-encoded (PNG, else JPEG at falling quality) under `max_bytes`.

    Raises `ConfigError` when Pillow (`pip install 'flue_nb[images]'`) is not installed.
    """
    try:
        from PIL import Image
    except ImportError:
        raise ConfigError(
            f"{label or 'an image'} is larger than {max_edge} px or {max_bytes:,} bytes and Pillow "
            "is not installed to scale it down: `pip install 'flue_nb[images]'`"
        ) from None
    with Image.open(io.BytesIO(repaired(data))) as opened:
        opened.load()
        fmt = opened.format or "PNG"
        if getattr(opened, "n_frames", 1) > 1:
            opened.seek(0)  # an animation: its first frame stands for it
        img: Image.Image = opened
        if max(img.size) > max_edge:
            scale = max_edge / max(img.size)
            size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
            img = img.resize(size, Image.Resampling.LANCZOS)
        out = _encode(img, "PNG" if fmt in ("PNG", "GIF", "WEBP") else "JPEG", 90)
        quality = 85
        while len(out[0]) > max_bytes:
            if quality >= 45:
                out = _encode(img, "JPEG", quality)
                quality -= 20
            else:
                img = img.resize((max(1, img.width * 3 // 4), max(1, img.height * 3 // 4)))
                out = _encode(img, "JPEG", 70)
        return out[0], out[1], img.width, img.height


def _encode(img: Any, fmt: str, quality: int) -> tuple[bytes, str]:
    buf = io.BytesIO()
    if fmt == "JPEG":
        if img.mode not in ("RGB", "L"):
            from PIL import Image

            # JPEG has no alpha: flatten onto white, as a transparent plot shows on a page.
            rgba = img.convert("RGBA")
            flat = Image.new("RGB", rgba.size, (255, 255, 255))
            flat.paste(rgba, mask=rgba.getchannel("A"))
            img = flat
        img.save(buf, format="JPEG", quality=quality, optimize=True)
        return buf.getvalue(), "image/jpeg"
    img.save(buf, format="PNG", optimize=True)
    return buf.getvalue(), "image/png"


def figure_png(fig: Any) -> bytes:
    """A matplotlib figure as PNG bytes, drawn as the notebook's inline backend draws it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", facecolor="white")
    return buf.getvalue()


def _is_figure(obj: Any) -> bool:
    cls = type(obj)
    return cls.__name__ in ("Figure", "SubFigure") and cls.__module__.startswith("matplotlib")


def _decode(value: Any) -> bytes | None:
    if isinstance(value, tuple):  # `_repr_png_` may return (data, metadata)
        value = value[0]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=False)
        except ValueError:
            return None
    return None


def rich_image(obj: Any) -> tuple[bytes | None, str | None]:
    """The image an object shows itself as in a notebook, as (bytes, None), or (None, why not).

    Looks at a matplotlib figure, a PIL image, `_repr_mimebundle_`, `_repr_png_`, `_repr_jpeg_`
    and `_repr_svg_` (SVG only when `cairosvg` is there to rasterise it). (None, None) when the
    object has no image form at all.
    """
    if _is_figure(obj):
        return figure_png(obj), None
    if type(obj).__module__.startswith("PIL.") and hasattr(obj, "save"):
        buf = io.BytesIO()
        obj.save(buf, format="PNG")
        return buf.getvalue(), None
    data, svg = _from_bundle(obj)
    if data:
        return data, None
    for name in ("_repr_png_", "_repr_jpeg_"):
        fn = getattr(obj, name, None)
        if callable(fn) and not isinstance(obj, type):
            try:
                data = _decode(fn())
            except Exception:  # noqa: BLE001 - as above
                data = None
            if data:
                return data, None
    fn = getattr(obj, "_repr_svg_", None)
    if svg is None and callable(fn) and not isinstance(obj, type):
        try:
            svg = fn()
        except Exception:  # noqa: BLE001 - as above
            svg = None
    if isinstance(svg, tuple):
        svg = svg[0]
    if isinstance(svg, (str, bytes)) and svg:
        return svg_png(svg)
    return None, None


def _from_bundle(obj: Any) -> tuple[bytes | None, Any]:
    """(raster bytes, None) or (None, the SVG or None) from an object's `_repr_mimebundle_`."""
    bundle_fn = getattr(obj, "_repr_mimebundle_", None)
    if not callable(bundle_fn) or isinstance(obj, type):
        return None, None
    try:
        bundle = bundle_fn(include=None, exclude=None)
    except Exception:  # noqa: BLE001 - a broken repr means no image, not a failed call
        return None, None
    if isinstance(bundle, tuple):
        bundle = bundle[0]
    if not isinstance(bundle, dict):
        return None, None
    for mime in ("image/png", "image/jpeg", "image/gif", "image/webp"):
        data = _decode(bundle.get(mime))
        if data:
            return data, None
    return None, bundle.get("image/svg+xml")


_SVG_ROOT = re.compile(rb"<svg\b[^>]*>", re.IGNORECASE)
_SVG_ATTR = re.compile(rb"""\b(width|height|viewBox)\s*=\s*["']([^"']*)["']""")
_SVG_LENGTH = re.compile(r"\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*(px|pt|pc|mm|cm|in|em|ex|)\s*")
_PX_PER_UNIT = {"": 1.0, "px": 1.0, "pt": 4 / 3, "pc": 16.0, "mm": 96 / 25.4, "cm": 96 / 2.54, "in": 96.0}
_PX_PER_UNIT |= {"em": 16.0, "ex": 8.0}


def svg_size(svg: str | bytes) -> tuple[float, float] | None:
    """The size in pixels an SVG's root element declares (`width`/`height`, else its `viewBox`).

    None when it declares none that can be read (a percentage, no root in the first 64 KB).
    """
    raw = svg.encode("utf-8", "replace") if isinstance(svg, str) else svg
    root = _SVG_ROOT.search(raw[:65536])
    if root is None:
        return None
    attrs = {k.decode(): v.decode("ascii", "replace") for k, v in _SVG_ATTR.findall(root.group(0))}

    def px(value: str | None) -> float | None:
        m = _SVG_LENGTH.fullmatch(value) if value is not None else None
        return float(m.group(1)) * _PX_PER_UNIT[m.group(2)] if m else None

    width, height = px(attrs.get("width")), px(attrs.get("height"))
    box = attrs.get("viewBox", "").replace(",", " ").split()
    try:
        box_w, box_h = (float(box[2]), float(box[3])) if len(box) == 4 else (None, None)
    except ValueError:
        box_w = box_h = None
    width = width if width is not None else box_w
    height = height if height is not None else box_h
    if width is None or height is None or not (width > 0 and height > 0):
        return None
    return width, height


def svg_png(svg: str | bytes) -> tuple[bytes | None, str | None]:
    """An SVG rasterised to PNG at most `MAX_EDGE` px on its long edge: (PNG, None) or (None, why).

    The declared size is read first and the drawing scaled down before it is rasterised: drawn
    at a declared 30000×30000, one SVG took 29.5 s and 3.5 GB before Pillow refused the result.
    """
    try:
        import cairosvg
    except (ImportError, OSError):  # OSError: cairosvg is installed but the cairo library is not
        return None, "an SVG image (the model takes PNG, JPEG, GIF or WebP; install `cairosvg` to convert SVG)"
    raw = svg.encode() if isinstance(svg, str) else svg
    size = svg_size(raw)
    scale = min(1.0, MAX_EDGE / max(size)) if size is not None else 1.0
    try:
        return cairosvg.svg2png(bytestring=raw, scale=scale), None
    except Exception as exc:  # noqa: BLE001 - a bad SVG is a note, not a failure
        return None, f"an SVG image that could not be converted ({type(exc).__name__})"


def image_from_object(obj: Any, *, label: str = "") -> ImagePart:
    """An `ImagePart` from what a person attaches: an `ImagePart`, bytes, an image file's path,
    a matplotlib figure, a PIL image, an `IPython.display.Image` or any object with an image repr.

    Raises `ConfigError` saying what was wrong with `obj`.
    """
    if isinstance(obj, ImagePart):
        if obj.data is None:
            raise ConfigError(f"image {obj.describe()} has no bytes to send")
        return obj
    if isinstance(obj, (bytes, bytearray)):
        return image_from_bytes(bytes(obj), label=label)
    if isinstance(obj, (str, os.PathLike)):
        path = os.fspath(obj)
        if not os.path.isfile(path):
            raise ConfigError(f"no image file {path!r}")
        with open(path, "rb") as f:
            return image_from_bytes(f.read(), label=label or os.path.basename(path))
    data, why_not = rich_image(obj)
    if data is None:
        raise ConfigError(
            f"{label or type(obj).__name__!r} is not an image: attach a matplotlib figure, an "
            "IPython.display.Image, a PIL image, image bytes or a path to a PNG/JPEG/GIF/WebP file"
            + (f" (it is {why_not})" if why_not else "")
        )
    return image_from_bytes(data, label=label or type(obj).__name__)
