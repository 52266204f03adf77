"""The tests' own venvs (the browser's, the live server's, jupyter-ai's, fast-agent's, the MCP
reference servers'), each kept out of the main `.venv`'s imports.

One worker builds a venv while the others wait for it (`locks.exclusive`), and a stamp of its
package list keeps it until that list changes. Packages go in with uv when the main venv has it
(the Makefile installs it there): seconds and little CPU, where pip took minutes of a 2-core CI
machine's time; else with pip.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from locks import exclusive

STAMP = ".installed"


class Unavailable(Exception):
    """Something a test needs from outside (a venv, a package, a program) cannot be had here."""


def venv_python(venv: Path, packages: Sequence[str], *, interpreter: str = sys.executable) -> Path:
    """`venv`'s python, the venv made with `interpreter` and `packages` installed when missing."""
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
        done = install(python, packages)
        if done.returncode != 0:
            raise Unavailable(f"could not install {list(packages)} into {venv}: {done.stderr.strip()[-800:]}")
        stamp.write_text(want)
        return python


def install(python: Path, packages: Sequence[str], *, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """Install `packages` (pip's arguments) into the environment of `python`: uv, else (or
    when uv fails) pip."""
    uv = Path(sys.executable).with_name("uv")
    if uv.exists():
        command = [str(uv), "pip", "install", "-q", "--compile-bytecode", "--python", str(python), *packages]
        done = _run(command, timeout=timeout)
        if done.returncode == 0:
            return done
    return _run([str(python), "-m", "pip", "install", "-q", *packages], timeout=timeout)


def _run(cmd: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
