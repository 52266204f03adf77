"""`flue-nb history --db` on something that is not a readable store says so in one paragraph
(issue 20.7): a file that is not SQLite, a directory, a read-only mount ("read-only")."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import flue_nb as flue
from flue_nb.models import ScriptedModel


def cli(*args: str, cwd: Path, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "FLUE_MODEL")}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "flue_nb.cli", "history", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )


def one_paragraph(run: subprocess.CompletedProcess[str], *says: str) -> None:
    assert run.returncode == 1, run
    assert "Traceback" not in run.stderr, run.stderr
    text = run.stderr.strip()
    assert text.startswith("flue-nb history: ") and "\n\n" not in text, text
    for words in says:
        assert words in text, text


@pytest.mark.parametrize("conversation", [(), ("talk",)])
def test_a_file_that_is_not_sqlite(tmp_path: Path, conversation: tuple[str, ...]) -> None:
    (tmp_path / "notes.txt").write_text("hello, not a database\n" * 100)
    one_paragraph(cli("--db", "notes.txt", *conversation, cwd=tmp_path), "notes.txt", "not a flue_nb store")


@pytest.mark.parametrize("conversation", [(), ("talk",)])
def test_a_directory(tmp_path: Path, conversation: tuple[str, ...]) -> None:
    (tmp_path / "stores").mkdir()
    one_paragraph(cli("--db", "stores", *conversation, cwd=tmp_path), "is a directory", "stores/flue.sqlite")


def _store(folder: Path) -> Path:
    model = ScriptedModel(["hi"])

    @flue.agent
    def helper() -> str:
        flue.use_model(model)
        return "Help."

    db = folder / "s.sqlite"
    session = flue.init(helper, conversation="talk", db=str(db), cwd=str(folder))
    session.prompt("hello")
    return db


@pytest.mark.parametrize("conversation", [(), ("talk",)])
def test_a_store_on_a_read_only_mount_says_read_only(tmp_path: Path, conversation: tuple[str, ...]) -> None:
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare, "-m", "true"], capture_output=True, check=False) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("making a read-only mount needs a mount namespace (`unshare -m`), not available here")
    live, src, mnt = tmp_path / "live", tmp_path / "src", tmp_path / "ro"
    for d in (live, src, mnt):
        d.mkdir()
    # A store whose writer is gone (no -wal/-shm beside it), as one left on a share or an image.
    with sqlite3.connect(_store(live)) as source, sqlite3.connect(src / "s.sqlite") as copy:
        source.backup(copy)
    mount = f'mount --bind {src} {mnt} && mount -o remount,bind,ro {mnt} && exec "$@"'
    run = cli(
        "--db", str(mnt / "s.sqlite"), *conversation, cwd=tmp_path, prefix=(unshare, "-m", "sh", "-c", mount, "sh")
    )
    one_paragraph(run, "read-only", "copy")


def _pages(db: Path) -> tuple[bytes, int]:
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = con.execute("PRAGMA page_size").fetchone()[0]
    return db.read_bytes(), page


def test_a_store_with_a_damaged_page_is_one_line_whichever_page(tmp_path: Path, capsys) -> None:
    # Issue 32.8: garbage on the page of a table's rows printed a StoreError traceback.
    from flue_nb.cli import main

    db = _store(tmp_path)
    data, page = _pages(db)
    failed = 0
    for n in range(1, len(data) // page):
        damaged = tmp_path / f"damaged-{n}.sqlite"
        damaged.write_bytes(data[: n * page] + b"\xa5" * page + data[(n + 1) * page :])
        for conversation in ((), ("talk",)):
            code = main(["history", "--db", str(damaged), *conversation])
            out, err = capsys.readouterr()
            if code == 0:
                assert not err and out.strip(), (n, conversation)
                continue
            failed += 1
            assert code == 1 and err.startswith("flue-nb history: ") and err.count("\n") == 1, (n, err)
            assert "damaged" in err or "not a flue_nb store" in err or "no conversation" in err, (n, err)
    assert failed  # some page holds what history reads


def test_a_conversation_id_that_is_not_utf8_says_so_in_one_line(tmp_path: Path) -> None:
    # Issue 32.8: `flue-nb history $'\xff'` ended in a UnicodeEncodeError traceback.
    db = _store(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "FLUE_MODEL")}
    run = subprocess.run(
        [os.fsencode(sys.executable), b"-m", b"flue_nb.cli", b"history", b"--db", os.fsencode(db), b"ta\xfflk"],
        cwd=tmp_path, env=env, capture_output=True, check=False, timeout=120,
    )  # fmt: skip
    text = run.stderr.decode("utf-8", "replace")
    assert run.returncode == 1 and "Traceback" not in text, text
    assert text.strip().startswith("flue-nb history: ") and text.strip().count("\n") == 0, text
    assert "UTF-8" in text
