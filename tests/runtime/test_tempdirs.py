"""A private temp dir outlives no process: the next one made removes those of killed processes
(a SIGKILLed kernel left its sockets dir, and the sandbox proxy its socket dir, for good)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from flue_nb.runtime.tempdirs import private_dir, remove

PREFIX = "flue-test-sweep-"
_HOLDER = """
import sys, time
from flue_nb.runtime.tempdirs import private_dir
print(private_dir(sys.argv[1]), flush=True)
time.sleep(120)
"""


def _holder(tmp: Path) -> tuple[subprocess.Popen[str], Path]:
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, PREFIX], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_the_next_dir_removes_those_of_killed_processes_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    killed, killed_dir = _holder(tmp_path)
    alive, alive_dir = _holder(tmp_path)
    try:
        os.kill(killed.pid, signal.SIGKILL)  # no exit handler runs
        killed.communicate(timeout=10)
        unmarked = tmp_path / f"{PREFIX}older"  # made by an older version: not ours to judge
        unmarked.mkdir()
        other = tmp_path / "flue-other-prefix"
        other.mkdir()
        assert killed_dir.parent == tmp_path and killed_dir.is_dir() and alive_dir.is_dir()

        mine = Path(private_dir(PREFIX))

        assert not killed_dir.exists()
        assert alive_dir.is_dir() and unmarked.is_dir() and other.is_dir()
        assert mine.is_dir() and oct(mine.stat().st_mode & 0o777) == "0o700"
        # A second one in this process does not take the first for a dead process's.
        second = Path(private_dir(PREFIX))
        assert mine.is_dir() and second.is_dir()
        remove(str(mine))
        remove(str(second))
        assert not mine.exists() and not second.exists()
    finally:
        for proc in (killed, alive):
            proc.kill()
            proc.communicate(timeout=10)
    # Once the holder is gone too, its dir goes at the next one made.
    remove(private_dir(PREFIX))
    assert not alive_dir.exists() and unmarked.is_dir()
