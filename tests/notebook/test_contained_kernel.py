"""The sandboxed kernel (`flue-nb kernel install --sandboxed`), started by jupyter_client from the
kernelspec the command installs: a `%%flue` cell completes against a loopback model server, while
the kernel's own code (and the agent's `python`) cannot read `~/.aws`, another process's environ,
write outside the workspace or reach a host that is not the model's; where bubblewrap is missing
the install and the kernel's start refuse."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_helpers import Kernel, jupyter_env

from flue_nb.notebook.kernel.contained import model_hosts
from tests.anthropic_server import AnthropicServer, stream, text, tool_use
from tests.bwrap import require_bwrap
from tests.procs import alive
from tests.runtime.test_contain import _Server

pytestmark = pytest.mark.kernel

NAME = "flue-box"


class Env:
    """The installed kernelspec, a kernel of it, and what the tests look at around it."""

    def __init__(
        self, kernel: Kernel, home: Path, work: Path, outside: Path, model: AnthropicServer, attacker: _Server
    ):
        self.kernel, self.home, self.work, self.outside = kernel, home, work, outside
        self.model, self.attacker = model, attacker


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flue_nb.cli", "kernel", "install", *args],
        env=jupyter_env(root),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    require_bwrap()
    root = tmp_path_factory.mktemp("jupyter")
    # $HOME outside /tmp: under /tmp the sandbox's private tmpfs would hide it whole, masks or not.
    home = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="flue-home-"))
    outside = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="flue-outside-"))
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("aws_secret_access_key = AKIA-BOXED-SECRET\n")
    work = home / "work"
    work.mkdir()
    model, attacker = AnthropicServer().start(), _Server()
    kernel = None
    try:
        done = _cli(root, "--sandboxed", "--name", NAME, "--display-name", "Boxed")
        assert done.returncode == 0, done.stderr
        assert f"Installed kernelspec {NAME} in {root / 'data' / 'kernels' / NAME}" in done.stdout
        kernel = Kernel(
            root,
            work,
            kernel_name=NAME,
            HOME=str(home),
            ANTHROPIC_API_KEY="sk-test-boxed-0123456789",
            ANTHROPIC_BASE_URL=model.url,
            GITHUB_TOKEN="ghp-BOXED-ENVIRON-SECRET",
        )
        yield Env(kernel, home, work, outside, model, attacker)
    finally:
        if kernel is not None:
            kernel.shutdown()
        model.stop()
        attacker.close()
        shutil.rmtree(home)
        shutil.rmtree(outside)


def _probe_code(env: Env) -> str:
    """Python that tries each escape and prints one line per try: `what: OK ...` or the error."""
    return (
        "import os, urllib.request\n"
        "def attempt(what, f):\n"
        "    try:\n"
        "        print(what + ': OK ' + repr(f()))\n"
        "    except Exception as e:\n"
        "        print(what + ': ' + type(e).__name__ + ' ' + str(e))\n"
        "attempt('aws', lambda: open(os.path.expanduser('~/.aws/credentials')).read())\n"
        f"attempt('write', lambda: open('{env.outside}/pwned', 'w').write('x'))\n"
        f"attempt('attacker', lambda: urllib.request.urlopen('http://127.0.0.1:{env.attacker.port}/leak', timeout=10).read())\n"
        f"attempt('direct', lambda: urllib.request.build_opener(urllib.request.ProxyHandler({{}}))"
        f".open('http://127.0.0.1:{env.attacker.port}/direct', timeout=10).read())\n"
        "attempt('workspace', lambda: open('made.txt', 'w').write('ok'))\n"
    )


def test_a_flue_cell_completes_and_the_agents_python_is_contained(env: Env) -> None:
    env.model.enqueue(
        stream(text("Looking."), tool_use("call-1", "python", {"code": _probe_code(env)}), stop_reason="tool_use"),
        stream(text("All done here.")),
    )
    run = env.kernel.ok("%%flue -c boxed -m anthropic/claude-sonnet-4-6\nlook around", timeout=120)
    assert "All done here." in run.text() and "[✓ completed]" in run.text(), run.all_text()
    # The tool result the model was sent back: every escape failed, the workspace took the write.
    sent = json.dumps(env.model.requests[1].body["messages"][-1])
    assert "aws: FileNotFoundError" in sent and "AKIA-BOXED-SECRET" not in sent
    assert "write: OSError [Errno 30] Read-only file system" in sent
    assert "attacker: HTTPError HTTP Error 403" in sent and "direct: URLError" in sent
    assert "workspace: OK 2" in sent
    assert env.attacker.paths == [] and not (env.outside / "pwned").exists()
    assert (env.work / "made.txt").read_text() == "ok"


def test_the_kernels_own_code_sees_no_secret_and_no_process_outside(env: Env) -> None:
    launcher = env.kernel.km.provisioner.pid  # type: ignore[union-attr]
    run = env.kernel.ok(
        _probe_code(env) + f"attempt('environ', lambda: open('/proc/{launcher}/environ').read())\n"
        "print('pids', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        "print('GITHUB_TOKEN' in os.environ, os.environ.get('ANTHROPIC_API_KEY'))\n"
    )
    out = run.stdout
    assert "aws: FileNotFoundError" in out and "AKIA-BOXED-SECRET" not in out
    assert "write: OSError" in out and "attacker: HTTPError" in out and "direct: URLError" in out
    assert "environ: FileNotFoundError" in out and "ghp-BOXED" not in out
    # Its own /proc: a handful of processes (bwrap's init, the proxy relay, the kernel), none of ours.
    pids = [int(p) for p in out.split("pids [", 1)[1].split("]", 1)[0].split(",")]
    assert launcher not in pids and os.getpid() not in pids and max(pids) < 100
    # A secret-looking variable is dropped; the model's key is what the kernel needs.
    assert "False sk-test-boxed-0123456789" in out
    assert env.attacker.paths == [] and not (env.outside / "pwned").exists()


def test_bash_runs_inside_the_kernels_sandbox_and_status_says_so(env: Env) -> None:
    # Nested bubblewrap cannot mount a /proc in here: `bash` runs under the kernel's sandbox.
    env.kernel.ok(
        "from flue_nb.models import ScriptedModel, reply, tool_call\n"
        "tm = ScriptedModel([reply('Go.', tool_call('bash', command="
        f"'cat ~/.aws/credentials; echo x > {env.outside}/pwned; echo hi > from-bash.txt; echo END')), reply('ok')])"
    )
    run = env.kernel.ok("%flue -c shell -m tm go")
    assert "[✓ completed]" in run.text(), run.all_text()
    result = env.kernel.ok("print([m for m in tm.requests[-1].messages if m.kind == 'tool_result'][-1].content)").stdout
    assert "END" in result and "AKIA-BOXED-SECRET" not in result and "Read-only file system" in result
    assert (env.work / "from-bash.txt").read_text() == "hi\n" and not (env.outside / "pwned").exists()
    status = env.kernel.ok("%flue -c shell status").text()
    assert "inside the sandboxed kernel" in status and f"writes only in {env.work}" in status


def _sockets(kernel: Kernel) -> str:
    """The private directory of the kernel's Unix sockets (named in bwrap's command line)."""
    inner = kernel.ok("from ipykernel.kernelapp import IPKernelApp\nprint(IPKernelApp.instance().connection_file)")
    return os.path.dirname(inner.stdout.strip())


def _gone(needle: str) -> bool:
    deadline = time.monotonic() + 30
    while alive(needle) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(needle) == []


def test_the_sandbox_ends_with_the_kernel(tmp_path: Path) -> None:
    require_bwrap()
    root = tmp_path / "jupyter"
    work = tmp_path / "work"
    work.mkdir()
    assert _cli(root, "--sandboxed", "--name", NAME).returncode == 0
    # Shut down as JupyterLab does (a shutdown request): the kernel, bwrap and the relay end.
    kernel = Kernel(root, work, kernel_name=NAME)
    sockets = _sockets(kernel)
    assert sockets.startswith(tempfile.gettempdir()) and alive(sockets)
    kernel.kc.stop_channels()
    kernel.km.shutdown_kernel(now=False)
    assert _gone(sockets) and not os.path.exists(sockets)
    # Killed (SIGKILL to the launcher's process group): bwrap's --die-with-parent ends the sandbox.
    kernel = Kernel(root, work, kernel_name=NAME)
    sockets = _sockets(kernel)
    kernel.shutdown()
    assert _gone(sockets)


def test_a_kernel_whose_workspace_is_home_cannot_write_ipythons_startup_dir(tmp_path: Path) -> None:
    # Jupyter started in ~ makes ~ the workspace, and ~/.ipython with it: a startup file written
    # from inside would run in the next kernel, which need not be a sandboxed one.
    require_bwrap()
    root = tmp_path / "jupyter"
    assert _cli(root, "--sandboxed", "--name", NAME).returncode == 0
    home = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="flue-home-"))
    startup = home / ".ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-mine.py").write_text("MINE = 'the user startup file ran'\n")
    kernel = Kernel(root, home, kernel_name=NAME, HOME=str(home), IPYTHONDIR=str(home / ".ipython"))
    try:
        out = kernel.ok(
            "def attempt(what, f):\n"
            "    try:\n"
            "        print(what + ': OK ' + repr(f()))\n"
            "    except Exception as e:\n"
            "        print(what + ': ' + type(e).__name__ + ' ' + str(e))\n"
            f"attempt('startup', lambda: open('{startup}/01-evil.py', 'w').write('x'))\n"
            "attempt('home', lambda: open('made.txt', 'w').write('ok'))\n"
            "print(MINE)\n"
        ).stdout
    finally:
        kernel.shutdown()
        shutil.rmtree(home, ignore_errors=True)
    assert "startup: OSError" in out and "Read-only file system" in out and not (startup / "01-evil.py").exists()
    assert "home: OK 2" in out
    # The user's startup file still runs: the kernel reads a copy of ~/.ipython it may write.
    assert "the user startup file ran" in out


def test_without_bwrap_the_install_and_the_start_refuse(tmp_path: Path) -> None:
    no_bwrap = tmp_path / "bin"
    no_bwrap.mkdir()
    root = tmp_path / "jupyter"
    env = {**jupyter_env(root), "PATH": str(no_bwrap)}
    done = subprocess.run(
        [sys.executable, "-m", "flue_nb.cli", "kernel", "install", "--sandboxed"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "the sandboxed kernel was not installed, because bubblewrap (`bwrap`) is not installed" in done.stderr
    assert "apt-get install bubblewrap" in done.stderr and not (root / "data" / "kernels").exists()
    # A kernelspec installed where bwrap was, started where it is not: refused, not run uncontained.
    (tmp_path / "conn.json").write_text("{}")
    started = subprocess.run(
        [sys.executable, "-m", "flue_nb.notebook.kernel.contained", "-f", str(tmp_path / "conn.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode == 1 and "not started, because bubblewrap (`bwrap`) is not installed" in started.stderr
    without = subprocess.run(
        [sys.executable, "-m", "flue_nb.cli", "kernel", "install"], env=env, capture_output=True, text=True, check=False
    )
    assert without.returncode == 1 and "add --sandboxed" in without.stderr


def test_the_model_providers_hosts_are_the_ones_allowed() -> None:
    from urllib.parse import urlsplit

    from flue_nb.notebook.kernel.contained import ANTHROPIC_DEFAULT_URL, OPENAI_DEFAULT_URL
    from flue_nb.runtime.providers.openai import OPENAI_BASE_URL

    assert OPENAI_DEFAULT_URL == OPENAI_BASE_URL  # the launcher's copy of the provider's default
    anthropic, openai = (f"{urlsplit(u).hostname}:443" for u in (ANTHROPIC_DEFAULT_URL, OPENAI_DEFAULT_URL))
    assert model_hosts({}) == [anthropic]
    assert model_hosts({"ANTHROPIC_BASE_URL": "http://127.0.0.1:8123/"}) == ["127.0.0.1:8123"]
    both = model_hosts({"OPENAI_API_KEY": "k", "AZURE_OPENAI_ENDPOINT": "https://azure.example.test"})
    assert both == [anthropic, openai, "azure.example.test:443"]
    assert model_hosts({"OPENAI_BASE_URL": "http://[::1]:11434/v1"})[1] == "[::1]:11434"
