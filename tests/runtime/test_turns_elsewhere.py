"""Two processes take turns on one conversation: each one's model sees the other's turns (11.1).

Process A answers a first message and goes idle, keeping its window in memory. Process B then
answers a second message and compacts the conversation by hand. When A answers a third, its
request must hold B's work (the summary of the first two turns), not A's window from before:
A kept that window and sent the model a history without B's turn. Before the third message,
A's `status()` counts the window as B left it, as B's own `status()` does.

This module is also the owner program: `python test_turns_elsewhere.py a|b DB DIR`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import flue_nb as flue

SUMMARY = "SUMMARY: the user asked one and two"
WAIT = 60.0


def _owner(role: str, db: str, d: Path) -> None:
    from flue_nb.models import FunctionModel, ModelRequest, reply
    from flue_nb.runtime.messages import SummaryMessage, UserMessage

    requests: list[list[str]] = []

    def answer(request: ModelRequest) -> Any:
        if request.purpose == "compaction":
            return reply(SUMMARY)
        requests.append([str(m.text) for m in request.messages if isinstance(m, (SummaryMessage, UserMessage))])
        return reply(f"{role} answers {requests[-1][-1]!r}")

    @flue.agent(name="turns")
    def turns() -> str:
        # Threshold compaction stays off (the window is large); by hand, all but the last turn folds.
        flue.use_model(FunctionModel(answer), compaction=flue.CompactionConfig(keep_recent_tokens=1))
        return "You answer questions."

    session = flue.init(turns, conversation="shared", db=db, cwd=str(d), lease_ttl=5.0)
    store = session.store

    def wait_for(name: str) -> None:
        deadline = time.monotonic() + WAIT
        while not (d / name).exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"owner {role}: {name} never came")
            time.sleep(0.02)

    def idle() -> None:
        """Until this process has given the conversation's lease up."""
        deadline = time.monotonic() + WAIT
        while store.lease("shared") is not None:
            if time.monotonic() > deadline:
                raise SystemExit(f"owner {role}: the conversation never went idle")
            time.sleep(0.02)

    report: dict[str, Any] = {}
    if role == "a":
        session.read(session.dispatch("one"), timeout=WAIT)
        idle()
        (d / "a_idle").touch()
        wait_for("b_idle")
        report["used_before_three"] = session.status().used_tokens
        session.read(session.dispatch("three"), timeout=WAIT)
    else:
        wait_for("a_idle")
        session.read(session.dispatch("two"), timeout=WAIT)
        session.compact()
        report["used_after_compact"] = session.status().used_tokens
        idle()
        (d / "b_idle").touch()
    report["requests"] = requests
    (d / f"{role}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    _owner(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
    sys.exit(0)


def test_a_process_that_went_idle_sees_the_turns_and_compaction_another_process_made_since(tmp_path: Path) -> None:
    db = str(tmp_path / "store.sqlite")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, role, db, str(tmp_path)], env=env, stderr=subprocess.PIPE, text=True
        )
        for role in ("a", "b")
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    a = json.loads((tmp_path / "a.json").read_text())
    b = json.loads((tmp_path / "b.json").read_text())

    assert b["requests"] == [["one", "two"]]
    # A's first request held its own message; its second holds what B left, the summary of the
    # first two turns, then the third message. Before the fix it was ["one", "three"].
    assert a["requests"] == [["one"], [SUMMARY, "three"]]
    # Both processes count the same window with the same counter.
    assert isinstance(a["used_before_three"], int) and a["used_before_three"] > 0
    assert a["used_before_three"] == b["used_after_compact"]
