"""Bubblewrap for the containment tests: skip with the reason where it is missing, fail under CI.

Debian's `bubblewrap` is installed when missing (as root, `locks.apt_install`), so under CI=true
a missing or broken bwrap is a failure, not a silent skip.
"""

from __future__ import annotations

import os
import shutil

import pytest

from flue_nb.runtime.sandbox.contain import Containment
from tests.locks import apt_install

__all__ = ["install_bwrap", "require_bwrap"]


def require_bwrap() -> None:
    """Skip the test (fail it under CI=true) unless bubblewrap can make a sandbox here."""
    why = install_bwrap() or Containment("bwrap").refusal()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the sandbox tests must run under CI: {why}")
    pytest.skip(why)


def install_bwrap() -> str | None:
    """Install Debian's `bubblewrap` when `bwrap` is missing; why it could not be, or None."""
    return apt_install(["bubblewrap"], present=lambda: shutil.which("bwrap") is not None)
