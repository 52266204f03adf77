"""Get what the tests fetch from outside before they ask for it: `make test` runs this beside the
linters and the type checker, which leave one of a 2-core machine's cores idle for half a minute.

On a fresh machine (CI) the tests would otherwise build their venvs and install Chromium while they
run: the browser tests, started first as the longest, waited on them. Each step here is the very
function the tests call, under the same lock, so a test that comes while a step runs waits for it,
and a step that fails here is retried by its test, which reports why. Also: the tests' modules are
collected once with bytecode writing allowed, so that pytest's rewritten modules are cached and the
parallel workers load them instead of each rewriting every test's asserts (about 7 CPU-s apiece).

Run with the main venv's Python: `python tests/prepare.py`. Prints one line per step.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _folder in ("", "tests", "tests/browser", "tests/notebook", "tests/runtime"):
    sys.path.insert(0, str(ROOT / _folder))

import _lab  # noqa: E402
import real_mcp  # noqa: E402
import venvs  # noqa: E402

from tests import bwrap, pg  # noqa: E402


def _rewritten_asserts() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError((done.stdout + done.stderr).strip()[-500:])


def _debian_packages() -> None:
    # Each is tried, so one package that cannot be had does not hold back the others.
    missing = [why for why in (pg.unavailable(), bwrap.install_bwrap()) if why is not None]
    try:
        _lab.chromium()
    except venvs.Unavailable as exc:
        missing.append(str(exc))
    if missing:
        raise RuntimeError("; ".join(missing))


# First what the first tests wait for: the browser tests, started first as the longest, need
# Chromium and the browser venv. apt-get installs one package set at a time, so one step has them all.
STEPS: dict[str, Callable[[], object]] = {
    "pytest's rewritten test modules": _rewritten_asserts,
    "Chromium, PostgreSQL, bubblewrap": _debian_packages,
    ".venv-browser": lambda: _lab.browser_venv(),
    ".venv-live": lambda: _lab.browser_venv(_lab.LIVE_VENV, _lab.LIVE_PACKAGES),
    ".venv-jupyter-ai": lambda: _lab.browser_venv(_lab.JUPYTER_AI_VENV, _lab.JUPYTER_AI_PACKAGES),
    ".venv-fast-agent": venvs.fast_agent_acp,
    ".mcp-servers (npm)": real_mcp.npm_servers,
    ".mcp-servers (venv)": real_mcp.python_servers,
}


def _step(name: str, build: Callable[[], object]) -> str:
    start = time.monotonic()
    try:
        build()
    except Exception as exc:  # noqa: BLE001 - the test that needs it retries and says why
        return f"prepare: {name}: not ready ({type(exc).__name__}: {str(exc)[:300]}); its tests will try again"
    return f"prepare: {name}: ready in {time.monotonic() - start:.0f} s"


def main() -> None:
    """Run every step, three at a time (most of each is waiting on downloads and dpkg)."""
    with ThreadPoolExecutor(3) as pool:
        for line in pool.map(lambda item: _step(*item), STEPS.items()):
            print(line, flush=True)


if __name__ == "__main__":
    main()
