"""Process checks for tests: which processes are still alive (no orphan left behind)."""

from __future__ import annotations

import os
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
