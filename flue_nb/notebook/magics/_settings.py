"""Checks of `FlueMagics` settings, run when one is set (`%config FlueMagics.lease_ttl = -5`).

A bad value raises `TraitError`, which `%config` shows as one line while the old value stays;
found at the next cell instead, a negative lease would quietly break the conversation's claim.
"""

from __future__ import annotations

import math
import os
from typing import Any

from traitlets import TraitError

__all__ = ["check_setting"]


def check_setting(name: str, value: Any) -> Any:
    """`value` for setting `name`, cleaned (a model spec trimmed), or `TraitError` saying why not."""
    if name == "lease_ttl":
        ttl = float(value)
        if not (math.isfinite(ttl) and 1.0 <= ttl <= 86400.0):
            raise TraitError(
                f"FlueMagics.lease_ttl takes seconds from 1 to 86400 (a day), not {ttl!r}: how long "
                "a kernel's claim on a running conversation lasts without a heartbeat (default 30)"
            )
        return ttl
    if name == "max_cost_usd":
        usd = float(value)
        if not (math.isfinite(usd) and usd >= 0):
            raise TraitError(
                f"FlueMagics.max_cost_usd takes dollars (0 for no budget), not {usd!r}: what one message "
                "may spend at list prices before it stops with budget_exceeded"
            )
        return usd
    if name == "model":
        spec = str(value).strip()
        if any(c.isspace() for c in spec):
            raise TraitError(
                "FlueMagics.model takes one model spec with no spaces, e.g. "
                f"'anthropic/claude-sonnet-4-6' or the name of a Model in the namespace, not {spec!r}"
            )
        return spec
    if name == "db":
        db = str(value).strip()
        if db and "://" not in db and os.path.isdir(os.path.expanduser(db)):
            raise TraitError(
                f"FlueMagics.db names a store file or a postgresql:// URL; {db!r} is a directory: "
                f"name a file in it, e.g. {os.path.join(db, 'flue.sqlite')!r}"
            )
        return db
    return value
