"""Effects recorded with the step that made them (issue 34.1) and undone or rewound from the
records (34.2, 34.3): files written by `write`, `edit` and `bash`, and namespace values changed
by the `python` tool, without running the agent's code again."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.notebook.kernel.python_tool import python_tool
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.effects import Effects
from flue_nb.runtime.messages import SignalMessage
from flue_nb.runtime.store.sqlite import SQLiteStore
from flue_nb.runtime.tools.tool import ToolContext, execute_tool
from flue_nb.runtime.undo import changes, rewind, undo


def _session(tmp_path: Path, steps: list[Any]) -> flue.Session:
    model = ScriptedModel(steps)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)

    @flue.agent
    def worker() -> str:
        flue.use_model(model)
        flue.use_sandbox(flue.local(str(work)))
        return "Work."

    return flue.init(worker, db=str(tmp_path / "s.sqlite"), conversation="team:effects", settings=RunSettings())


def test_a_file_written_by_write_and_edited_by_edit_is_undone(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("original\n")
    s = _session(
        tmp_path,
        [
            reply("", tool_call("write", "w1", path="notes.txt", content="first draft\n")),
            reply("", tool_call("edit", "e1", path="notes.txt", old_text="first", new_text="second")),
            reply("", tool_call("write", "w2", path="new.txt", content="brand new\n")),
            reply("done"),
        ],
    )
    assert s.prompt("go") == "done"
    listed = s.changes()
    assert [(c.key, c.tool, c.effect.action) for c in listed] == [
        ("1.1", "write", "changed"), ("2.1", "edit", "changed"), ("3.1", "write", "created"),
    ]  # fmt: skip
    assert (work / "notes.txt").read_text() == "second draft\n"
    result = s.undo("all")
    assert result.done and len(result.undone) == 3
    assert (work / "notes.txt").read_text() == "original\n"
    assert not (work / "new.txt").exists()
    assert all(c.undone for c in s.changes())
    # The model is told on its next turn what was undone.
    notes = [m for m in s.history() if isinstance(m, SignalMessage)]
    assert notes and "notes.txt" in notes[-1].text and "undid" in notes[-1].text
    # ... and the views have a line for each item (a bare "signal (info)" before).
    assert len(notes[-1].changes) == 3 and all(c.startswith("the user undid ") for c in notes[-1].changes)
    assert any("notes.txt" in c for c in notes[-1].changes)


def test_a_file_written_by_bash_is_undone_and_a_changed_one_restored(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.csv").write_text("a,b\n1,2\n")
    s = _session(
        tmp_path,
        [
            reply("", tool_call("bash", "b1", command="echo out > made.txt && echo 3,4 >> data.csv && rm -f gone.txt")),
            reply("done"),
        ],
    )
    (work / "gone.txt").write_text("keep me\n")
    assert s.prompt("go") == "done"
    by_path = {Path(c.target).name: c for c in s.changes()}
    assert by_path["made.txt"].effect.action == "created"
    assert by_path["data.csv"].effect.action == "changed"
    assert by_path["gone.txt"].effect.action == "deleted"
    result = s.rewind(1)
    assert result.done, result.text()
    assert not (work / "made.txt").exists()
    assert (work / "data.csv").read_text() == "a,b\n1,2\n"
    assert (work / "gone.txt").read_text() == "keep me\n"


def test_an_undo_that_cannot_be_exact_refuses_and_changes_nothing(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("one\n")
    s = _session(
        tmp_path,
        [
            reply("", tool_call("write", "w1", path="a.txt", content="two\n")),
            reply("", tool_call("write", "w2", path="b.txt", content="bee\n")),
            reply("done"),
        ],
    )
    assert s.prompt("go") == "done"
    (work / "a.txt").write_text("edited by the user since\n")
    result = s.rewind(1)
    assert not result.done and not result.undone
    assert [(c.key, why) for c, why in result.refused] == [("1.1", "changed again since")]
    assert (work / "a.txt").read_text() == "edited by the user since\n"
    assert (work / "b.txt").exists(), "an all-or-nothing rewind left the other file alone too"
    assert not any(isinstance(m, SignalMessage) for m in s.history())
    forced = s.rewind(1, force=True)
    assert forced.done and (work / "a.txt").read_text() == "one\n" and not (work / "b.txt").exists()


def _python(ns: dict[str, Any], store: SQLiteStore, code: str, call_id: str) -> Any:
    tool = python_tool(ns)
    ctx = ToolContext(call_id=call_id, conversation_id="c", submission_id="s1", store=store)
    return asyncio.run(execute_tool(tool, {"code": code}, ctx))


def _record(store: SQLiteStore, call_id: str, out: Any) -> None:
    from flue_nb.runtime.messages import ToolResultMessage, message_to_dict

    msg = ToolResultMessage(call_id, "python", out.content, details=out.details)
    store.append("c", "s1", [("message", message_to_dict(msg))], now=time.time())


def test_python_records_old_values_and_a_rewind_restores_them(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    store = SQLiteStore(str(tmp_path / "s.sqlite"))
    store.admit("c", "go", submission_id="s1", now=time.time())
    ns: dict[str, Any] = {"df": pd.DataFrame({"a": [1, 2, 3, None]}), "n": 1, "keep": [1]}
    original = ns["df"].copy()
    first = _python(ns, store, "df['b'] = df['a'] * 2\nn = n + 1", "p1")
    _record(store, "p1", first)
    second = _python(ns, store, "df.loc[0, 'a'] = 100.0\nextra = 5", "p2")
    _record(store, "p2", second)
    third = _python(ns, store, "df = df.dropna()", "p3")
    _record(store, "p3", third)
    assert ns["df"].shape == (3, 2)
    effects = Effects.from_details(first.details)
    assert effects is not None
    by_name = {v.name: v for v in effects.variables}
    assert by_name["df"].action == "changed" and by_name["df"].kept
    assert by_name["df"].before is not None and by_name["df"].before.shape == (4, 1)
    assert by_name["df"].after is not None and by_name["df"].after.shape == (4, 2)
    # A change in place the shape does not show is still seen (the pickles differ).
    later = Effects.from_details(second.details)
    assert later is not None and {v.name for v in later.variables} == {"df", "extra"}
    result = rewind(store, "c", "s1", 1, namespace=ns)
    assert result.done, result.text()
    pd.testing.assert_frame_equal(ns["df"], original)
    assert ns["n"] == 1 and "extra" not in ns and ns["keep"] == [1]


def test_a_value_that_was_not_kept_refuses_its_undo(tmp_path: Path) -> None:
    import threading

    store = SQLiteStore(str(tmp_path / "s.sqlite"))
    store.admit("c", "go", submission_id="s1", now=time.time())
    ns: dict[str, Any] = {"lock": threading.Lock()}
    out = _python(ns, store, "lock = 1", "p1")
    _record(store, "p1", out)
    [item] = changes(store, "c", "s1")
    assert "cannot be pickled" in (item.effect.not_kept or "")  # type: ignore[union-attr]
    result = undo(store, "c", [item], namespace=ns)
    assert not result.done and ns["lock"] == 1
    assert "not kept" in result.text()


def test_a_sigkill_during_a_rewind_leaves_the_new_state_and_says_so(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from flue_nb.runtime.messages import ToolResultMessage, message_to_dict
    from flue_nb.runtime.sandbox.local import LocalSandbox
    from flue_nb.runtime.tools import PathLocks
    from flue_nb.runtime.tools.write import write_tool
    from flue_nb.runtime.undo import recover

    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("old a\n")
    (work / "b.txt").write_text("old b\n")
    db = str(tmp_path / "s.sqlite")
    store = SQLiteStore(db)
    store.admit("c", "go", submission_id="s1", now=time.time())
    tool = write_tool(LocalSandbox(str(work)), PathLocks())
    for n, name in enumerate(("a.txt", "b.txt")):
        ctx = ToolContext(call_id=f"w{n}", conversation_id="c", submission_id="s1", store=store)
        out = asyncio.run(execute_tool(tool, {"path": name, "content": f"new {name}\n"}, ctx))
        msg = ToolResultMessage(f"w{n}", "write", out.content, details=out.details)
        store.append("c", "s1", [("message", message_to_dict(msg))], now=time.time())
    child = subprocess.Popen([sys.executable, str(Path(__file__).with_name("effects_crash_child.py")), db, str(work)])
    try:
        deadline = time.monotonic() + 60
        while not (work / "marker").exists():
            assert child.poll() is None, "the child ended before its kill point"
            assert time.monotonic() < deadline, "the child never reached its kill point"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    # Killed between the two restores: b.txt (undone first, newest first) is back, a.txt not.
    assert (work / "b.txt").read_text() == "old b\n" and (work / "a.txt").read_text() == "new a.txt\n"
    assert not [p for p in work.iterdir() if p.name.startswith(".flue-undo-")]
    said = recover(store, "c")
    assert said is not None and "cut off by a crash" in said and "new state" in said
    assert (work / "a.txt").read_text() == "old a\n" and (work / "b.txt").read_text() == "old b\n"
    assert all(c.undone for c in changes(store, "c", "s1"))
    assert recover(store, "c") is None  # finished once


def test_files_a_python_call_writes_and_deletes_are_recorded_and_undone(tmp_path: Path) -> None:
    # Issue 34.1: the `python` tool's file effects, as `bash`'s: a bounded scan of its workspace
    # before and after the call, digests both sides, the old content kept; the store's own
    # files (here in the workspace) are left out.
    import hashlib

    from flue_nb.runtime.messages import ToolResultMessage, message_to_dict

    work = tmp_path / "work"
    work.mkdir()
    (work / "old.csv").write_text("a\n1\n")
    (work / "data.csv").write_text("a\n1\n2\n")
    store = SQLiteStore(str(work / "flue.sqlite"))
    store.admit("c", "go", submission_id="s1", now=time.time())
    ns: dict[str, Any] = {}
    tool = python_tool(ns, workspace=str(work))
    code = (
        "import os\n"
        f"base = {str(work)!r}\n"
        "with open(os.path.join(base, 'made.txt'), 'w') as f:\n    f.write('made by python\\n')\n"
        "with open(os.path.join(base, 'data.csv'), 'a') as f:\n    f.write('3\\n')\n"
        "os.remove(os.path.join(base, 'old.csv'))\n"
        "rows = 3"
    )
    ctx = ToolContext(call_id="p1", conversation_id="c", submission_id="s1", store=store)
    out = asyncio.run(execute_tool(tool, {"code": code}, ctx))
    store.append("c", "s1", [("message", message_to_dict(ToolResultMessage("p1", "python", out.content,
                                                                          details=out.details)))], now=time.time())  # fmt: skip
    effects = Effects.from_details(out.details)
    assert effects is not None
    assert {v.name for v in effects.variables} == {"base", "f", "os", "rows"}  # the namespace record is kept too
    files = {Path(f.path).name: f for f in effects.files}
    assert set(files) == {"made.txt", "data.csv", "old.csv"}, files  # flue.sqlite and its WAL left out
    assert files["made.txt"].action == "created" and files["made.txt"].before is None
    assert files["made.txt"].after == hashlib.sha256(b"made by python\n").hexdigest()
    assert files["data.csv"].action == "changed" and files["data.csv"].kept
    assert files["data.csv"].before == hashlib.sha256(b"a\n1\n2\n").hexdigest()
    assert files["data.csv"].after == hashlib.sha256(b"a\n1\n2\n3\n").hexdigest()
    assert files["old.csv"].action == "deleted" and files["old.csv"].kept and files["old.csv"].after is None
    listed = changes(store, "c", "s1")
    result = undo(store, "c", [c for c in listed if c.kind == "file"], namespace=ns)
    assert result.done and len(result.undone) == 3, result.text()
    assert not (work / "made.txt").exists()
    assert (work / "data.csv").read_text() == "a\n1\n2\n"
    assert (work / "old.csv").read_text() == "a\n1\n"
    assert ns["rows"] == 3  # only the file items were asked for


def test_an_undo_that_fails_midway_says_where_it_stopped_and_closes_its_journal(tmp_path: Path) -> None:
    from flue_nb.runtime.effects import CellEffect
    from flue_nb.runtime.messages import ToolResultMessage, message_to_dict
    from flue_nb.runtime.undo import recover, use_cells

    class Tab:
        """A live document whose tab stopped answering after the source was read."""

        def source(self, effect: CellEffect) -> str | None:
            return effect.source_after

        def apply(self, effect: CellEffect) -> None:
            raise OSError("no tab answered")

    store = SQLiteStore(str(tmp_path / "s.sqlite"))
    store.admit("c", "go", submission_id="s1", now=time.time())
    for n, cid in enumerate(("c1", "c2")):
        e = Effects(cells=(CellEffect("edited", cid, "n.ipynb", source_before="old", source_after="new"),))
        msg = ToolResultMessage(f"k{n}", "edit_cell", "Edited", details={"effects": e.to_dict()})
        store.append("c", "s1", [("message", message_to_dict(msg))], now=time.time())
    use_cells(Tab())
    try:
        result = undo(store, "c", changes(store, "c", "s1"))
    finally:
        use_cells(None)
    assert result.done and not result.undone
    assert [(c.key, why) for c, why in result.failed] == [
        ("2.1", "OSError: no tab answered"), ("1.1", "not tried: the undo stopped at the item before"),
    ]  # fmt: skip
    assert "Stopped; not undone:" in result.text()
    assert not any(c.undone for c in changes(store, "c", "s1"))  # still there to undo again
    assert recover(store, "c") is None  # the journal was closed: nothing for a recovery to redo


def test_a_recovery_leaves_a_file_changed_since_the_crash_and_says_so(tmp_path: Path) -> None:
    from flue_nb.runtime.messages import ToolResultMessage, message_to_dict
    from flue_nb.runtime.sandbox.local import LocalSandbox
    from flue_nb.runtime.tools import PathLocks
    from flue_nb.runtime.tools.write import write_tool
    from flue_nb.runtime.undo import recover

    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("old a\n")
    store = SQLiteStore(str(tmp_path / "s.sqlite"))
    store.admit("c", "go", submission_id="s1", now=time.time())
    ctx = ToolContext(call_id="w0", conversation_id="c", submission_id="s1", store=store)
    out = asyncio.run(execute_tool(write_tool(LocalSandbox(str(work)), PathLocks()), {"path": "a.txt",
                                                                                       "content": "new a\n"}, ctx))  # fmt: skip
    store.append("c", "s1", [("message", message_to_dict(ToolResultMessage("w0", "write", out.content,
                                                                          details=out.details)))], now=time.time())  # fmt: skip

    def crash(n: int) -> None:
        raise SystemExit("killed")  # as a SIGKILL would: nothing after the `begun` record runs

    with pytest.raises(SystemExit):
        rewind(store, "c", "s1", 1, crash_at=crash)
    (work / "a.txt").write_text("the user's own edit after the crash\n")
    said = recover(store, "c")
    assert said is not None and "changed since the crash: left as it is" in said and "not undone" in said
    assert (work / "a.txt").read_text() == "the user's own edit after the crash\n"
    assert not changes(store, "c", "s1")[0].undone


def test_a_value_over_the_cap_changed_in_place_is_recorded_not_kept(tmp_path: Path) -> None:
    # Issue 34.3/34.7: over the cap, the old value is not kept (no copy is made) and the change
    # in place, which neither identity nor shape shows, is still recorded, saying why it was
    # not compared; under it, the kept blob is the one the store holds under its digest.
    np = pytest.importorskip("numpy")
    from flue_nb.runtime.effects import Bounds, unframe_blob

    store = SQLiteStore(str(tmp_path / "s.sqlite"))
    store.admit("c", "go", submission_id="s1", now=time.time())
    import json

    ns: dict[str, Any] = {"big": np.zeros(10_000), "small": np.zeros(10), "json": json}
    tool = python_tool(ns, bounds=Bounds(value_bytes=20_000))
    ctx = ToolContext(call_id="p1", conversation_id="c", submission_id="s1", store=store)
    out = asyncio.run(execute_tool(tool, {"code": "import json\nbig[0] = 5\nsmall[0] = 5"}, ctx))
    effects = Effects.from_details(out.details)
    assert effects is not None
    by_name = {v.name: v for v in effects.variables}
    assert set(by_name) == {"big", "small"}  # `json` cannot be kept, but binding it again changed nothing
    assert by_name["big"].action == "changed" and by_name["big"].kept is None
    assert by_name["big"].not_kept == (
        "over the 20 KiB cap (78 KiB); recorded as changed because the code assigns into it (not compared)"
    )
    assert by_name["small"].kept is not None
    payload = unframe_blob(store.blob(by_name["small"].kept) or b"")
    assert payload is not None and by_name["small"].before is not None
    import hashlib

    assert hashlib.sha256(payload).hexdigest() == by_name["small"].before.digest


def test_the_read_ahead_reuses_a_file_only_while_its_stat_says_it_is_the_same(tmp_path: Path) -> None:
    # The scan before each `python` or `bash` call reads small files again only when their stat
    # changed, and never trusts a file written just before it was read (the same mtime tick
    # could hide a second write of the same size).
    import os

    from flue_nb.runtime.effect_capture import scan
    from flue_nb.runtime.effects import Bounds

    old, racy = tmp_path / "old.txt", tmp_path / "racy.txt"
    old.write_text("one\n")
    hour_ago = time.time_ns() - 3600 * 10**9
    os.utime(old, ns=(hour_ago, hour_ago))
    racy.write_text("aaa\n")
    first = scan(str(tmp_path), Bounds(), read=True)
    assert first.contents[str(old)] == b"one\n" and first.contents[str(racy)] == b"aaa\n"
    mtime = racy.stat().st_mtime_ns
    racy.write_text("bbb\n")  # same size, and the same mtime put back
    os.utime(racy, ns=(mtime, mtime))
    old.write_text("two\n")  # same size, a new mtime
    second = scan(str(tmp_path), Bounds(), read=True)
    assert second.contents[str(racy)] == b"bbb\n"
    assert second.contents[str(old)] == b"two\n"
