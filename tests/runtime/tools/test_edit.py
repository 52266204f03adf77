"""`edit` (contract 4): exact, literal, unique matches; `replace_all`; the per-path lock."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools import PathLocks, bash_tool, edit_tool, standard_tools


class Tracking(LocalSandbox):
    """Slow reads that record how many run at once."""

    def __init__(self, cwd: Path) -> None:
        super().__init__(cwd)
        self.active = 0
        self.peak = 0

    async def read_file(self, path: str) -> bytes:
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(0.05)
            return await super().read_file(path)
        finally:
            self.active -= 1


def test_edit_4_1_empty_old_text_is_an_error(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("abc")
    out = call(tools["edit"], {"path": "f.txt", "old_text": "", "new_text": "x"})
    assert out.is_error and "empty" in out.content
    assert (tmp_path / "f.txt").read_text() == "abc"


def test_edit_4_2_replaces_the_one_exact_match(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.py").write_text("def f():\n    return 1\n")
    out = call(tools["edit"], {"path": "f.py", "old_text": "    return 1", "new_text": "    return 2"})
    assert not out.is_error and "1 occurrence" in out.content
    assert (tmp_path / "f.py").read_text() == "def f():\n    return 2\n"


def test_edit_4_2_zero_matches_mentions_whitespace_and_indentation(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.py").write_text("def f():\n    return 1\n")
    out = call(tools["edit"], {"path": "f.py", "old_text": "  return 1\n  ", "new_text": "x"})
    assert out.is_error
    assert "whitespace" in out.content and "indentation" in out.content
    assert "could not find" in out.content.lower()
    assert (tmp_path / "f.py").read_text() == "def f():\n    return 1\n"


def test_edit_4_2_several_matches_give_the_count_and_ask_for_context(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("x = 1\nx = 1\nx = 1\n")
    out = call(tools["edit"], {"path": "f.txt", "old_text": "x = 1", "new_text": "x = 2"})
    assert out.is_error and "3" in out.content
    assert "context" in out.content and "replace_all" in out.content
    assert (tmp_path / "f.txt").read_text() == "x = 1\nx = 1\nx = 1\n"


def test_edit_4_2_replacement_is_literal(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("m = re.match(r'(a.b)', s)\n")
    out = call(
        tools["edit"],
        {"path": "f.txt", "old_text": "r'(a.b)'", "new_text": r"r'\1 $1 \g<0>'"},
    )
    assert not out.is_error
    assert (tmp_path / "f.txt").read_text() == "m = re.match(r'\\1 $1 \\g<0>', s)\n"


def test_edit_4_3_replace_all_replaces_every_occurrence_and_reports_the_count(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("foo bar foo baz foo\n")
    out = call(tools["edit"], {"path": "f.txt", "old_text": "foo", "new_text": "qux", "replace_all": True})
    assert not out.is_error and "3 occurrences" in out.content
    assert (tmp_path / "f.txt").read_text() == "qux bar qux baz qux\n"


def test_edit_4_3_replace_all_with_none_found_is_an_error_and_changes_nothing(tmp_path: Path, tools, call) -> None:
    f = tmp_path / "f.txt"
    f.write_text("alpha\n")
    before = f.stat().st_mtime_ns
    out = call(tools["edit"], {"path": "f.txt", "old_text": "beta", "new_text": "x", "replace_all": True})
    assert out.is_error and f.read_text() == "alpha\n" and f.stat().st_mtime_ns == before


def test_edit_4_4_two_edits_same_file_one_batch_both_land(tmp_path: Path, run, acall) -> None:
    (tmp_path / "a.txt").write_text("first\nsecond\n")
    # Slow reads: without the lock both edits would read the original and one would be lost.
    tools = {t.name: t for t in standard_tools(Tracking(tmp_path))}

    async def batch():
        return await asyncio.gather(
            acall(tools["edit"], {"path": "a.txt", "old_text": "first", "new_text": "1st"}),
            acall(tools["edit"], {"path": "a.txt", "old_text": "second", "new_text": "2nd"}),
        )

    outs = run(batch())
    assert [o.is_error for o in outs] == [False, False]
    assert (tmp_path / "a.txt").read_text() == "1st\n2nd\n"


def test_edit_4_4_calls_run_in_dispatch_order(tmp_path: Path, run, acall) -> None:
    (tmp_path / "a.txt").write_text("a")
    sandbox = Tracking(tmp_path)
    edit = edit_tool(sandbox, PathLocks())

    async def batch():
        # Each edit needs the previous one's result: only dispatch (FIFO) order lands all three.
        return await asyncio.gather(
            *(acall(edit, {"path": "a.txt", "old_text": o, "new_text": n}) for o, n in ["ab", "bc", "cd"])
        )

    assert not any(o.is_error for o in run(batch()))
    assert (tmp_path / "a.txt").read_text() == "d"


def test_edit_4_4_a_genuine_conflict_surfaces_as_could_not_find(tmp_path: Path, tools, run, acall) -> None:
    (tmp_path / "a.txt").write_text("value = 1\n")

    async def batch():
        return await asyncio.gather(
            acall(tools["edit"], {"path": "a.txt", "old_text": "value = 1", "new_text": "value = 2"}),
            acall(tools["edit"], {"path": "a.txt", "old_text": "value = 1", "new_text": "value = 3"}),
        )

    first, second = run(batch())
    assert not first.is_error
    assert second.is_error and "could not find" in second.content.lower()
    assert (tmp_path / "a.txt").read_text() == "value = 2\n"


@pytest.mark.parametrize("spelling", ["./a.txt", "sub/../a.txt", "ABS"])
def test_edit_4_4_path_spellings_share_one_lock(tmp_path: Path, run, acall, spelling: str) -> None:
    (tmp_path / "a.txt").write_text("x y")
    sandbox = Tracking(tmp_path)
    edit = edit_tool(sandbox, PathLocks())
    other = str(tmp_path / "a.txt") if spelling == "ABS" else spelling

    async def batch():
        return await asyncio.gather(
            acall(edit, {"path": "a.txt", "old_text": "x", "new_text": "1"}),
            acall(edit, {"path": other, "old_text": "y", "new_text": "2"}),
        )

    (tmp_path / "sub").mkdir()
    assert not any(o.is_error for o in run(batch()))
    assert sandbox.peak == 1  # serialised
    assert (tmp_path / "a.txt").read_text() == "1 2"


def test_edit_4_4_lock_key_is_the_normalised_absolute_path() -> None:
    key = PathLocks.key
    assert key("a.txt", cwd="/w") == key("./a.txt", cwd="/w") == key("/w/a.txt", cwd="/w") == "/w/a.txt"
    assert key("d/../a.txt", cwd="/w") == "/w/a.txt"
    assert key("b.txt", cwd="/w") != key("a.txt", cwd="/w")


def test_edit_4_4_different_paths_run_in_parallel(tmp_path: Path, run, acall) -> None:
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.txt").write_text("b")
    sandbox = Tracking(tmp_path)
    edit = edit_tool(sandbox, PathLocks())

    async def batch():
        return await asyncio.gather(
            acall(edit, {"path": "a.txt", "old_text": "a", "new_text": "A"}),
            acall(edit, {"path": "b.txt", "old_text": "b", "new_text": "B"}),
        )

    assert not any(o.is_error for o in run(batch()))
    assert sandbox.peak == 2


def test_edit_4_4_locks_are_dropped_when_no_one_waits(tmp_path: Path, run, acall) -> None:
    locks = PathLocks()
    sandbox = Tracking(tmp_path)
    edit = edit_tool(sandbox, locks)
    (tmp_path / "a.txt").write_text("a")

    async def batch():
        task = asyncio.gather(*(acall(edit, {"path": "a.txt", "old_text": "zzz", "new_text": "q"}) for _ in range(3)))
        await asyncio.sleep(0.01)
        waiting = len(locks)
        await task
        return waiting

    assert run(batch()) == 1
    assert len(locks) == 0


def test_edit_4_4_bash_is_not_synchronised(tmp_path: Path, run, acall) -> None:
    (tmp_path / "a.txt").write_text("content")
    sandbox = LocalSandbox(tmp_path)
    locks = PathLocks()
    bash = bash_tool(sandbox)

    async def while_locked():
        async with locks.hold("a.txt", cwd=sandbox.cwd):
            # Would deadlock if bash took the file's lock.
            return await asyncio.wait_for(acall(bash, {"command": "cat a.txt"}), 10)

    assert run(while_locked()).content == "content"


def test_edit_missing_file_is_an_error_result(tools, call) -> None:
    out = call(tools["edit"], {"path": "nope.txt", "old_text": "a", "new_text": "b"})
    assert out.is_error and "not found" in out.content.lower()


def test_edit_non_utf8_file_is_an_error_result(tmp_path: Path, tools, call) -> None:
    (tmp_path / "b.bin").write_bytes(b"\xff\xfe abc")
    out = call(tools["edit"], {"path": "b.bin", "old_text": "abc", "new_text": "x"})
    assert out.is_error and "UTF-8" in out.content
    assert (tmp_path / "b.bin").read_bytes() == b"\xff\xfe abc"


# --- big files are streamed (issue 12, point 12) -------------------------------------------------


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file takes the streaming path, read in 7-byte chunks so matches straddle chunks."""
    from flue_nb.runtime.tools import edit

    monkeypatch.setattr(edit, "IN_MEMORY_BYTES", 0)
    monkeypatch.setattr(edit, "_CHUNK", 7)


@pytest.mark.parametrize(
    ("text", "old", "new", "replace_all"),
    [
        ("alpha beta gamma\n", "beta", "BETA", False),
        ("one two one two one\n", "one", "1", True),
        ("aaaaaaa", "aa", "b", True),  # self-overlapping: leftmost, non-overlapping, like str.replace
        ("abcabcabd abcabd", "abcabd", "X", True),
        ("café ☕ naïve ☕ end", "☕", "tea", True),
        ("line\n" * 50 + "needle at the end", "needle at the end", "found", False),
    ],
)
def test_edit_streamed_matches_exactly_what_str_replace_does(
    tmp_path: Path, tools, call, streamed, text: str, old: str, new: str, replace_all: bool
) -> None:
    (tmp_path / "f.txt").write_text(text, encoding="utf-8")
    out = call(
        tools["edit"],
        {"path": "f.txt", "old_text": old, "new_text": new, "replace_all": replace_all},
    )
    assert not out.is_error, out.content
    assert f"replaced {text.count(old)} occurrence" in out.content
    assert (tmp_path / "f.txt").read_text(encoding="utf-8") == text.replace(old, new)


def test_edit_streamed_keeps_the_rules_and_leaves_the_file_alone_on_error(
    tmp_path: Path, tools, call, streamed
) -> None:
    f = tmp_path / "f.txt"
    f.write_text("x = 1\nx = 1\n")
    out = call(tools["edit"], {"path": "f.txt", "old_text": "x = 1", "new_text": "x = 2"})
    assert out.is_error and "replace_all" in out.content
    out = call(tools["edit"], {"path": "f.txt", "old_text": "y", "new_text": "z"})
    assert out.is_error and "whitespace" in out.content
    f.write_bytes(b"ok \xff\xfe ok")
    out = call(tools["edit"], {"path": "f.txt", "old_text": "ok", "new_text": "no", "replace_all": True})
    assert out.is_error and "UTF-8" in out.content
    assert f.read_bytes() == b"ok \xff\xfe ok"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]  # no temporary file left


def test_edit_streamed_keeps_the_mode_and_edits_through_a_symlink(tmp_path: Path, tools, call, streamed) -> None:
    target = tmp_path / "real.txt"
    target.write_text("hello world\n")
    target.chmod(0o640)
    (tmp_path / "link.txt").symlink_to(target)
    out = call(tools["edit"], {"path": "link.txt", "old_text": "world", "new_text": "there"})
    assert not out.is_error, out.content
    assert (tmp_path / "link.txt").is_symlink()
    assert target.read_text() == "hello there\n" and (target.stat().st_mode & 0o777) == 0o640


def test_edit_of_a_big_file_holds_about_a_chunk_not_the_file(tmp_path: Path, tools, call) -> None:
    import tracemalloc

    line = b"the quick brown fox jumps over the lazy dog 0123456789\n"
    with open(tmp_path / "big.txt", "wb") as f:
        for _ in range(40):  # 40 MiB
            f.write(line * ((1 << 20) // len(line)))
        f.write(b"UNIQUE MARKER\n")
    tracemalloc.start()
    try:
        out = call(tools["edit"], {"path": "big.txt", "old_text": "UNIQUE MARKER", "new_text": "X"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not out.is_error, out.content
    # Before: the whole file as bytes, as text, the new text and its bytes (> 150 MiB).
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.1f} MiB"
    with open(tmp_path / "big.txt", "rb") as f:
        f.seek(-2, os.SEEK_END)
        assert f.read() == b"X\n"


def test_edit_refuses_a_file_too_big_for_a_sandbox_that_cannot_stream(
    tmp_path: Path, call, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flue_nb.runtime.tools import edit

    class WholeFilesOnly(LocalSandbox):
        write_chunks = None  # type: ignore[assignment]

    monkeypatch.setattr(edit, "IN_MEMORY_BYTES", 10)
    monkeypatch.setattr(edit, "MAX_IN_MEMORY_BYTES", 100)
    (tmp_path / "f.txt").write_text("x" * 200)
    sandbox = WholeFilesOnly(tmp_path)
    out = call(edit_tool(sandbox, PathLocks()), {"path": "f.txt", "old_text": "x", "new_text": "y"})
    assert out.is_error and "MiB" in out.content and "sed" in out.content
    assert (tmp_path / "f.txt").read_text() == "x" * 200
