"""Process checks for tests: which processes are still alive (no orphan left behind)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def alive(needle: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains `needle`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if needle in cmdline and state != "Z":
            found.append(int(pid))
    return found


def gone(needle: str, within: float = 10.0) -> list[int]:
    """`alive(needle)` once it is empty, or after `within` seconds: the kernel tears a killed PID
    namespace down asynchronously, so a process can outlive its killer's return by moments."""
    deadline = time.monotonic() + within
    while (found := alive(needle)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found
