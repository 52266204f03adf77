"""`glob` (contract 7): `find -name` semantics, regular files only, 1000 paths at most."""

from __future__ import annotations

import os
from pathlib import Path


def make(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")


def test_glob_7_1_pattern_matches_names_at_any_depth(tmp_path: Path, tools, call) -> None:
    make(tmp_path, "top.py", "src/a.py", "src/deep/er/b.py", "src/c.txt", ".hidden/d.py")
    out = call(tools["glob"], {"pattern": "*.py"})
    assert not out.is_error
    assert out.content.split("\n") == [".hidden/d.py", "src/a.py", "src/deep/er/b.py", "top.py"]


def test_glob_7_1_a_pattern_with_a_directory_matches_nothing(tmp_path: Path, tools, call) -> None:
    make(tmp_path, "src/a.py")
    out = call(tools["glob"], {"pattern": "src/*.py"})
    assert not out.is_error and out.content.lower().startswith("no files found")
    assert "src/a.py" not in out.content.split("\n")


def test_glob_7_1_path_narrows_the_search(tmp_path: Path, tools, call) -> None:
    make(tmp_path, "src/a.py", "tests/t.py")
    assert call(tools["glob"], {"pattern": "*.py", "path": "src"}).content == "src/a.py"
    assert call(tools["glob"], {"pattern": "*.py", "path": str(tmp_path / "src")}).content == str(tmp_path / "src/a.py")


def test_glob_7_1_regular_files_only(tmp_path: Path, tools, call) -> None:
    make(tmp_path, "real.py")
    (tmp_path / "dir.py").mkdir()
    os.symlink(tmp_path / "real.py", tmp_path / "link.py")
    os.mkfifo(tmp_path / "fifo.py")
    assert call(tools["glob"], {"pattern": "*.py"}).content == "real.py"


def test_glob_7_1_find_name_wildcards(tmp_path: Path, tools, call) -> None:
    make(tmp_path, "test_a.py", "test_b.py", "a_test.py", "x1.txt", "x22.txt")
    assert call(tools["glob"], {"pattern": "test_?.py"}).content == "test_a.py\ntest_b.py"
    assert call(tools["glob"], {"pattern": "x[0-9].txt"}).content == "x1.txt"


def test_glob_7_2_at_most_1000_paths(tmp_path: Path, tools, call) -> None:
    d = tmp_path / "many"
    d.mkdir()
    for i in range(1200):
        (d / f"f{i:04d}.log").write_text("")
    out = call(tools["glob"], {"pattern": "*.log"})
    body, note = out.content.split("\n\n")
    assert len(body.split("\n")) == 1000 and "1000" in note and "narrow" in note.lower()


def test_glob_7_2_exactly_1000_is_not_capped(tmp_path: Path, tools, call) -> None:
    for i in range(1000):
        (tmp_path / f"f{i:04d}.log").write_text("")
    out = call(tools["glob"], {"pattern": "*.log"})
    assert len(out.content.split("\n")) == 1000 and "narrow" not in out.content.lower()


def test_glob_7_2_nothing_found_is_a_plain_result(tmp_path: Path, tools, call) -> None:
    make(tmp_path, "a.txt")
    out = call(tools["glob"], {"pattern": "*.rs"})
    assert not out.is_error and out.content == "No files found."


def test_glob_pattern_and_path_are_never_shell_code(tmp_path: Path, tools, call) -> None:
    make(tmp_path, "a.txt")
    call(tools["glob"], {"pattern": "$(touch pwned)"})
    call(tools["glob"], {"pattern": "*'; touch pwned2; '"})
    make(tmp_path, "-odd/x.txt")
    assert call(tools["glob"], {"pattern": "*.txt", "path": "-odd"}).content == "./-odd/x.txt"
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_glob_missing_path_is_an_error_result(tools, call) -> None:
    out = call(tools["glob"], {"pattern": "*", "path": "nowhere"})
    assert out.is_error and "nowhere" in out.content
