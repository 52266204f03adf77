"""Images cannot exhaust the kernel (issue 20.5): an SVG's declared size is read before it is
rasterised and the drawing scaled down first; `read` of a PNG that is truncated, header-only or
a decompression bomb names that cause instead of calling it a binary file."""

from __future__ import annotations

import asyncio
import io
import struct
import zlib
from pathlib import Path

import pytest

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

from flue_nb.runtime.images import MAX_EDGE, sniff, svg_png, svg_size  # noqa: E402
from flue_nb.runtime.sandbox.local import LocalSandbox  # noqa: E402
from flue_nb.runtime.tools import read_tool  # noqa: E402
from flue_nb.runtime.tools.tool import ToolContext, execute_tool  # noqa: E402


def png(w: int = 64, h: int = 64) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (200, 10, 10)).save(buf, "PNG")
    return buf.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb(w: int, h: int) -> bytes:
    """A PNG whose header declares w×h 1-bit pixels, with one row of data: a few hundred bytes."""
    ihdr = _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 1, 0, 0, 0, 0))
    return (
        b"\x89PNG\r\n\x1a\n" + ihdr + _chunk(b"IDAT", zlib.compress(b"\0" * (1 + (w + 7) // 8))) + _chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    ("root", "size"),
    [
        ('<svg width="30000" height="20000">', (30000.0, 20000.0)),
        ('<svg width="10in" height="5in">', (960.0, 480.0)),
        ("<svg viewBox='0 0 300 200'>", (300.0, 200.0)),
        ('<?xml version="1.0"?><svg xmlns="x" width="12pt" height="3pc" viewBox="0 0 1 1">', (16.0, 48.0)),
        ('<svg width="100%" height="100%">', None),
        ("<html>not svg</html>", None),
    ],
)
def test_an_svgs_declared_size_is_read_from_its_root(root: str, size: tuple[float, float] | None) -> None:
    assert svg_size(root + "</svg>") == size


def test_a_huge_declared_svg_is_drawn_at_the_long_edge_limit_not_at_its_size() -> None:
    pytest.importorskip("cairosvg")
    svg = '<svg width="30000" height="15000"><rect width="30000" height="15000" fill="red"/></svg>'
    data, why_not = svg_png(svg)
    assert why_not is None and data is not None
    assert sniff(data) == ("image/png", MAX_EDGE, MAX_EDGE // 2)


def test_a_small_svg_keeps_its_own_size() -> None:
    pytest.importorskip("cairosvg")
    data, _ = svg_png('<svg width="40" height="30"><rect width="4" height="3"/></svg>')
    assert data is not None and sniff(data) == ("image/png", 40, 30)


def read(tmp_path: Path, name: str, data: bytes) -> str:
    (tmp_path / name).write_bytes(data)
    out = asyncio.run(execute_tool(read_tool(LocalSandbox(tmp_path)), {"path": name}, ToolContext(call_id="c1")))
    assert out.is_error and not out.images
    return out.content


def test_read_of_a_truncated_png_says_it_is_truncated(tmp_path: Path) -> None:
    data = png()
    text = read(tmp_path, "cut.png", data[: len(data) // 2])
    assert "is a PNG file (64×64 by its header" in text and "truncated or damaged" in text
    assert "NUL" not in text


def test_read_of_a_header_only_png_says_it_has_no_image_data(tmp_path: Path) -> None:
    text = read(tmp_path, "head.png", png()[:33])
    assert "holds only its header (33 bytes, no image data)" in text


def test_read_of_a_png_bomb_names_the_declared_pixels(tmp_path: Path) -> None:
    text = read(tmp_path, "bomb.png", bomb(30000, 30000))
    assert "30,000×30,000 = 900,000,000 pixels" in text and "decompression bomb" in text
