"""`write` (contract 3.1): whole file, parents created, silent overwrite, byte count, lock."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools import PathLocks, edit_tool, write_tool


class SlowWrites(LocalSandbox):
    """Writes take a while, so an unserialised reader would see the file before the write."""

    async def write_file(self, path: str, data: bytes) -> None:
        await asyncio.sleep(0.05)
        await super().write_file(path, data)


def test_write_3_1_creates_missing_parent_directories(tmp_path: Path, tools, call) -> None:
    out = call(tools["write"], {"path": "a/b/c.txt", "content": "hi\n"})
    assert not out.is_error
    assert (tmp_path / "a/b/c.txt").read_text() == "hi\n"


def test_write_3_1_confirms_with_the_byte_count(tmp_path: Path, tools, call) -> None:
    out = call(tools["write"], {"path": "u.txt", "content": "héllo"})
    assert "6 bytes" in out.content  # UTF-8 bytes, not characters
    assert (tmp_path / "u.txt").read_bytes() == "héllo".encode()


def test_write_3_1_overwrites_silently(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("old content that is longer")
    out = call(tools["write"], {"path": "f.txt", "content": "new"})
    assert not out.is_error and (tmp_path / "f.txt").read_text() == "new"


def test_write_3_1_absolute_path(tmp_path: Path, tools, call) -> None:
    target = tmp_path / "abs.txt"
    call(tools["write"], {"path": str(target), "content": "x"})
    assert target.read_text() == "x"


def test_write_3_1_takes_the_per_path_lock(tmp_path: Path, run, acall) -> None:
    sandbox = SlowWrites(tmp_path)
    locks = PathLocks()
    write, edit = write_tool(sandbox, locks), edit_tool(sandbox, locks)

    async def batch():
        return await asyncio.gather(
            acall(write, {"path": "f.txt", "content": "one two"}),
            acall(edit, {"path": "./f.txt", "old_text": "two", "new_text": "three"}),
        )

    w, e = run(batch())
    assert not w.is_error and not e.is_error, e.content
    assert (tmp_path / "f.txt").read_text() == "one three"
    assert len(locks) == 0


def test_write_to_a_directory_is_an_error_result(tmp_path: Path, tools, call) -> None:
    (tmp_path / "d").mkdir()
    out = call(tools["write"], {"path": "d", "content": "x"})
    assert out.is_error and "not a regular file" in out.content


def test_write_to_a_fifo_is_an_error_result_not_a_hang(tmp_path: Path, tools, call) -> None:
    os.mkfifo(tmp_path / "pipe")
    out = call(tools["write"], {"path": "pipe", "content": "x"})
    assert out.is_error and "not a regular file" in out.content


def test_write_of_20_mib_streams_instead_of_holding_another_copy(tmp_path: Path, tools, call) -> None:
    import tracemalloc

    content = ("naïve café ☕ line\n" * (20 * 2**20 // 22))[: 20 * 2**20]
    tracemalloc.start()
    try:
        out = call(tools["write"], {"path": "big.txt", "content": content})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = len(content.encode())
    assert out.content == f"Wrote {size} bytes to `big.txt`."
    # Before: the whole encoded content (> 20 MiB) on top of the input.
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB"
    assert (tmp_path / "big.txt").stat().st_size == size
    assert (tmp_path / "big.txt").read_text(encoding="utf-8") == content


def test_write_and_edit_issue_19_9_a_concurrent_reader_sees_old_or_new_never_a_torn_file(
    tmp_path: Path, tools, run, acall
) -> None:
    """A reader thread racing write/edit sees one of the whole contents, never an empty or partial file."""
    import threading

    target = tmp_path / "f.txt"
    old, new = "a" * 200_000 + "\n", "b" * 300_000 + "\n"
    target.write_text(old)
    os.chmod(target, 0o640)
    seen: set[str] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.add(target.read_text())

    thread = threading.Thread(target=reader)
    thread.start()

    async def go() -> None:
        for _ in range(15):
            assert not (await acall(tools["write"], {"path": "f.txt", "content": new})).is_error
            out = await acall(tools["edit"], {"path": "f.txt", "old_text": new, "new_text": old})
            assert not out.is_error, out.content

    try:
        run(go())
    finally:
        stop.set()
        thread.join()
    assert seen <= {old, new} and seen, [len(s) for s in seen - {old, new}]
    assert target.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]  # no temporary file left behind


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only file; nothing to refuse")
def test_write_issue_19_9_a_read_only_file_is_refused_as_before(tmp_path: Path, tools, call) -> None:
    """The rename could replace a file the user made read-only: it is refused, as an in-place write was."""
    (tmp_path / "ro.txt").write_text("keep")
    os.chmod(tmp_path / "ro.txt", 0o444)
    out = call(tools["write"], {"path": "ro.txt", "content": "new"})
    assert out.is_error and (tmp_path / "ro.txt").read_text() == "keep"
