"""The tests' own venvs (the browser's, the live server's, jupyter-ai's, fast-agent's, the MCP
reference servers'), each kept out of the main `.venv`'s imports.

One worker builds a venv while the others wait for it (`locks.exclusive`), and a stamp of its
package list keeps it until that list changes. Packages go in with uv when the main venv has it
(the Makefile installs it there): seconds and little CPU, where pip took minutes of a 2-core CI
machine's time; else with pip.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from locks import exclusive

STAMP = ".installed"
ROOT = Path(__file__).resolve().parents[1]
# fast-agent (tests/notebook/test_acp_fast_agent.py) needs Python >= 3.12: a venv of its own.
FAST_AGENT = "fast-agent-mcp==0.10.48"
FAST_AGENT_VENV = ROOT / ".venv-fast-agent"


class Unavailable(Exception):
    """Something a test needs from outside (a venv, a package, a program) cannot be had here."""


def venv_python(
    venv: Path, packages: Sequence[str], *, interpreter: str = sys.executable, compile: bool = True
) -> Path:
    """`venv`'s python, the venv made with `interpreter` and `packages` installed when missing
    (their bytecode compiled unless `compile` is false)."""
    with exclusive(venv):
        python = venv / "bin" / "python"
        stamp = venv / STAMP
        want = "\n".join(packages)
        if python.exists() and stamp.exists() and stamp.read_text() == want:
            return python
        if not python.exists():
            made = _run([interpreter, "-m", "venv", str(venv)], timeout=300)
            if made.returncode != 0:
                raise Unavailable(f"could not create {venv}: {made.stderr.strip()[-500:]}")
        done = install(python, packages, compile=compile)
        if done.returncode != 0:
            raise Unavailable(f"could not install {list(packages)} into {venv}: {done.stderr.strip()[-800:]}")
        stamp.write_text(want)
        return python


def install(
    python: Path, packages: Sequence[str], *, timeout: float = 1800, compile: bool = True
) -> subprocess.CompletedProcess[str]:
    """Install `packages` (pip's arguments) into the environment of `python`: uv, else (or
    when uv fails) pip. The tests' processes write no bytecode (PYTHONDONTWRITEBYTECODE), so a
    venv whose programs start many times is compiled whole; one whose program starts once or twice
    is not (`compile=False`): fast-agent's venv took 16 CPU-s to compile and its one run 2.3 CPU-s
    more without."""
    uv = Path(sys.executable).with_name("uv")
    if uv.exists():
        compiling = ["--compile-bytecode"] if compile else []
        command = [str(uv), "pip", "install", "-q", *compiling, "--python", str(python), *packages]
        done = _run(command, timeout=timeout)
        if done.returncode == 0:
            return done
    return _run([str(python), "-m", "pip", "install", "-q", *packages], timeout=timeout)


def fast_agent_acp() -> Path:
    """`.venv-fast-agent`'s `fast-agent-acp`, the venv built (and fast-agent installed) when missing."""
    python = venv_python(FAST_AGENT_VENV, [FAST_AGENT], interpreter=_python312(), compile=False)
    script = python.with_name("fast-agent-acp")
    if not script.exists():
        raise Unavailable(f"{FAST_AGENT} installed into {FAST_AGENT_VENV} has no fast-agent-acp")
    return script


def _python312() -> str:
    """The interpreter `FLUE_TEST_PYTHON312` names, else `python3.13`/`python3.12` on PATH, else pyenv's."""
    named = os.environ.get("FLUE_TEST_PYTHON312")
    candidates = [named] if named else []
    candidates += [shutil.which(n) for n in ("python3.13", "python3.12")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[23]*/bin/python3.1[23]")), reverse=True)
    for found in candidates:
        if not found:
            continue
        done = _run([found, "-c", "import sys; print(sys.version_info >= (3, 12))"], timeout=60)
        if done.stdout.strip() == "True":
            return found
    raise Unavailable("fast-agent-mcp needs Python >= 3.12 and none was found (set FLUE_TEST_PYTHON312)")


def _run(cmd: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
