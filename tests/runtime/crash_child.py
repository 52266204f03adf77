"""The child program of the crash tests: runs an agent on a file store until it is SIGKILLed.

    python crash_child.py MODE --db PATH --conversation ID --dir DIR

MODE is a kill point (`admitted`, `abort`, `stream`, `tool`, `durable`, `after_tool`,
`settle`), `admitting`, or a recovering owner. In a kill-point mode the child dispatches a first
message, dispatches a second one while the first is live (so it queues or joins), and on
reaching the kill point writes `DIR/marker` and blocks until the parent kills it.
`admitting` dispatches messages in a loop.
`recover` is the next owner: it opens the same store and conversation with a model that
finishes, reads every submission to its outcome, and exits 0. `recover_slow` is a next owner
whose model streams slowly: it marks mid-stream (after a partial snapshot) and is killed too.
`recover_keep` is a next owner killed when it clears the snapshot of a half-streamed response.

Files in DIR: `marker` (JSON: what was reached), `receipts` (one submission id per line,
written after `dispatch` returned), `tool_runs` (one call id per line, appended each time the
`work` tool really runs), `step_runs` (`call_id:step` each time a durable step really runs),
`hook_runs` (a line each time a lifecycle callback really runs: `agent_start`,
`response_finish`, `agent_finish:<submission id>`) and, for `recover`, `outcomes.json`. A
`prefilled` file (written by the parent) names submissions the store held before the first
child ran: `recover` does not read them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import flue_nb as flue
from flue_nb.models import FunctionModel, ModelRequest, reply, tool_call
from flue_nb.runtime.messages import UserMessage

LEASE_TTL = 1.0
"""Short, so the next owner can take over soon after the kill (both processes use it)."""
FIRST, SECOND = "first message: do the work", "second message: and then this"
LONG_TEXT = " ".join(f"word{i}" for i in range(600))
"""Streamed at STREAM_DELAY a word: ~18 s, far longer than the child lives in `stream` mode."""
STREAM_DELAY = 0.03
ADMIT_AT_MOST = 200
"""`admitting` stops there (and waits to be killed) so recovery stays quick."""
BLOCK = 120.0
"""How long a child blocks at its kill point (the parent kills it long before)."""


class StopAtClearPartial:
    """The file store, except that its first `clear_partial` is a kill point: a public seam
    (the `Store` protocol) to land a kill between keeping a half-streamed response and
    forgetting its snapshot."""

    def __init__(self, inner: Any, child: Child) -> None:
        self._inner = inner
        self._child = child

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def clear_partial(self, submission_id: str) -> None:
        partial = self._inner.partial(submission_id) or {}
        self._child.mark("keep", partial_text=partial.get("text", ""), cleared=submission_id)


class Child:
    """One run of the child: its files, the kill point and the hooks that reach it."""

    def __init__(self, mode: str, db: str, conversation: str, directory: Path) -> None:
        self.mode = mode
        self.db = db
        self.conversation = conversation
        self.dir = directory
        self.want_second = threading.Event()
        """Set when the first message is live and the second should be dispatched now."""
        self.second_done = threading.Event()
        """Set once the second message is admitted (and joining, when the first is live)."""
        self.first_sid: str | None = None
        self.second_sid: str | None = None
        self.model_calls = 0
        self.stream_started: float | None = None
        self.session: Any = None

    # --- files --------------------------------------------------------------------------------

    def mark(self, point: str, **info: Any) -> None:
        """Say the kill point is reached: write the marker atomically, then block."""
        tmp = self.dir / "marker.tmp"
        tmp.write_text(json.dumps({"point": point, "first": self.first_sid, "second": self.second_sid, **info}))
        os.replace(tmp, self.dir / "marker")
        time.sleep(BLOCK)

    def step_ran(self, call_id: str, step: str) -> str:
        with open(self.dir / "step_runs", "a") as f:
            f.write(f"{call_id}:{step}\n")
        return {"charge": "charged", "ship": "shipped"}[step]

    def hook_ran(self, line: str) -> None:
        with open(self.dir / "hook_runs", "a") as f:
            f.write(line + "\n")

    def receipt(self, sid: str) -> None:
        with open(self.dir / "receipts", "a") as f:
            f.write(sid + "\n")

    # --- the agent ----------------------------------------------------------------------------

    def build_agent(self) -> Any:
        child = self

        @flue.tool
        def work(label: str, ctx: flue.ToolContext) -> str:
            """Do one unit of work with a side effect outside the store.

            Args:
                label: what to work on.
            """
            with open(child.dir / "tool_runs", "a") as f:
                f.write(ctx.call_id + "\n")
            if child.mode in ("tool", "after_tool"):
                child.want_second.set()
                child.second_done.wait(20.0)
            if child.mode == "tool":
                child.mark("tool", call_id=ctx.call_id)
            return f"worked on {label}"

        @flue.tool(durable=True)
        async def durable_work(label: str, ctx: flue.ToolContext) -> str:
            """Two durable steps with side effects; a re-run replays the recorded ones.

            Args:
                label: what to work on.
            """
            assert ctx.step is not None
            charged = await ctx.step.do("charge", lambda: child.step_ran(ctx.call_id, "charge"))
            if child.mode == "durable":
                child.want_second.set()
                while not child.second_done.is_set():
                    await asyncio.sleep(0.01)
                child.mark("durable", call_id=ctx.call_id)
            shipped = await ctx.step.do("ship", lambda: child.step_ran(ctx.call_id, "ship"))
            return f"{label}: {charged} and {shipped}"

        if self.mode == "recover":
            model = FunctionModel(self.finishing_model)
        elif self.mode == "recover_slow":
            model = FunctionModel(lambda request: reply(LONG_TEXT), delay=STREAM_DELAY)
        else:
            model = FunctionModel(self.crashing_model, delay=STREAM_DELAY if self.mode == "stream" else 0.0)

        @flue.agent(name="crash_agent")
        def crash_agent() -> str:
            # Threshold compaction is off: it is not under test here and would load tiktoken.
            flue.use_model(model, compaction=False)
            flue.use_tool(work)
            flue.use_tool(durable_work)
            flue.use_agent_start(lambda: child.hook_ran("agent_start"))
            flue.use_response_finish(lambda response: child.hook_ran("response_finish"))
            flue.use_agent_finish(lambda done: child.hook_ran(f"agent_finish:{done.submission_id}"))
            return "You are the crash-test agent."

        return crash_agent

    async def crashing_model(self, request: ModelRequest) -> Any:
        """The first owner's model: a tool call, then (unless killed first) a final answer."""
        self.model_calls += 1
        if self.model_calls == 1:
            text = LONG_TEXT if self.mode == "stream" else "I will do the work."
            name = "durable_work" if self.mode == "durable" else "work"
            return reply(text, tool_call(name, f"call_{uuid.uuid4().hex[:12]}", label="first"))
        if self.mode == "after_tool":
            # The tool result (and the joined second message) are recorded; no model output yet.
            self.mark("after_tool")
        if self.mode == "settle":
            self.want_second.set()
            while not self.second_done.is_set():
                await asyncio.sleep(0.01)
        return reply("Finished the work.")

    def finishing_model(self, request: ModelRequest) -> Any:
        """The next owner's model: a fresh user message gets one tool call, then it answers."""
        last = request.messages[-1] if request.messages else None
        if isinstance(last, UserMessage):
            return reply(
                "Working on it.",
                tool_call("work", f"call_{uuid.uuid4().hex[:12]}", label="recovered"),
            )
        return reply("Recovered and finished.")

    # --- kill points reached through events -----------------------------------------------------

    def observe(self, event: Any) -> None:
        if self.first_sid is None:
            # The first event with a submission id is the first message's `submission_queued`;
            # the main thread may not have stored the receipt yet when the run starts.
            self.first_sid = event.submission_id
        if event.submission_id is None or event.submission_id != self.first_sid:
            return
        if self.mode in ("admitted", "abort") and event.type == "submission_running":
            # Running, lease held, nothing of the run recorded yet.
            self.want_second.set()
            self.second_done.wait(20.0)
            self.mark(self.mode)
        elif self.mode in ("stream", "recover_slow") and event.type == "text_delta":
            now = time.monotonic()
            if self.stream_started is None:
                self.stream_started = now
                self.want_second.set()
            partial = self.session.store.partial(self.first_sid)
            ready = self.second_done.is_set() or self.mode == "recover_slow"
            if ready and partial and now - self.stream_started >= 0.3:
                self.mark(
                    self.mode,
                    partial_text=partial.get("text", ""),
                    elapsed=now - self.stream_started,
                )
        elif self.mode == "settle" and event.type == "turn" and event.stop_reason == "end_turn":
            # The final assistant message is recorded; settlement has not happened.
            self.mark("settle")

    # --- the programs -------------------------------------------------------------------------

    def open(self) -> Any:
        db: Any = self.db
        if self.mode == "recover_keep":
            from flue_nb.runtime.store.url import open_any

            db = StopAtClearPartial(open_any(self.db, cwd=str(self.dir)), self)
        self.session = flue.init(
            self.build_agent(),
            conversation=self.conversation,
            db=db,
            cwd=str(self.dir),
            lease_ttl=LEASE_TTL,
        )
        return self.session

    def run_to_kill_point(self) -> None:
        session = self.open()
        session.observe(self.observe)
        first = session.dispatch(FIRST)
        self.first_sid = first.submission_id
        self.receipt(first.submission_id)
        if self.mode not in ("admitted", "abort") and not self.want_second.wait(20.0):
            raise SystemExit(f"crash_child: the first message never went live in mode {self.mode!r}")
        second = session.dispatch(SECOND)
        self.second_sid = second.submission_id
        self.receipt(second.submission_id)
        if self.mode == "abort":
            if not self.want_second.wait(20.0):
                raise SystemExit("crash_child: the first message never started running")
            # The durable intent Session.abort() records (its coroutine cannot run: the runtime
            # loop is held at the kill point), so the kill lands before the intent took effect.
            session.store.request_abort(self.conversation)
        if self.mode not in ("admitted", "abort"):
            deadline = time.monotonic() + 20.0
            while session.store.submission(second.submission_id).state.value != "joining":
                if time.monotonic() > deadline:
                    raise SystemExit("crash_child: the second message never started joining")
                time.sleep(0.005)
        self.second_done.set()
        time.sleep(BLOCK)
        raise SystemExit(f"crash_child: never killed in mode {self.mode!r}")

    def admit_in_a_loop(self) -> None:
        session = self.open()
        for i in range(ADMIT_AT_MOST):
            receipt = session.dispatch(f"message {i}")
            self.receipt(receipt.submission_id)
            if i == 2:
                tmp = self.dir / "marker.tmp"
                tmp.write_text(json.dumps({"point": "admitting"}))
                os.replace(tmp, self.dir / "marker")
        time.sleep(BLOCK)

    def recover(self) -> None:
        session = self.open()
        if self.mode == "recover_slow":
            session.observe(self.observe)
        outcomes = {}
        prefilled = self.dir / "prefilled"
        before = set(prefilled.read_text().split()) if prefilled.exists() else set()
        for sub in session.submissions():
            if sub.id in before:
                continue  # settled before the first child ran: not what this recovery reads
            try:
                session.read(sub.id, timeout=60.0)
                outcomes[sub.id] = "completed"
            except flue.FlueError as exc:
                outcomes[sub.id] = f"{exc.type}: {exc.message}"
        (self.dir / "outcomes.json").write_text(json.dumps(outcomes))


def forked(argv: list[str], cwd: str, out: str) -> None:
    """`main(argv)` in a process forked from one that imported this module (the crash tests'
    forkserver), as `python crash_child.py ARGV` would run it: in `cwd`, its output in `out`."""
    os.chdir(cwd)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    main(argv)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "mode",
        choices=[
            "admitted",
            "abort",
            "stream",
            "tool",
            "durable",
            "after_tool",
            "settle",
            "admitting",
            "recover",
            "recover_slow",
            "recover_keep",
        ],
    )
    parser.add_argument("--db", required=True)
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    child = Child(args.mode, args.db, args.conversation, Path(args.dir))
    if args.mode in ("recover", "recover_slow", "recover_keep"):
        child.recover()
    elif args.mode == "admitting":
        child.admit_in_a_loop()
    else:
        child.run_to_kill_point()


if __name__ == "__main__":
    main()
