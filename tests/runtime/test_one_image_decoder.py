"""One image decoder (issue 32.14): a PNG whose colour profile (iCCP) has a bad checksum decodes
on every path, not only through an MCP result. Pillow refuses such a file whole; the chunk carries
no pixels, so it is dropped and the image decoded again, wherever an image comes in."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from pathlib import Path

from agents import make_agent, session
from PIL import Image

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.runtime.images import downscale, image_from_bytes, image_from_object, repaired, undecodable
from flue_nb.runtime.messages import ToolResultMessage
from flue_nb.runtime.tools._mcp_content import to_output


def bad_iccp_png(width: int = 40, height: int = 30) -> bytes:
    """A PNG with an iCCP chunk right after IHDR whose CRC is wrong (the pixels are fine)."""
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 40, 40)).save(buf, format="PNG")
    good = buf.getvalue()
    body = b"sRGB\x00\x00" + zlib.compress(b"\x00" * 16)
    chunk = struct.pack(">I", len(body)) + b"iCCP" + body + struct.pack(">I", zlib.crc32(b"iCCP" + body) ^ 1)
    return good[:33] + chunk + good[33:]  # 8 signature + 25 IHDR


def test_pillow_alone_refuses_the_file_and_the_repair_is_what_makes_it_decode() -> None:
    data = bad_iccp_png()
    assert undecodable(data) is not None  # the fault this file reproduces
    fixed = repaired(data)
    assert fixed != data and undecodable(fixed) is None
    assert repaired(fixed) == fixed  # nothing left to drop


def test_a_damaged_critical_chunk_is_not_repaired() -> None:
    data = bytearray(bad_iccp_png())
    idat = data.index(b"IDAT")
    data[idat + 6] ^= 0xFF  # pixel data: no decoder may skip it
    assert repaired(bytes(data)) == bytes(data)


def test_image_from_bytes_and_attachments_decode_it(tmp_path: Path) -> None:
    part = image_from_bytes(bad_iccp_png(), label="x")
    assert (part.media_type, part.width, part.height) == ("image/png", 40, 30)
    assert undecodable(part.data or b"") is None  # what is sent decodes
    path = tmp_path / "attached.png"
    path.write_bytes(bad_iccp_png())
    assert image_from_object(str(path)).width == 40


def test_read_shows_it_as_an_image(tmp_path: Path) -> None:
    # Before: "`icc.png` is a PNG file ... that cannot be decoded: it is truncated or damaged".
    (tmp_path / "icc.png").write_bytes(bad_iccp_png())
    model = ScriptedModel([reply("", tool_call("read", path="icc.png")), reply("ok")])
    session(make_agent(model, sandbox=flue.local(str(tmp_path)))).prompt("look")
    result = model.requests[-1].messages[-1]
    assert isinstance(result, ToolResultMessage) and not result.is_error, result.content
    assert "40×30 PNG" in result.content
    [image] = result.images
    assert (image.width, image.height) == (40, 30) and undecodable(image.data or b"") is None


def test_an_mcp_result_decodes_it() -> None:
    class Block:
        type = "image"
        mime_type = "image/png"
        data = base64.b64encode(bad_iccp_png()).decode()

    class Result:
        content = [Block()]
        structured_content = None
        is_error = False

    out = to_output(Result(), "srv", "pic")
    [image] = out.images
    assert (image.width, image.height) == (40, 30) and "not shown" not in out.content


def test_a_python_figure_decodes_it(tmp_path: Path) -> None:
    (tmp_path / "icc.png").write_bytes(bad_iccp_png())
    code = f"from IPython.display import Image\nImage(filename={str(tmp_path / 'icc.png')!r})"
    model = ScriptedModel([reply("", tool_call("python", code=code)), reply("ok")])
    session(make_agent(model, sandbox=flue.kernel(tmp_path, namespace={}))).prompt("show")
    result = model.requests[1].messages[-1]
    assert isinstance(result, ToolResultMessage)
    assert [(p.width, p.height) for p in result.images] == [(40, 30)], result.content


def test_a_large_one_is_scaled_down_too() -> None:
    data, media_type, width, height = downscale(bad_iccp_png(3000, 200), max_edge=1000)
    assert (media_type, width, height) == ("image/png", 1000, 67)
    part = image_from_bytes(bad_iccp_png(3000, 200))
    assert part.width == 1568 and undecodable(part.data or b"") is None
