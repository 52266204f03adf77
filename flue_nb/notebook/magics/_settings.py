"""The `c.FlueMagics.*` settings: each declared once (default, help, choices, check), checked when set.

A bad value raises `TraitError`, which `%config` shows as one line while the old value stays;
found at the next cell instead, a negative lease would quietly break the conversation's claim.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from IPython.core.magic import Magics
from traitlets import Bool, Enum, Float, TraitError, TraitType, Unicode, validate

__all__ = ["FlueSettings", "setting"]


def setting(default: str | float | bool, help: str, *, choices: Sequence[str] | None = None) -> Any:
    """A configurable trait of the kind `default` calls for (`choices`: an Enum of them)."""
    trait: TraitType[Any, Any]
    if choices is not None:
        trait = Enum(list(choices), default, help=help)
    elif isinstance(default, bool):
        trait = Bool(default, help=help)
    elif isinstance(default, float):
        trait = Float(default, help=help)
    else:
        trait = Unicode(default, help=help)
    return trait.tag(config=True)


def _lease_ttl(value: Any) -> float:
    ttl = float(value)
    if not (math.isfinite(ttl) and 1.0 <= ttl <= 86400.0):
        raise TraitError(
            f"FlueMagics.lease_ttl takes seconds from 1 to 86400 (a day), not {ttl!r}: how long "
            "a kernel's claim on a running conversation lasts without a heartbeat (default 30)"
        )
    return ttl


def _max_cost_usd(value: Any) -> float:
    usd = float(value)
    if not (math.isfinite(usd) and usd >= 0):
        raise TraitError(
            f"FlueMagics.max_cost_usd takes dollars (0 for no budget), not {usd!r}: what one message "
            "may spend at list prices before it stops with budget_exceeded"
        )
    return usd


def _model(value: Any) -> str:
    spec = str(value).strip()
    if any(c.isspace() for c in spec):
        raise TraitError(
            "FlueMagics.model takes one model spec with no spaces, e.g. "
            f"'anthropic/claude-sonnet-4-6' or the name of a Model in the namespace, not {spec!r}"
        )
    return spec


def _db(value: Any) -> str:
    db = str(value).strip()
    if db and "://" not in db and os.path.isdir(os.path.expanduser(db)):
        raise TraitError(
            f"FlueMagics.db names a store file or a postgresql:// URL; {db!r} is a directory: "
            f"name a file in it, e.g. {os.path.join(db, 'flue.sqlite')!r}"
        )
    return db


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "lease_ttl": _lease_ttl,
    "model": _model,
    "db": _db,
    "max_cost_usd": _max_cost_usd,
}
"""Setting -> its check: the value cleaned (a model spec trimmed), or `TraitError` saying why not."""

_AUTO = ("auto", "always", "never")


class FlueSettings(Magics):
    """The settings `FlueMagics` reads (`%config FlueMagics` lists them with their help)."""

    model: str = setting(
        "",
        "Model for the default assistant: 'anthropic/<id>', 'openai/<model>', "
        "'azure/<deployment>', 'bedrock/<id>', 'vertex/<id>', or the name of a Model object "
        "in the namespace. Empty: $FLUE_MODEL, else the default Claude model if "
        "ANTHROPIC_API_KEY is set.",
    )
    db: str = setting(
        "",
        "SQLite store path (or ':memory:'), or a postgresql:// URL for a team store; "
        "empty: $FLUE_DB, else .flue/flue.sqlite in the working dir.",
    )
    approval: str = setting(
        "allow", "Approval policy for the assistant's `python` and `bash`.", choices=("allow", "ask", "deny")
    )
    approval_timeout: float = setting(
        0.0,
        "Seconds an `ask` approval waits for an answer in a chat before the fallback policy "
        "(deny) applies, as in a headless run; 0: wait until answered.",
    )
    max_cost_usd: float = setting(
        0.0,
        "Dollars (list prices) one message may spend, its subagents included, before it fails "
        "with budget_exceeded; 0: no budget. `%%flue --max-cost USD` sets one cell's.",
    )
    otel: bool = setting(
        False,
        "Trace every run with OpenTelemetry (as flue.instrument() does; needs flue_nb[otel] and "
        "an SDK with an exporter); FLUE_OTEL=1 does the same.",
    )
    lease_ttl: float = setting(30.0, "Seconds a kernel's claim on a running conversation lasts without a heartbeat.")
    widget: str = setting(
        "auto",
        "Draw a `%%flue` cell's run as the chat widget: `auto` when the frontend draws "
        "widgets (JupyterLab, Notebook 7), `always`, or `never` (the text transcript only).",
        choices=_AUTO,
    )
    live: str = setting(
        "auto",
        "Stream a blocking cell's transcript into its output while it runs: `auto` when a "
        "person's frontend is connected (one with a widget manager: JupyterLab, Notebook 7), "
        "`always`, or `never` (only the final transcript, as in headless runs).",
        choices=_AUTO,
    )

    @validate(*_CHECKS)
    def _check_setting(self, proposal: dict[str, Any]) -> Any:
        """Refuse a bad value when it is set (`%config` shows why in one line, keeps the old)."""
        return _CHECKS[proposal["trait"].name](proposal["value"])
