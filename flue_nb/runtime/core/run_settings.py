"""The seams and knobs a run and its subagents share (clock, sleep, randomness, model resolution)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from flue_nb.runtime.providers.model import Model

__all__ = ["RunSettings"]


@dataclass(slots=True)
class RunSettings:
    """Seams and knobs shared by a run and its subagents."""

    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    clock: Callable[[], float] = time.time
    rng: random.Random = field(default_factory=random.Random)
    resolve_model: Callable[[Any], Model] | None = None
    model_call_timeout: float = 600.0
    """Seconds one model call may take in all, its retries and their backoff included (a hung
    provider costs ~120 s a try); past it the submission fails instead of trying again."""
    settle_grace: float = 5.0
    """Seconds a submission past its `timeout` gives its attempt to stop once cancelled (a tool
    that ignores cancellation is left behind), so it settles within `timeout` plus this."""
    call_deadlines: dict[tuple[str, int, str], tuple[float, int]] = field(default_factory=dict)
    """(submission, turn, purpose) → (monotonic deadline, tries so far) of a model call that an
    attempt left unfinished: the next attempt's call gets what is left of it, not a fresh bound."""
    counter: Any = None
    """A `TokenCounter` shared by the conversation's runs (made on first use)."""

    def tokens(self) -> Any:
        """The shared token counter."""
        if self.counter is None:
            from flue_nb.runtime.core.tokens import TokenCounter

            self.counter = TokenCounter()
        return self.counter
