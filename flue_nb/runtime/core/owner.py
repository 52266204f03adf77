"""Who owns a conversation: lease owner strings `host:pid:nonce`, and proving one is dead.

A lease lasts its TTL (30 s) so that a stalled owner on another machine is not robbed while it
may still write. On the same host the operating system can say for sure that the owner's process
is gone (the kernel was killed or restarted), and the next owner need not wait (issue 12.8).
"""

from __future__ import annotations

import os
import socket
import uuid

__all__ = ["new_owner", "provably_dead"]


def new_owner() -> str:
    """A lease owner string for this process: `host:pid:nonce`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def provably_dead(owner: str) -> bool:
    """True only when `owner` ran on this host and its process no longer exists (or is a zombie).

    Anything else (another host, a string not in our format, this process, a live or unknowable
    process) is False: the lease is then left to expire.
    """
    parts = owner.rsplit(":", 2)
    if len(parts) != 3:
        return False
    host, pid_text, _nonce = parts
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False  # this process (or, in another PID namespace, one we cannot see)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False  # it exists (another user's), or we cannot tell
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    """A killed process its parent has not reaped yet still answers `kill(pid, 0)`."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # The state follows the parenthesised command name, which may itself contain ") ".
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] in (b"Z", b"X")
