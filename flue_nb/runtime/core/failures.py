"""The one mapping from how an attempt ended to what happens to its submission (contract 11).

Pure: the conversation passes in what only it knows (whether it lost its lease, whether an abort
was asked for) and carries out the decision.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from flue_nb.runtime.errors import (
    BudgetExceededError,
    ConfigError,
    FlueError,
    InternalError,
    ModelRefusedError,
    PolicyDeniedError,
    ProviderError,
    RunError,
    SessionBusyError,
    StoreError,
    SubmissionAbortedError,
    TurnLimitExceededError,
)

__all__ = ["Decision", "decide"]

log = logging.getLogger("flue_nb")


@dataclass(frozen=True, slots=True)
class Decision:
    """What an attempt's end means for its submission."""

    kind: Literal["completed", "failed", "aborted", "retry", "lost", "timeout"]
    error: FlueError | None = None
    result: str | None = None
    record_abort: bool = False
    """The abort came from inside the run (Ctrl-C in a tool): record the intent durably too."""


def decide(exc: BaseException, *, lease_lost: bool, abort_requested: Callable[[], bool]) -> Decision | None:
    """Turn a failure of an attempt into what happens next.

    Returns None when the exception must propagate (the coordinator itself is being cancelled
    and nobody asked for this submission to stop). Any other exception settles or retries.
    """
    if isinstance(exc, asyncio.CancelledError):
        if lease_lost:
            return Decision("lost")
        if abort_requested():
            return Decision("aborted", error=SubmissionAbortedError("the submission was aborted by the user"))
        return None
    if isinstance(exc, asyncio.TimeoutError):
        return Decision("timeout")
    if isinstance(exc, SessionBusyError):
        return Decision("lost")
    if isinstance(exc, SubmissionAbortedError):
        # A tool was interrupted by the user (Ctrl-C in the kernel while it ran).
        return Decision("aborted", error=exc, record_abort=True)
    if isinstance(
        exc,
        (
            ConfigError,
            StoreError,
            TurnLimitExceededError,
            BudgetExceededError,
            ModelRefusedError,
            PolicyDeniedError,
        ),
    ):
        return Decision("failed", error=exc)
    if isinstance(exc, ProviderError):
        # Auth, bad request, an overflow that compaction could not cure: retrying won't help.
        return Decision("retry" if exc.transient else "failed", error=exc)
    if isinstance(exc, RunError):
        return Decision("retry", error=exc)
    if isinstance(exc, Exception):
        log.error("flue_nb: internal error in a run", exc_info=exc)
        return Decision("failed", error=InternalError(f"{type(exc).__name__}: {exc}"))
    # KeyboardInterrupt, SystemExit, GeneratorExit out of code run on the loop (a custom
    # tool): the code's own doing, not a request to stop the runtime (issue 12.5).
    return Decision(
        "failed",
        error=RunError(
            f"code run by the agent raised {type(exc).__name__}, which ended the run; "
            "tools should raise an Exception instead"
        ),
    )
