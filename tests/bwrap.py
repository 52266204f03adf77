"""Bubblewrap for the containment tests: skip with the reason where it is missing, fail under CI.

`.ci/run` installs Debian's `bubblewrap` (as root, when missing), so under CI=true a missing or
broken bwrap is a failure, not a silent skip.
"""

from __future__ import annotations

import os

import pytest

from flue_nb.runtime.sandbox.contain import Containment

__all__ = ["require_bwrap"]


def require_bwrap() -> None:
    """Skip the test (fail it under CI=true) unless bubblewrap can make a sandbox here."""
    why = Containment("bwrap").refusal()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the sandbox tests must run under CI: {why}")
    pytest.skip(why)
