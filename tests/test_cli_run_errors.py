"""`flue-nb run` on something that is not a notebook says so in one line and exits non-zero
(issue 32.8: each printed a full traceback): a missing file, a directory, a file that is not JSON,
JSON that is not a notebook. None of them starts a kernel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def run(target: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "FLUE_MODEL")}
    return subprocess.run(
        [sys.executable, "-m", "flue_nb.cli", "run", target],
        cwd=cwd, env=env, capture_output=True, check=False, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("missing.ipynb", None, "no such file"),
        ("folder.ipynb", "DIR", "is a directory"),
        ("notes.ipynb", "hello, not JSON\n", "not JSON"),
        ("cells.ipynb", '{"cells": 5}', "not a notebook"),
        ("list.ipynb", "[1, 2]", "not a notebook"),
        ("binary.ipynb", b"\xff\xfe\x00garbage", "not JSON"),
    ],
)
def test_a_bad_notebook_is_one_line_and_a_non_zero_exit(tmp_path: Path, name: str, content, says: str) -> None:
    target = tmp_path / name
    if content == "DIR":
        target.mkdir()
    elif isinstance(content, bytes):
        target.write_bytes(content)
    elif content is not None:
        target.write_text(content)
    done = run(name, tmp_path)
    assert done.returncode != 0, done
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"flue-nb run: {name}: "), done.stderr
    assert says in lines[0], lines[0]
    assert "executed notebook written" not in done.stdout
