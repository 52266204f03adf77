"""The `read` tool: a window of a text file, paged with `offset`/`limit` (contract 2).

The file is streamed, so reading 50 KB of a 1 GB file holds about one chunk in memory. Lines are
shown as they are, without numbers (2.5).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.redact import redact
from flue_nb.runtime.sandbox import Sandbox
from flue_nb.runtime.text import unescape_name
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput
from flue_nb.runtime.tools.truncate import MAX_BYTES, MAX_LINES, utf8_prefix

__all__ = ["PathArg", "ReadInput", "locate", "no_nul", "read_tool"]

_CHUNK = 1 << 20  # big chunks: skipping to a far offset is a newline count per chunk
_SNIFF = 8192  # a NUL byte in the first 8 KB means binary, as git and grep decide


def no_nul(value: str) -> str:
    """Reject a string with a NUL byte: no path or argv element can hold one."""
    if "\x00" in value:
        raise ValueError("must not contain a NUL byte")
    return value


PathArg = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(no_nul)]
"""A path argument: non-empty, no NUL byte, at most PATH_MAX (the OS takes no other)."""


async def locate(sandbox: Sandbox, path: str) -> str:
    """`path` as given, or the name it escapes when only that exists.

    A file name that is not UTF-8 reaches the model escaped (`bad\\xff.txt`, runtime._text);
    given back, it must open the real file. A name that really is spelled with `\\x` wins.
    """
    raw = unescape_name(path)
    if raw == path:
        return path
    for candidate in (path, raw):
        try:
            await sandbox.stat(candidate)
            return candidate
        except OSError:
            continue
    # Neither exists (a new file): follow the escaped name only into an existing directory.
    parent, raw_parent = path.rpartition("/")[0], raw.rpartition("/")[0]
    if raw_parent != parent:
        try:
            await sandbox.stat(raw_parent)
            return raw
        except OSError:
            pass
    return path


class ReadInput(BaseModel):
    """Input of `read`."""

    model_config = ConfigDict(extra="forbid")

    path: PathArg = Field(description="File to read, absolute or relative to the working directory.")
    offset: int | None = Field(None, ge=1, description="1-indexed line number to start from. Default: the first line.")
    limit: int | None = Field(None, ge=1, description="Maximum number of lines to return.")


DESCRIPTION = f"""Read a text file. Returns its lines as they are (no line numbers added).
Output is cut to {MAX_LINES} lines or 50 KB, whichever comes first; a cut ends with a note saying \
which lines were shown and the `offset` to continue from. Use `offset` (1-indexed line number) \
and `limit` (line count) to page through long files. A PNG, JPEG, GIF or WebP image comes back \
as an image you can see (scaled to at most 1568 px); other binary files are refused."""

_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
_MAX_IMAGE_FILE = 50 * 1024 * 1024
"""Image files larger than this are not loaded (a photo that large is not worth scaling here)."""


@dataclass
class _Window:
    lines: list[bytes] = field(default_factory=list)
    size: int = 0
    """Bytes of the lines joined with newlines."""
    next_line: int | None = None
    """First line not shown because the 2000-line/50 KB budget ran out."""
    long_line: int | None = None
    """A line over 50 KB shown as its first 50 KB (contract 2.4)."""
    total_lines: int = 0
    """Lines in the file; exact only when the whole file was read."""
    binary: bool = False

    def take(self, head: bytearray, length: int, line_no: int, limit: int | None) -> bool:
        """Place line `line_no` (its first bytes `head`, `length` long); True when it is the end."""
        if limit is not None and len(self.lines) >= limit:
            return True  # cut by `limit` only: no marker (2.2)
        extra = length + (1 if self.lines else 0)
        if len(self.lines) >= MAX_LINES or self.size + extra > MAX_BYTES:
            if not self.lines:  # a single line over 50 KB (2.4)
                self.lines.append(_redacted_prefix(bytes(head)))
                self.long_line = line_no
                return False  # read on: is there a line after it?
            self.next_line = line_no
            return True
        if self.long_line is not None:
            self.next_line = line_no
            return True
        self.lines.append(bytes(head))
        self.size += extra
        return False


# A giant line's head is read a little past 50 KB so a secret across the cut is redacted whole
# before the cut (issue 20.2): cut first, its prefix would reach the model.
_HEAD_CAP = MAX_BYTES + 4096


def _redacted_prefix(data: bytes) -> bytes:
    """The first 50 KB of a giant line's head, with secrets redacted before the cut."""
    text = data.decode("utf-8", "surrogateescape")
    clean_text = redact(text)
    if clean_text != text:
        data = clean_text.encode("utf-8", "surrogateescape")
    return utf8_prefix(data, MAX_BYTES)


async def _scan(chunks: AsyncIterator[bytes], start: int, limit: int | None) -> _Window:
    """Collect lines `start`.. within the limits; stop reading as soon as the answer is known."""
    win = _Window()
    line_no = 1  # the line being read
    head = bytearray()  # its first bytes, capped: a giant line must not fill memory
    length = 0
    sniffed = False
    skipped_partial = False  # the skipped text ended inside a line (it counts, 2.3)

    async for chunk in chunks:
        if not sniffed:
            sniffed = True
            if b"\x00" in chunk[:_SNIFF]:
                win.binary = True
                return win
        pos, n = 0, len(chunk)
        if line_no < start:
            # Skip whole lines fast: count newlines instead of walking them.
            need = start - line_no
            count = chunk.count(b"\n")
            if count < need:
                line_no += count
                skipped_partial = not chunk.endswith(b"\n")
                continue
            skipped_partial = False
            for _ in range(need):
                pos = chunk.index(b"\n", pos) + 1
            line_no = start
        while pos < n:
            nl = chunk.find(b"\n", pos)
            end = n if nl < 0 else nl
            if len(head) <= _HEAD_CAP:
                head += chunk[pos : min(end, pos + _HEAD_CAP + 1 - len(head))]
            length += end - pos
            if nl < 0:
                break
            if win.take(head, length, line_no, limit):
                win.total_lines = line_no
                return win
            line_no += 1
            head.clear()
            length = 0
            pos = nl + 1
    if length:  # a last line without a newline
        if win.take(head, length, line_no, limit):
            win.total_lines = line_no
            return win
        line_no += 1
    elif skipped_partial:  # the same, before `start`: it only counts
        line_no += 1
    win.total_lines = line_no - 1
    return win


def read_tool(sandbox: Sandbox) -> Tool:
    """The `read` tool on `sandbox`."""

    async def run(args: ReadInput, ctx: ToolContext) -> ToolOutput:
        args.path = await locate(sandbox, args.path)
        try:
            st = await sandbox.stat(args.path)
        except FileNotFoundError:
            return ToolOutput(f"File not found: `{args.path}`.", is_error=True)
        if st.kind == "dir":
            return ToolOutput(
                f"`{args.path}` is a directory, not a file. Use `glob` or `bash` (ls) to list it.",
                is_error=True,
            )
        if st.kind != "file":  # a FIFO or device would block or never end
            return ToolOutput(f"`{args.path}` is not a regular file.", is_error=True)
        if args.path.lower().endswith(_IMAGE_SUFFIXES):
            image = await _read_image(sandbox, args.path, st.size)
            if image is not None:
                return image
        start = args.offset or 1
        chunks = sandbox.read_chunks(args.path, _CHUNK)
        try:
            win = await _scan(chunks, start, args.limit)
        finally:
            # _scan stops early: close the stream now (an async generator holds the open file).
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
        if win.binary and not args.path.lower().endswith(_IMAGE_SUFFIXES):
            image = await _read_image(sandbox, args.path, st.size)  # an image under another name
            if image is not None:
                return image
        if win.binary:
            return ToolOutput(
                f"`{args.path}` looks like a binary file (it contains NUL bytes); `read` shows "
                "text only. Use `bash` (e.g. `file`, `xxd | head`) to inspect it.",
                is_error=True,
            )
        return _shown(args.path, start, win)

    return Tool("read", DESCRIPTION, ReadInput, run, summary_arg="path", read_only=True)


def _shown(path: str, start: int, win: _Window) -> ToolOutput:
    """The result for the lines of a text file `_scan` collected from line `start`."""
    if not win.lines:
        if start == 1:
            return ToolOutput(f"(`{path}` is empty.)")
        return ToolOutput(
            f"offset={start} is past the end of `{path}`: the file has "
            f"{win.total_lines} line{'s' if win.total_lines != 1 else ''}.",
            is_error=True,
        )
    text = b"\n".join(win.lines).decode("utf-8", "replace")
    last = start + len(win.lines) - 1
    if win.long_line is not None:
        note = (
            f"[Line {win.long_line} is longer than 50 KB: showing its first 50 KB. The rest of "
            "this line cannot be reached with offset/limit; use `bash` (e.g. `cut -c` or "
            "`head -c`) to see it."
        )
        if win.next_line is not None:
            note += f" Use offset={win.next_line} to continue.]"
        else:
            note += "]"
        return ToolOutput(f"{text}\n\n{note}")
    if win.next_line is not None:
        why = f"{MAX_LINES}-line" if len(win.lines) >= MAX_LINES else "50 KB"
        return ToolOutput(
            f"{text}\n\n[Showing lines {start}-{last} ({why} limit). Use offset={win.next_line} to continue.]"
        )
    return ToolOutput(text)


# What marks the start of the pixel data: a file without it is only a header.
_IMAGE_DATA = {"image/png": b"IDAT", "image/jpeg": b"\xff\xda", "image/gif": b"\x2c", "image/webp": b"VP8"}


def _damaged(path: str, data: bytes, head: tuple[str, int, int], problem: str) -> str:
    """Why an image file that sniffs as one cannot be shown, in words the model can act on."""
    media_type, width, height = head
    fmt = media_type.rsplit("/", 1)[-1].upper()
    try:
        from PIL import Image

        limit = 2 * int(Image.MAX_IMAGE_PIXELS or 0)
    except ImportError:  # undecodable() found a problem, so Pillow is there; typed for mypy
        limit = 0
    if limit and width * height > limit:
        cause = (
            f"its header declares {width:,}×{height:,} = {width * height:,} pixels, more than the "
            f"{limit:,} Pillow decodes (a decompression bomb, or an image far too large to send)"
        )
    elif _IMAGE_DATA[media_type] not in data[12:]:
        cause = f"it holds only its header ({len(data):,} bytes, no image data)"
    else:
        cause = f"it is truncated or damaged (Pillow: {problem})"
    return (
        f"`{path}` is a {fmt} file ({width:,}×{height:,} by its header, {len(data):,} bytes) that "
        f"cannot be decoded: {cause}. It cannot be shown as an image; inspect or repair it with "
        "`bash` (e.g. `file`, `xxd | head`) or `python`."
    )


async def _read_image(sandbox: Sandbox, path: str, size: int | None) -> ToolOutput | None:
    """The file as an image result when it is a PNG, JPEG, GIF or WebP; None when it is not one."""
    from flue_nb.runtime.images import image_from_bytes, repaired, sniff, undecodable

    if size is not None and size > _MAX_IMAGE_FILE:
        return ToolOutput(
            f"`{path}` is an image file of {size:,} bytes, too large to load (the limit is "
            f"{_MAX_IMAGE_FILE:,}). Make a smaller copy with `bash` or `python` and read that.",
            is_error=True,
        )
    data = await sandbox.read_file(path)
    head = sniff(data)
    if head is None:
        return None  # not an image: `read` treats it as any other file
    problem = undecodable(repaired(data))  # the decoder every other path uses
    if problem:
        return ToolOutput(_damaged(path, data, head, problem), is_error=True)
    try:
        image = image_from_bytes(data, label=path)
    except ConfigError as exc:  # too large to send and no Pillow to scale it: the model can't fix that
        return ToolOutput(f"`{path}` is an image that cannot be shown: {exc}", is_error=True)
    media_type, width, height = head
    fmt = media_type.rsplit("/", 1)[-1].upper()
    text = f"Image `{path}`: {width}×{height} {fmt}, {len(data):,} bytes."
    if (image.width, image.height) != (width, height) or image.media_type != media_type:
        sent = image.media_type.rsplit("/", 1)[-1].upper()
        text += f" Scaled to {image.width}×{image.height} {sent} ({len(image.data or b''):,} bytes) to send it."
    return ToolOutput(
        text, images=[image], details={"image": {"width": width, "height": height, "media_type": media_type}}
    )
