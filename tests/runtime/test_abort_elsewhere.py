"""An abort recorded by another process stops the owner's live run promptly (contract 11.5)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

from flue_nb.runtime.store.sqlite import SQLiteStore

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


def test_an_abort_recorded_by_another_process_settles_the_live_run_aborted(tmp_path):
    db = str(tmp_path / "s.sqlite")
    with subprocess.Popen([sys.executable, "-c", CHILD, db], stdout=subprocess.PIPE, text=True) as child:
        try:
            sid = child.stdout.readline().strip()
            assert child.stdout.readline().strip() == "running"
            with SQLiteStore(db) as store:
                assert store.request_abort("c") == [sid]
                deadline = time.monotonic() + 10  # the owner polls about once a second
                while store.submission(sid).outcome is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                sub = store.submission(sid)
            assert sub.outcome is not None and sub.outcome.value == "aborted", sub
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(30)
