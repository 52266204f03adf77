"""Which notebook this kernel runs, as the id of its conversation (for `%flue` and `flue_nb.chat()`)."""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

__all__ = ["default_conversation_id"]


def default_conversation_id(environ: Any = os.environ) -> str:
    """The notebook's conversation: stable across kernel restarts of the same notebook."""
    path = environ.get("JPY_SESSION_NAME") or ""
    if not path:
        return "notebook"
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", os.path.basename(path)).removesuffix(".ipynb") or "notebook"
    return f"{stem}-{hashlib.sha1(path.encode()).hexdigest()[:8]}"
