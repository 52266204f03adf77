"""A damaged store never hangs a caller (issue 12.4).

A small store is written, then each of its pages in turn is overwritten with garbage; a new
session on each copy recovers the queued message and sends a new one. Every case must end
within its bound, either answered (the damage missed what was read) or with a `StoreError`
naming the file and saying what to do. Before the fix, a worker that died on a `StoreError`
was restarted every 0.5 s forever by `read()`: 5 of 19 copies hung.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path

from agents import make_agent

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply
from flue_nb.runtime.core.loop import RunSettings

PAGE = 4096
BOUND = 10.0
"""Seconds one case may take; a hang fails it instead of the suite's timeout."""


def _base_store(path: Path) -> str:
    model = ScriptedModel([reply("first answer " * 50), reply("second " * 200)])
    s = flue.init(make_agent(model), db=str(path), conversation="c", settings=RunSettings())
    s.prompt("one", timeout=BOUND)
    s.prompt("two " * 300, timeout=BOUND)
    left = s.store.admit("c", "left queued by a crash", submission_id="sub_left", now=time.time())
    s.store.close()
    return left.id


def _garble(path: Path, page: int) -> None:
    with path.open("r+b") as f:
        f.seek(page * PAGE)
        f.write(bytes((j * 37 + 11) % 256 for j in range(PAGE)))


def _case(path: Path, left: str) -> str:
    """Recover the queued message, then send one; 'answered', or the StoreError's message."""
    model = ScriptedModel([reply("recovered")] + [reply("ok")] * 3)
    try:
        s = flue.init(make_agent(model), db=str(path), conversation="c", settings=RunSettings())
        s.read(left, timeout=BOUND)
        s.prompt("hello", timeout=BOUND)
    except flue.StoreError as exc:
        return exc.message
    return "answered"


def test_every_single_page_corruption_ends_in_an_answer_or_a_store_error_naming_the_file(tmp_path):
    base = tmp_path / "base.sqlite"
    left = _base_store(base)
    pages = base.stat().st_size // PAGE
    assert pages >= 10  # a store big enough for the corruption to land in tables and indexes
    outcomes: Counter[str] = Counter()
    for page in range(pages):
        copy = tmp_path / f"page{page}.sqlite"
        shutil.copy(base, copy)
        _garble(copy, page)
        started = time.monotonic()
        result = _case(copy, left)  # a TimeoutError here is the hang this test is about
        assert time.monotonic() - started < 3 * BOUND
        if result == "answered":
            outcomes["answered"] += 1
            continue
        outcomes["store_error"] += 1
        assert str(copy) in result, result
        assert "restore it from a backup" in result and "--db" in result, result
    print(f"\n{pages} single-page corruptions: {dict(outcomes)}")
    assert outcomes["store_error"] > 0
