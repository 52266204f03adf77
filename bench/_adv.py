"""What the groups of `bench/adversarial.py` share: the categories, a group's counts, a bounded
run, the made-up secret and small session helpers."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
for _path in (str(ROOT), str(ROOT / "tests" / "runtime"), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

CATEGORIES = (
    "lost",
    "duplicated",
    "hangs",
    "tracebacks",
    "leaks",
    "unfenced",
    "overspent",
    "late",
    "untrue",
    "ran on",
    "retried",
)
"""Every kind of failure counted (the module docstring of `adversarial.py` says what each is)."""
FIRST_ROUND = CATEGORIES[:6]
"""What the groups of issue 20 check (the new ones of issue 32 name theirs)."""
RAW = [sys.executable, str(BENCH / "_mcp_raw_server.py")]
SECRET = "sk-adv-" + 'q7Zr9"XkLm2\\Vb8Nc4Pw6Ty1Ud3Hs5Jg0F'
"""Made up; a quote and a backslash in it so its repr- and JSON-escaped copies differ."""


class Counts:
    """The counts of one group of scenarios, and what each finding was."""

    def __init__(self, name: str, checks: Sequence[str] = FIRST_ROUND) -> None:
        self.name = name
        self.checks = tuple(checks)
        """The categories this group can find (its row shows these, and any other it found)."""
        self.scenarios = 0
        self.submissions = 0
        """Submissions checked (kill storms)."""
        self.n = dict.fromkeys(CATEGORIES, 0)
        self.notes: list[str] = []

    def add(self, category: str, note: str) -> None:
        """Count one finding of `category`, saying what it was."""
        self.n[category] += 1
        self.notes.append(f"{category}: {note}")

    def shown(self) -> list[str]:
        """The categories the group's row shows."""
        return [k for k in CATEGORIES if k in self.checks or self.n[k]]


class Tracebacks(logging.Handler):
    """Keeps every log record that carries a traceback, attached or formatted into its message
    (uvicorn logs some that way); each one is counted."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback (most recent call last)" in str(record.msg):
            self.records.append(record)


def bounded(fn: Callable[[], Any], seconds: float) -> tuple[bool, Any, BaseException | None]:
    """Run `fn` in a thread: (ended in time, its value, the exception it raised)."""
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported
            box["exc"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    return not t.is_alive(), box.get("value"), box.get("exc")


def escaped(secret: str) -> list[str]:
    """`secret` as is, as Python's repr shows it and as JSON encodes it."""
    return list(dict.fromkeys([secret, repr(secret)[1:-1], json.dumps(secret)[1:-1]]))


def no_sleep() -> Any:
    """Run settings whose backoff returns at once."""
    from flue_nb.runtime.core.loop import RunSettings

    async def sleep(seconds: float) -> None:
        pass

    return RunSettings(sleep=sleep)


def settled_once(s: Any, c: Counts, where: str) -> None:
    """Every submission of session `s` has one terminal outcome (lost otherwise)."""
    for sub in s.submissions():
        if sub.outcome is None:
            c.add("lost", f"{where}: submission {sub.id} never settled")


def attempt(c: Counts, name: str, s: Any, fn: Callable[[], Any], bound: float) -> bool:
    """Run one scenario's prompts within `bound` s: count a hang, an escaped non-flue_nb error and
    an unsettled submission; False when it hung."""
    from flue_nb import FlueError

    ended, _, exc = bounded(fn, bound)
    if not ended:
        c.add("hangs", name)
        return False
    if exc is not None and not isinstance(exc, FlueError):
        c.add("tracebacks", f"{name}: {type(exc).__name__}: {exc}")
    settled_once(s, c, name)
    return True


def prompts(s: Any, *texts: str) -> None:
    """Each prompt in turn; one failing with a flue_nb error does not stop the next."""
    from flue_nb import FlueError

    for text in texts:
        try:
            s.prompt(text)
        except FlueError:
            pass


def agent(name: str, model: Any, *, mcp: bool = False, tools: Sequence[Any] = (), **options: Any) -> Any:
    """An agent on `model` with `tools` and @agent `options`, and the raw MCP server (3 s call
    timeout) when `mcp`."""
    import flue_nb as flue

    @flue.agent(name=name, **options)
    def a() -> str:
        flue.use_model(model)
        for t in tools:
            flue.use_tool(t)
        if mcp:
            flue.use_mcp("raw", command=RAW, call_timeout=3)
        return "adversarial"

    return a
