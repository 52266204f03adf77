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
from traitlets import Bool, Dict, Enum, Float, List, TraitError, TraitType, Unicode, Union, validate

__all__ = ["FlueSettings", "setting"]


def setting(default: str | float | bool | list[str], help: str, *, choices: Sequence[str] | None = None) -> Any:
    """A configurable trait of the kind `default` calls for (`choices`: an Enum of them)."""
    trait: TraitType[Any, Any]
    if isinstance(default, list):
        trait = List(Unicode(), default, help=help)
    elif choices is not None:
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


def _allow_hosts(value: Any) -> list[str]:
    from flue_nb.runtime.errors import ConfigError
    from flue_nb.runtime.sandbox.contain import containment

    try:
        return list(containment("auto", value).allow_hosts)
    except ConfigError as exc:
        raise TraitError(f"FlueMagics.allow_hosts: {exc.message}") from None


def _approval(value: Any) -> Any:
    from flue_nb.runtime.errors import ConfigError
    from flue_nb.runtime.tools.rules import ApprovalRules

    try:
        ApprovalRules.of(value)
    except ConfigError as exc:
        raise TraitError(f"FlueMagics.approval: {exc.message}") from None
    return value


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "approval": _approval,
    "allow_hosts": _allow_hosts,
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
    approval: Any = Union(
        [Unicode(), Dict()],
        default_value="allow",
        help="Approval for the assistant's tools that change something (python, bash, write, "
        "edit, the notebook tools, MCP tools): `allow`, `ask` or `deny`; or rules "
        '{"default": MODE, TOOL: MODE | [[PATTERN, MODE], ...]}; or a .json/.yaml file of rules. '
        "Read-only tools always run; writes to places that run code later are always asked about.",
    ).tag(config=True)
    sandbox: str = setting(
        "auto",
        "Where the assistant's shell commands run: `auto` or `bwrap` under bubblewrap (the "
        "working directory writable, the rest read-only, ~/.ssh, ~/.aws and other secrets hidden, "
        "no network but allow_hosts; refused where bubblewrap is missing), or `none`: as you, "
        "with your files and network. The `python` tool runs in the kernel either way.",
        choices=("auto", "bwrap", "none"),
    )
    allow_hosts: list[str] = setting(
        [],
        "Hosts sandboxed commands may reach, through a filtering proxy: 'pypi.org', "
        "'*.pythonhosted.org', 'api.example.com:443'. Empty: no network.",
    )
    hide_paths: list[str] = setting(
        [],
        "Places hidden from sandboxed commands besides ~/.ssh, ~/.aws, ~/.config/gcloud, ~/.netrc, "
        ".env files outside the working directory and the other standard ones.",
    )
    python_tool: str = setting(
        "hidden",
        "What the assistant's `python` calls leave in the notebook: `hidden` (nothing: `%flue verify` "
        "finds what they changed, `%flue materialize` writes them in on request) or `cells` (each call "
        "that changes a name is also written as a provenance-marked cell as it runs, where the "
        "notebook can be edited live).",
        choices=("hidden", "cells"),
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
