"""`Runner`: how the notebook tools and the `python` tool run code where the user's namespace lives."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

__all__ = ["Runner"]

T = TypeVar("T")


class Runner(Protocol):
    """Runs `fn` on the thread that may touch the namespace (the kernel's main thread, in a
    kernel) and resolves to what it returned."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]:
        """Run `fn` there; what it returns (or raises) is the awaitable's."""
        ...
