"""Where flue_nb keeps what it can rebuild or share between its processes."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """Where flue_nb keeps what it can rebuild: `$FLUE_CACHE_DIR`, else the user's cache dir."""
    own = os.environ.get("FLUE_CACHE_DIR")
    if own:
        return Path(own)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flue_nb"
