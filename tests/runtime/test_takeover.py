"""Recovery after a crash is fast (issue 12.8): a dead owner's lease is taken over at once.

The lease (30 s) protects an owner that may still be writing. When the owner provably cannot
(same host, its process is gone), the next session takes over without waiting for it to lapse;
an owner that is alive, or on another host, keeps its lease.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from agents import make_agent

import flue_nb as flue
from flue_nb.models import FunctionModel, reply
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.core.owner import new_owner, provably_dead
from flue_nb.runtime.store.sqlite import open_store

CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    import flue_nb as flue
    from flue_nb.models import FunctionModel

    async def never(request):
        print("running", flush=True)
        await asyncio.sleep(600)

    @flue.agent
    def stuck():
        flue.use_model(FunctionModel(never))

    s = flue.init(stuck, db=sys.argv[1], conversation="c")
    print(s.dispatch("hello").submission_id, flush=True)
    time.sleep(600)
    """
)
BOUND = 10.0
"""Well under the 30 s lease: reading within it proves the lease was not waited out."""


def _owner_killed_mid_run(db: str) -> str:
    """A child process that owns the conversation mid-run, SIGKILLed (and reaped)."""
    with subprocess.Popen([sys.executable, "-c", CHILD, db], stdout=subprocess.PIPE, text=True) as child:
        try:
            sid = child.stdout.readline().strip()
            assert sid.startswith("sub_") and child.stdout.readline().strip() == "running"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(30)
    return sid


def _session(db: str, model: FunctionModel, **kw):
    return flue.init(make_agent(model), db=db, conversation="c", settings=RunSettings(), **kw)


def test_a_killed_owner_on_this_host_is_taken_over_at_once(tmp_path):
    db = str(tmp_path / "s.sqlite")
    sid = _owner_killed_mid_run(db)
    # Read before opening a session: opening one starts the take-over, which may finish (and
    # release the lease) before the next line could look.
    with open_store(db, cwd=str(tmp_path)) as store:
        lease = store.lease("c")
    assert lease is not None and lease[1] - time.time() > 20  # the dead owner's lease still runs
    s = _session(db, FunctionModel(lambda request: reply("recovered")))
    assert s.read(sid, timeout=BOUND) == "recovered"
    sub = s.store.submission(sid)
    assert sub.attempts == 2 and sub.outcome.value == "completed"


def test_a_live_owner_keeps_its_lease(tmp_path):
    db = str(tmp_path / "s.sqlite")
    with subprocess.Popen([sys.executable, "-c", CHILD, db], stdout=subprocess.PIPE, text=True) as child:
        try:
            sid = child.stdout.readline().strip()
            assert child.stdout.readline().strip() == "running"
            s = _session(db, FunctionModel(lambda request: reply("stolen")))
            with pytest.raises(TimeoutError):
                s.read(sid, timeout=2.0)
            assert s.store.lease("c")[0].split(":")[1] == str(child.pid)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(30)


def test_provably_dead_only_for_a_gone_process_on_this_host():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(30)
    host = socket.gethostname()
    me = new_owner()
    assert provably_dead(f"{host}:{gone.pid}:0123abcd")
    assert not provably_dead(me)
    assert not provably_dead(f"{host}:{os.getpid()}:ffffffff")  # this process: nothing to prove
    assert not provably_dead(f"{host}:{os.getppid()}:0123abcd")  # alive
    assert not provably_dead(f"{host}-elsewhere:{gone.pid}:0123abcd")  # another host: cannot know
    assert not provably_dead("dead-owner")
    assert not provably_dead(f"{host}:not-a-pid:0123abcd")
