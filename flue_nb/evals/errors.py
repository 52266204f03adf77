"""The eval's own failure: a dataset, check or option it cannot use, said in one line."""

from __future__ import annotations

__all__ = ["EvalError"]


class EvalError(Exception):
    """A dataset, check or option an eval cannot use (the CLI prints it as one line)."""
