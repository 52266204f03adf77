"""The `edit` tool: replace exact text in a file, under the per-path lock (contract 4).

Small files are edited in memory. A big one is streamed, so editing a 1 GB file holds about a
megabyte: matches are found on the bytes (UTF-8 is self-synchronising, so a byte match of valid
UTF-8 text is a character match), then the file is rewritten through a temporary file.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict, Field

from flue_nb.runtime.effect_capture import FileState, file_effect, file_state, local_root, record_files
from flue_nb.runtime.effects import Bounds
from flue_nb.runtime.sandbox import Sandbox, StreamingWrites
from flue_nb.runtime.tools._locks import PathLocks
from flue_nb.runtime.tools.read import PathArg, locate
from flue_nb.runtime.tools.runs_later import path_runs_later
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput

__all__ = ["EditInput", "edit_tool"]


class EditInput(BaseModel):
    """Input of `edit`."""

    model_config = ConfigDict(extra="forbid")

    path: PathArg = Field(description="File to edit, absolute or relative to the working directory.")
    old_text: str = Field(
        description="Exact text to find, including whitespace and indentation. Without "
        "`replace_all` it must occur exactly once: include enough surrounding lines to make "
        "it unique."
    )
    new_text: str = Field(description="Text to put in its place (taken literally).")
    replace_all: bool = Field(False, description="Replace every occurrence instead of exactly one.")


DESCRIPTION = """Edit a file by replacing exact text. `old_text` must match the file exactly \
(whitespace and indentation included) and, unless `replace_all` is true, exactly once; the \
replacement is literal. Read the file first. To create or fully rewrite a file, use `write`."""


IN_MEMORY_BYTES = 8 * 1024 * 1024
"""Files up to this size are edited in memory and rewritten in place; bigger ones are streamed
twice (count, then replace into a temporary file renamed over the original), so memory stays
at about one chunk whatever the file's size."""
MAX_IN_MEMORY_BYTES = 64 * 1024 * 1024
"""The largest file `edit` changes on a sandbox that cannot stream a write (no `write_chunks`)."""
_CHUNK = 1 << 20
_BOUNDS = Bounds()


def _error(text: str) -> ToolOutput:
    return ToolOutput(text, is_error=True)


def _not_found(path: str, replace_all: bool, too_long: bool) -> ToolOutput:
    return _error(
        f"Could not find `old_text` in `{path}`. It must match exactly, including "
        "whitespace and indentation; read the file again and copy the text exactly."
        + (" (`old_text` is longer than the whole file.)" if too_long else "")
        + (" Nothing was replaced." if replace_all else "")
    )


def _ambiguous(path: str, count: int, at_least: bool = False) -> ToolOutput:
    return _error(
        f"`old_text` matches {'at least ' if at_least else ''}{count} places in `{path}`; it must "
        "match exactly one. Include more surrounding context to make it unique, or set "
        "`replace_all` to replace every occurrence."
    )


def _not_utf8(path: str) -> ToolOutput:
    return _error(f"`{path}` is not UTF-8 text; `edit` cannot change it safely.")


class _Changed(Exception):
    """The file no longer has the matches the first pass counted."""


async def _matches(
    chunks: AsyncIterator[bytes],
    needle: bytes,
    out: list[int],
    *,
    replacement: bytes = b"",
    stop_after: int | None = None,
    expect: int | None = None,
    check_utf8: bool = False,
) -> AsyncIterator[bytes]:
    """Stream the file, finding `needle` as `bytes.replace` would (leftmost, non-overlapping).

    Yields the output with each match replaced; `out[0]` counts the matches. Stops once
    `stop_after` matches were seen; raises `_Changed` when the count is not `expect`, and
    `UnicodeDecodeError` when `check_utf8` and the file is not UTF-8.
    """
    decoder = codecs.getincrementaldecoder("utf-8")() if check_utf8 else None
    keep = len(needle) - 1
    # No proper prefix of the needle is also its suffix (true of most text, e.g. "ab" but not
    # "aa"): checked for needles short enough to make the quadratic check cheap.
    border_free = len(needle) <= 4096 and not any(needle.endswith(needle[:k]) for k in range(1, len(needle)))
    buf = b""
    try:
        async for chunk in chunks:
            if decoder is not None:
                decoder.decode(chunk)
            buf = buf + chunk if buf else chunk
            if border_free:
                # Occurrences cannot overlap, so bytes.count/replace (C loops) find exactly the
                # leftmost non-overlapping matches; hold back a tail that may start a match.
                last = buf.rfind(needle)
                cut = max(len(buf) - keep, 0 if last < 0 else last + len(needle))
                head, buf = buf[:cut], buf[cut:]
                found = head.count(needle)
                out[0] += found
                if expect is not None and out[0] > expect:
                    raise _Changed
                if stop_after is not None and out[0] >= stop_after:
                    return
                yield head.replace(needle, replacement) if found else head
                continue
            start = 0
            parts: list[bytes] = []  # one write per chunk read, however many matches it holds
            while (i := buf.find(needle, start)) >= 0:
                out[0] += 1
                if expect is not None and out[0] > expect:
                    raise _Changed
                parts += (buf[start:i], replacement)
                start = i + len(needle)
                if stop_after is not None and out[0] >= stop_after:
                    return
            # Hold back only what could be the start of a match running into the next chunk.
            cut = max(start, len(buf) - keep)
            parts.append(buf[start:cut])
            buf = buf[cut:]
            yield b"".join(parts)
        if decoder is not None:
            decoder.decode(b"", final=True)
        if expect is not None and out[0] != expect:
            raise _Changed
        if buf:
            yield buf
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:  # stopping early must not leave the file open
            await aclose()


async def _in_memory(sandbox: Sandbox, args: EditInput) -> ToolOutput:
    """Edit a file read whole."""
    raw = await sandbox.read_file(args.path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _not_utf8(args.path)
    del raw
    count = text.count(args.old_text)
    if count == 0:
        return _not_found(args.path, args.replace_all, len(args.old_text) > len(text))
    if count > 1 and not args.replace_all:
        return _ambiguous(args.path, count)
    new = text.replace(args.old_text, args.new_text)
    del text
    await sandbox.write_file(args.path, new.encode("utf-8", "surrogatepass"))
    return _done(args.path, count)


async def _streamed(sandbox: Sandbox, args: EditInput, size: int, writer: StreamingWrites) -> ToolOutput:
    """Edit a big file in two streamed passes: count, then replace into a renamed temporary file."""
    needle = args.old_text.encode("utf-8", "surrogatepass")
    # Pass 1: count (and check the encoding), stopping at a second match when one must do.
    counted = [0]
    scan = _matches(
        sandbox.read_chunks(args.path, _CHUNK),
        needle,
        counted,
        stop_after=None if args.replace_all else 2,
        check_utf8=True,
    )
    try:
        async for _ in scan:
            pass
    except UnicodeDecodeError:
        return _not_utf8(args.path)
    count = counted[0]
    if count == 0:
        return _not_found(args.path, args.replace_all, len(needle) > size)
    if count > 1 and not args.replace_all:
        return _ambiguous(args.path, count, at_least=True)
    # Pass 2: replace into a temporary file that is renamed over the original.
    replaced = _matches(
        sandbox.read_chunks(args.path, _CHUNK),
        needle,
        [0],
        replacement=args.new_text.encode("utf-8", "surrogatepass"),
        expect=count,
    )
    try:
        await writer.write_chunks(args.path, replaced)
    except _Changed:  # something else (bash) wrote the file between the passes
        return _error(
            f"`{args.path}` changed while it was being edited; nothing was replaced. Read it again and retry."
        )
    return _done(args.path, count)


def edit_tool(sandbox: Sandbox, locks: PathLocks) -> Tool:
    """The `edit` tool on `sandbox`; takes the per-path lock shared with `write`."""

    async def run(args: EditInput, ctx: ToolContext) -> ToolOutput:
        if not args.old_text:
            return _error("`old_text` is empty; give the exact text to replace (use `write` for a new file).")
        # Taken before any await, so same-path calls of a batch queue in dispatch order (4.4):
        # a later edit then reads what the earlier one wrote.
        async with locks.hold(args.path, cwd=sandbox.cwd):
            args.path = await locate(sandbox, args.path)
            try:
                st = await sandbox.stat(args.path)
            except FileNotFoundError:
                return _error(f"File not found: `{args.path}`. Use `write` to create a file.")
            if st.kind != "file":  # a directory, FIFO or device: reading it fails or blocks
                return _error(f"`{args.path}` is not a regular file.")
            # The effect record (issue 34.1): the old content, read under the path's lock.
            root = local_root(sandbox)
            where = os.path.join(root, args.path) if root is not None else None
            before = file_state(where, _BOUNDS, keep=ctx.store is not None) if where else FileState(False)
            out = await _edit(sandbox, args, st.size)
            if where is not None and not out.is_error:
                effect, kept = file_effect(
                    where, before, file_state(where, _BOUNDS, keep=False), can_keep=ctx.store is not None
                )
                if effect is not None:
                    out.details = record_files(out.details, [(effect, kept)], ctx, _BOUNDS)
            return out

    return Tool("edit", DESCRIPTION, EditInput, run, summary_arg="path", runs_later=path_runs_later)


async def _edit(sandbox: Sandbox, args: EditInput, size: int) -> ToolOutput:
    """Edit in memory or streamed, by the file's size and what the sandbox can do."""
    if size <= IN_MEMORY_BYTES:
        return await _in_memory(sandbox, args)
    if isinstance(sandbox, StreamingWrites):
        return await _streamed(sandbox, args, size, sandbox)
    if size <= MAX_IN_MEMORY_BYTES:
        return await _in_memory(sandbox, args)
    return _error(
        f"`{args.path}` is {size / 2**20:,.0f} MiB; `edit` changes files up to "
        f"{MAX_IN_MEMORY_BYTES // 2**20} MiB in this sandbox. Use `bash` (e.g. `sed -i`) "
        "for bigger files."
    )


def _done(path: str, count: int) -> ToolOutput:
    noun = "occurrence" if count == 1 else "occurrences"
    return ToolOutput(f"Edited `{path}`: replaced {count} {noun}.")
