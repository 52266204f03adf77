"""`bash` (contract 5): cwd, combined tail, exit code, timeout, env allow-list, cancellation."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools import bash_tool
from tests.procs import alive as pids_running


def test_bash_5_1_runs_in_the_sandbox_cwd_with_stdout_and_stderr_combined(tmp_path: Path, tools, call) -> None:
    out = call(tools["bash"], {"command": "pwd; echo to-out; echo to-err >&2"})
    assert out.content.split("\n") == [str(tmp_path), "to-out", "to-err"]


def test_bash_5_1_keeps_the_last_2000_lines(tools, call) -> None:
    out = call(tools["bash"], {"command": "seq 1 3000"})
    text, marker = out.content.split("\n\n[")
    lines = text.split("\n")
    assert len(lines) == 2000 and lines[0] == "1001" and lines[-1] == "3000"
    assert "1001-3000 of 3000" in marker


def test_bash_5_1_keeps_the_last_50kb_of_whole_lines(tools, call) -> None:
    # 1000 lines of 100 bytes: the tail holds 512 whole lines (51,199 bytes).
    out = call(tools["bash"], {"command": "for i in $(seq 1000 1999); do printf '%099d\\n' $i; done"})
    text = out.content.split("\n\n[")[0]
    lines = text.split("\n")
    assert len(text.encode()) <= 51200 and len(lines) == 512
    assert all(len(ln) == 99 for ln in lines) and lines[-1].endswith("1999")


def test_bash_5_1_huge_output_keeps_the_tail_without_holding_it_all(tools, call) -> None:
    out = call(tools["bash"], {"command": "seq 1 20000000"})  # ~170 MB
    text = out.content.split("\n\n[")[0]
    lines = text.split("\n")
    assert lines[-1] == "20000000" and len(lines) == 2000 and lines[0] == "19998001"
    assert "earlier output omitted" in out.content


def test_bash_5_1_no_output_says_so(tools, call) -> None:
    assert call(tools["bash"], {"command": "true"}).content == "(no output)"


def test_bash_5_2_non_zero_exit_appends_the_exit_code(tools, call) -> None:
    out = call(tools["bash"], {"command": "echo partial; exit 3"})
    assert out.content.startswith("partial") and out.content.rstrip().endswith("Exit code: 3]")
    assert "Exit code" not in call(tools["bash"], {"command": "echo ok"}).content


def test_bash_5_3_timeout_returns_exit_124_and_kills_the_process_group(tools, call) -> None:
    start = time.monotonic()
    out = call(tools["bash"], {"command": "sleep 31337.5 & echo started; sleep 300", "timeout": 1})
    assert time.monotonic() - start < 10
    assert not out.is_error  # recoverable: the model reads it and reacts
    assert "started" in out.content and "124" in out.content and "timed out" in out.content
    assert out.details == {"exit_code": 124, "timed_out": True}
    assert pids_running("sleep 31337.5") == []


def test_bash_5_3_a_child_ignoring_term_is_killed_after_2_seconds(tools, call) -> None:
    start = time.monotonic()
    out = call(tools["bash"], {"command": "trap '' TERM; sleep 31337.4 & sleep 300", "timeout": 0.5})
    elapsed = time.monotonic() - start
    assert "124" in out.content
    assert 2.4 <= elapsed < 8  # TERM at 0.5 s is ignored; KILL 2 s later
    assert pids_running("sleep 31337.4") == []


def test_bash_5_4_environment_is_an_allow_list(tmp_path: Path, call, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("FOO_TOKEN", "tok-should-not-leak")
    monkeypatch.setenv("MY_SECRET", "secret-should-not-leak")
    monkeypatch.setenv("LC_FLUE_TEST", "kept")
    out = call(bash_tool(LocalSandbox(tmp_path)), {"command": "env"})
    assert "should-not-leak" not in out.content
    names = {line.split("=", 1)[0] for line in out.content.splitlines() if "=" in line}
    allowed = {"PATH", "HOME", "USER", "LANG", "TERM", "TMPDIR", "SHELL", "PWD"}
    # bash itself adds SHLVL and `_`; nothing else may come from the kernel.
    assert names - allowed - {"SHLVL", "_"} == {"LC_FLUE_TEST"}


def test_bash_5_4_author_opts_variables_in(tmp_path: Path, call, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOO_TOKEN", "from-kernel")
    sandbox = LocalSandbox(tmp_path, env={"FOO_TOKEN": "opted-in", "MODE": "dev"})
    out = call(
        bash_tool(sandbox),
        {"command": 'echo "${FOO_TOKEN/opted-/OPTED-} $MODE ${ANTHROPIC_API_KEY:-none}"'},
    )
    # (Echoed verbatim, a secret-looking value is redacted from the result: see test_redact.py.)
    assert out.content == "OPTED-in dev none"


def test_bash_5_5_cancellation_kills_the_command(tools, run, acall) -> None:
    async def abort():
        task = asyncio.ensure_future(acall(tools["bash"], {"command": "sleep 31337.6 & sleep 300"}))
        for _ in range(100):  # wait until the command really runs
            await asyncio.sleep(0.05)
            if pids_running("sleep 31337.6"):
                break
        start = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - start

    assert run(abort()) < 2.5  # promptly
    # The group was signalled before the cancel returned; on a loaded machine the kernel may
    # take a moment to end it, so look for a little while rather than at one instant.
    deadline = time.monotonic() + 2.0
    while pids_running("sleep 31337.6") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_running("sleep 31337.6") == []


def test_bash_timeout_must_be_positive(tools, call) -> None:
    out = call(tools["bash"], {"command": "true", "timeout": -1})
    assert out.is_error and "timeout" in out.content
