"""Crash tests (contract 10.4, 11.1, 11.2; quality.md "Crash tests").

A child process (crash_child.py) runs an agent on a file store and is SIGKILLed at a chosen
point; a new process opens the same store and conversation and reads every submission to its
outcome. Each is a process of its own, forked from a server process that imported crash_child
(and flue_nb) once: the suite's largest CPU cost was every child's imports. For every kill point, over REPS repetitions: every accepted submission has exactly one
terminal outcome, no recorded tool result was produced by a second run of the tool, no
queued message is lost, and each lifecycle callback ran exactly once (issue 25.4). The matrix of outcomes is printed at the end of the module.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from flue_nb.runtime.store import Outcome, Record, SubmissionState
from tests.runtime import crash_child

pytestmark = pytest.mark.crash

FORKS = multiprocessing.get_context("forkserver")
"""Where the children come from: a single-threaded process that imported these once (fork from
the test's own threaded process would not be safe). Each child is forked before it opens any
store, and is a lease owner of its own (flue_nb's session makes a new owner after a fork)."""
FORKS.set_forkserver_preload(
    ["tests.runtime.crash_child", "flue_nb.runtime.session", "flue_nb.runtime.store.url"]
    + ["flue_nb.runtime.store.sqlite", "flue_nb.runtime.store.postgres"]
)
CONVERSATION = "crash"
REPS = int(os.environ.get("FLUE_CRASH_REPS", "5"))
"""Repetitions per kill point and store: 5 in `make test` (the suite's largest CPU cost on a
2-core machine, a third of it at 10); `FLUE_CRASH_REPS=50 pytest tests/runtime/test_crash.py`
for a larger matrix."""
WORKERS = 4
MARKER_WAIT = 120.0
"""Bound on how long the parent waits for the child to reach its kill point."""

KILL_POINTS = {
    "admitted": "after admission, before the model call",
    "abort": "after an abort intent, before it took effect",
    "stream": "mid-stream, after a partial snapshot",
    "tool": "mid-tool (side effect done, no result)",
    "durable": "mid durable tool, between its two steps",
    "after_tool": "after the tool result, before the next model call",
    "settle": "after the final message, before settlement",
    "admitting": "while admitting messages in a loop",
    "twice": "mid-tool, then the recovering process mid-stream",
    "keep": "mid-stream, then recovery between keep and clear",
}
FIRST, SECOND = "first message: do the work", "second message: and then this"


@dataclass
class Tally:
    """One row of the matrix: a kill point over its repetitions."""

    reps: int = 0
    submissions: int = 0
    exactly_once: int = 0
    lost: int = 0
    duplicated: int = 0
    tool_runs: int = 0
    tool_reruns: int = 0
    problems: list[str] = field(default_factory=list)
    unreached: list[str] = field(default_factory=list)
    """Kill points the store shows were not reached as intended (a broken test, not a finding)."""

    def add(self, other: Tally) -> None:
        self.reps += other.reps
        self.submissions += other.submissions
        self.exactly_once += other.exactly_once
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.tool_runs += other.tool_runs
        self.tool_reruns += other.tool_reruns
        self.problems += other.problems
        self.unreached += other.unreached


MATRIX: dict[str, Tally] = {}


def _matrix_lines() -> list[str]:
    labels = {mode: f"{mode}: {KILL_POINTS[mode.split()[0]]}" for mode in MATRIX}
    # The widest label there can be, not the widest here: parallel workers' rows line up.
    width = max(len(f"{mode} (after 10,000): {point}") for mode, point in KILL_POINTS.items())
    head = (
        f"{'kill point':<{width}} {'reps':>4} {'subs':>5} {'exactly-once':>12} {'lost':>4} "
        f"{'dup':>4} {'tool runs':>9} {'re-runs':>7}"
    )
    lines = ["", "crash matrix (SIGKILL, then a new process recovers)", head, "-" * len(head)]
    for mode, t in MATRIX.items():
        lines.append(
            f"{labels[mode]:<{width}} {t.reps:>4} {t.submissions:>5} {t.exactly_once:>12} "
            f"{t.lost:>4} {t.duplicated:>4} {t.tool_runs:>9} {t.tool_reruns:>7}"
        )
    return lines


@pytest.fixture(autouse=True)
def crash_matrix(crash_summary: list[str]) -> Any:
    """Hand the matrix so far to pytest's summary after each test (conftest.py prints it after
    the results, never in the middle of the progress line, joining parallel workers' rows)."""
    yield MATRIX
    if MATRIX:
        crash_summary[:] = _matrix_lines()[2:]


# --- running one repetition -------------------------------------------------------------------


def _db(d: Path) -> str:
    """The repetition's store: a PostgreSQL URL if it has one (`pg_url`), else its SQLite file."""
    url = d / "pg_url"
    return url.read_text() if url.exists() else str(d / "store.sqlite")


def _open(d: Path) -> Any:
    from flue_nb.runtime.store.url import open_any

    return open_any(_db(d), cwd=str(d))


def _prefilled(d: Path) -> set[str]:
    """The submissions the repetition's store held before its first child ran (a long
    conversation's, all settled): not the children's, so not what the checks count."""
    path = d / "prefilled"
    return set(path.read_text().split()) if path.exists() else set()


_STATUS = threading.Lock()
"""multiprocessing reads a child's exit status from a pipe, once, and `Process.start()` polls
every other child of the process too: two threads reading one status at once leave one of them
an EOF, which it reports as exit code 255 (seen). Starts, status reads and closes take this lock."""


def _child(mode: str, d: Path, out: str) -> Any:
    """A started child running `crash_child.py MODE` in `d`, its output in `d/out`."""
    argv = [mode, "--db", _db(d), "--conversation", CONVERSATION, "--dir", str(d)]
    proc = FORKS.Process(target=crash_child.forked, args=(argv, str(d), str(d / out)), name=f"crash-{mode}")
    with _STATUS:
        proc.start()
    return proc


def _ended(proc: Any, timeout: float | None = 0) -> int | None:
    """The child's exit code once it has ended (waiting up to `timeout`, None: for ever), else None."""
    if not multiprocessing.connection.wait([proc.sentinel], timeout):
        return None
    with _STATUS:
        code: int = proc.exitcode
        proc.close()
    return code


def _tail(path: Path) -> str:
    return path.read_text()[-3000:] if path.exists() else "(no output)"


def _kill_at_marker(mode: str, d: Path) -> dict[str, Any]:
    """Start the child, wait (bounded) for its marker, SIGKILL it; return the marker."""
    proc = _child(mode, d, "child.out")
    code = None
    try:
        deadline = time.monotonic() + MARKER_WAIT
        while not (d / "marker").exists():
            if (code := _ended(proc)) is not None:
                raise AssertionError(
                    f"{d.name}: the child exited ({code}) before its kill point:\n{_tail(d / 'child.out')}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"{d.name}: no marker within {MARKER_WAIT} s:\n{_tail(d / 'child.out')}")
            time.sleep(0.005)
        if mode == "admitting":
            time.sleep(random.uniform(0.0, 0.05))  # land anywhere in the admission loop
    finally:
        if code is None:
            os.kill(proc.pid, signal.SIGKILL)
            code = _ended(proc, None)
    assert code == -signal.SIGKILL, f"{d.name}: child ended with {code}:\n{_tail(d / 'child.out')}"
    return json.loads((d / "marker").read_text())


def _recover(d: Path) -> None:
    proc = _child("recover", d, "recover.out")
    if (code := _ended(proc, 120)) is None:
        os.kill(proc.pid, signal.SIGKILL)
        code = _ended(proc, None)
    assert code == 0, f"{d.name}: the recovering process failed ({code}):\n{_tail(d / 'recover.out')}"


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _messages(records: list[Record]) -> list[Record]:
    return [r for r in records if r.kind == "message"]


def _tool_calls(records: list[Record]) -> list[tuple[str, Record]]:
    return [
        (p["id"], r)
        for r in _messages(records)
        if r.data["kind"] == "assistant"
        for p in r.data["parts"]
        if p["kind"] == "tool_call"
    ]


def _check_kill_point(mode: str, d: Path, marker: dict[str, Any]) -> list[str]:
    """What the store must show at the kill point, so the test proves it crashed where it says."""
    if mode == "admitting":
        return []
    first, second = marker["first"], marker["second"]
    with _open(d) as store:
        s1, s2 = store.submission(first), store.submission(second)
        records = store.records(CONVERSATION)
        partial = store.partial(first)
    msgs = [r.data for r in _messages(records) if r.submission_id == first]
    kinds = [m["kind"] for m in msgs]
    before = _prefilled(d)
    settled = [r for r in records if r.kind == "settlement" and r.submission_id not in before]
    # (the first submission's messages, the second submission's possible states)
    expected: dict[str, tuple[list[str], tuple[str, ...]]] = {
        # Admitted back to back: the second is marked joining if the first was already current.
        "admitted": ([], ("queued", "joining")),
        "abort": ([], ("queued", "joining")),
        "stream": (["user"], ("joining",)),
        "tool": (["user", "assistant"], ("joining",)),
        "durable": (["user", "assistant"], ("joining",)),
        # The second message joined at the turn boundary: its user message is recorded in the
        # first submission's stream, in the same transaction that marked it joined.
        "after_tool": (["user", "assistant", "tool_result", "user"], ("joined",)),
        "settle": (["user", "assistant", "tool_result", "assistant"], ("joining",)),
    }
    want_kinds, want_s2 = expected[mode]
    problems = []
    if s1 is None or s1.state != SubmissionState.RUNNING:
        problems.append(f"{d.name}: at the kill point the first submission is {s1 and s1.state}, not running")
    if s2 is None or s2.state.value not in want_s2:
        problems.append(f"{d.name}: at the kill point the second submission is {s2 and s2.state.value}, not {want_s2}")
    if kinds != want_kinds:
        problems.append(f"{d.name}: at the kill point the first submission's messages are {kinds}, not {want_kinds}")
    if settled:
        problems.append(f"{d.name}: a settlement was recorded before the kill point: {settled}")
    if mode == "stream" and not (partial and partial.get("text")):
        problems.append(f"{d.name}: no partial snapshot at the mid-stream kill point")
    if (mode == "abort") != bool(s1 and s2 and s1.abort_requested and s2.abort_requested):
        problems.append(
            f"{d.name}: abort intents at the kill point: {s1 and s1.abort_requested}, {s2 and s2.abort_requested}"
        )
    if mode == "durable":
        steps = [r.data["name"] for r in records if r.kind == "step" and r.data["call_id"] == marker["call_id"]]
        if steps != ["charge"]:
            problems.append(f"{d.name}: at the kill point the durable call has steps {steps}, not ['charge']")
    if mode == "stream" and marker.get("elapsed", 0) < 0.3:
        problems.append(f"{d.name}: killed only {marker.get('elapsed')} s into the stream")
    return problems


def _analyse(mode: str, d: Path, marker: dict[str, Any]) -> Tally:
    """Classify every accepted submission and every tool run after recovery."""
    with _open(d) as store:
        subs = store.submissions(CONVERSATION)
        records = store.records(CONVERSATION)
    if before := _prefilled(d):
        subs = [s for s in subs if s.id not in before]
        records = [r for r in records if r.submission_id not in before]
    receipts = _lines(d / "receipts")
    runs = Counter(_lines(d / "tool_runs"))
    by_id = {s.id: s for s in subs}
    settlements = Counter(r.submission_id for r in records if r.kind == "settlement")
    users = Counter(r.data.get("submission_id") for r in _messages(records) if r.data["kind"] == "user")
    # A half-streamed response kept (as aborted) more than once is a duplicate too.
    kept = Counter(
        (r.submission_id, json.dumps(r.data, sort_keys=True))
        for r in _messages(records)
        if r.data["kind"] == "assistant" and r.data["aborted"]
    )
    kept_twice = Counter(sid for (sid, _), n in kept.items() if n > 1)
    t = Tally(reps=1, submissions=len(set(receipts) | set(by_id)))
    expected = Outcome.ABORTED if mode == "abort" else Outcome.COMPLETED
    where = d.name

    for sid in receipts:
        if sid not in by_id:
            t.lost += 1
            t.problems.append(f"{where}: receipt {sid} has no submission in the store")
    for s in subs:
        absorber = by_id.get(s.joined_into) if s.joined_into else None
        own = settlements[s.id]
        lost = (
            s.state != SubmissionState.SETTLED
            or s.outcome is None
            # An aborted submission may settle before its message reached the model.
            or (users[s.id] == 0 and s.outcome != Outcome.ABORTED)
            or own == 0
            or (absorber is not None and settlements[absorber.id] == 0)
        )
        duplicated = own > 1 or users[s.id] > 1 or kept_twice[s.id] > 0
        if lost:
            t.lost += 1
            t.problems.append(
                f"{where}: {s.id} ({s.text!r}) lost: state={s.state.value} outcome={s.outcome} "
                f"user messages={users[s.id]} settlement records={own} joined_into={s.joined_into}"
            )
        elif duplicated:
            t.duplicated += 1
            t.problems.append(
                f"{where}: {s.id} duplicated: settlement records={own} user messages={users[s.id]} "
                f"joined_into={s.joined_into} aborted messages kept twice={kept_twice[s.id]}"
            )
        else:
            t.exactly_once += 1
        if s.outcome != expected or (
            expected == Outcome.ABORTED and (s.error or {}).get("type") != "submission_aborted"
        ):
            t.problems.append(f"{where}: {s.id} settled {s.outcome} (error {s.error}), expected {expected.value}")
        if absorber is not None and (absorber.outcome != s.outcome or absorber.state != SubmissionState.SETTLED):
            t.problems.append(
                f"{where}: joined {s.id} settled {s.outcome} but its absorber "
                f"{absorber.id} is {absorber.state.value}/{absorber.outcome}"
            )

    results = _check_tool_runs(t, where, d, records, runs)
    _check_reads(t, where, d, by_id)
    t.problems += _check_recovered(mode, d, marker, by_id, records, runs, results)
    # A kill at a random moment (admitting) can land after a callback returned and before its
    # record committed: that one callback runs again, as an unrecorded durable step would. The
    # other kill points wait at markers, where no callback is running: there, exactly once.
    t.problems += _check_hooks(d, subs, records, slack=1 if mode == "admitting" else 0)
    return t


def _check_tool_runs(
    t: Tally, where: str, d: Path, records: list[Any], runs: Counter[str]
) -> dict[str, list[dict[str, Any]]]:
    """Count real tool runs and note calls run twice, or whose recorded result no run explains."""
    # Tools: one real run per call at most; a recorded success was produced by exactly one run.
    calls = dict(_tool_calls(records))
    names = {
        call_id: next(p["name"] for p in r.data["parts"] if p.get("id") == call_id) for call_id, r in calls.items()
    }
    steps = Counter(_lines(d / "step_runs"))
    for step, n in steps.items():
        if n > 1:
            t.tool_reruns += n - 1
            t.problems.append(f"{where}: durable step {step} really ran {n} times")
    results: dict[str, list[dict[str, Any]]] = {}
    for r in _messages(records):
        if r.data["kind"] == "tool_result":
            results.setdefault(r.data["call_id"], []).append(r.data)
    t.tool_runs = sum(runs.values()) + sum(steps.values())
    t.tool_reruns = sum(n - 1 for n in runs.values() if n > 1)
    for call_id, n in runs.items():
        if n > 1:
            t.problems.append(f"{where}: tool call {call_id} really ran {n} times")
        if call_id not in calls:
            t.problems.append(f"{where}: tool call {call_id} ran but no assistant message records it")
    for call_id in calls:
        problem = _result_problem(call_id, names[call_id], results.get(call_id, []), runs, steps)
        if problem:
            t.problems.append(f"{where}: {problem}")
    for call_id in results:
        if call_id not in calls:
            t.problems.append(f"{where}: a tool result for {call_id} answers no recorded call")
    return results


def _result_problem(
    call_id: str, name: str, got: list[dict[str, Any]], runs: Counter[str], steps: Counter[str]
) -> str | None:
    """What is wrong with the recorded result(s) of one tool call, if anything."""
    if len(got) != 1:
        return f"tool call {call_id} has {len(got)} recorded results, expected 1"
    (result,) = got
    if result["is_error"]:
        if "outcome is unknown" not in result["content"]:
            return f"tool call {call_id} has an unexpected error result {result['content']!r}"
    elif name == "durable_work":
        if steps[f"{call_id}:charge"] != 1 or steps[f"{call_id}:ship"] != 1:
            return f"durable call {call_id} has a result but its steps ran {dict(steps)}"
    elif runs[call_id] != 1:
        return f"tool call {call_id} has a recorded result but ran {runs[call_id]} times"
    return None


def _check_reads(t: Tally, where: str, d: Path, by_id: dict[str, Any]) -> None:
    """What the recovering process's `read` returned must be what the store says."""
    read = json.loads((d / "outcomes.json").read_text())
    if set(read) != set(by_id):
        t.problems.append(f"{where}: the recovering process read {sorted(read)}, not every submission")
    for sid, got in read.items():
        s = by_id.get(sid)
        want = "completed" if s and s.outcome == Outcome.COMPLETED else (s and s.error or {}).get("type")
        if got.split(":")[0] != want:
            t.problems.append(f"{where}: read({sid}) gave {got!r}; the store says {want!r}")


def _check_hooks(d: Path, subs: list[Any], records: list[Record], *, slack: int = 0) -> list[str]:
    """Lifecycle callbacks ran once each: per submission that reached the model (agent_start),
    per stored complete response (response_finish), per settled submission that did not join
    another's response (agent_finish), whether it ran or was aborted before it could."""
    where, problems = d.name, []
    hooks = Counter(_lines(d / "hook_runs"))
    assistant = [r for r in _messages(records) if r.data["kind"] == "assistant"]
    reached = {r.submission_id for r in assistant}
    if not len(reached) <= hooks["agent_start"] <= len(reached) + slack:
        problems.append(f"{where}: agent_start ran {hooks['agent_start']} times for {len(reached)} submissions")
    complete = sum(1 for r in assistant if not r.data["aborted"])
    if not complete <= hooks["response_finish"] <= complete + slack:
        problems.append(f"{where}: response_finish ran {hooks['response_finish']} times for {complete} responses")
    for s in subs:
        n = hooks[f"agent_finish:{s.id}"]
        want = 1 if s.outcome is not None and s.joined_into is None else n
        if not want <= n <= max(want, 1) + slack or (slack == 0 and n > 1):
            problems.append(f"{where}: agent_finish ran {n} times for {s.id} ({s.outcome}), expected {want}")
    return problems


def _check_recovered(
    mode: str,
    d: Path,
    marker: dict[str, Any],
    by_id: dict[str, Any],
    records: list[Record],
    runs: Counter[str],
    results: dict[str, list[dict[str, Any]]],
) -> list[str]:
    """What recovery from this particular kill point must have done (contract 11.2)."""
    if mode == "admitting":
        return []
    where = d.name
    first, second = by_id.get(marker["first"]), by_id.get(marker["second"])
    msgs = [r.data for r in _messages(records) if r.submission_id == marker["first"]]
    problems = []
    if first is None or second is None:
        return [f"{where}: a dispatched submission is missing"]
    if mode in ("stream", "twice", "keep"):
        kept = [m for m in msgs if m["kind"] == "assistant" and m["aborted"]]
        texts = ["".join(p.get("text", "") for p in m["parts"] if p["kind"] == "text") for m in kept]
        if texts != [marker["partial_text"]]:
            problems.append(f"{where}: the half-streamed response was not kept once as aborted: {texts!r}")
        if not any(m["kind"] == "signal" and m["signal_type"] == "interrupted" for m in msgs):
            problems.append(f"{where}: the model was not told its stream was interrupted")
    if mode in ("tool", "twice"):
        got = results.get(marker["call_id"], [])
        if runs[marker["call_id"]] != 1 or len(got) != 1 or not got[0]["is_error"]:
            problems.append(
                f"{where}: the interrupted call {marker['call_id']} ran {runs[marker['call_id']]} times, results {got}"
            )
    if mode == "durable":
        got = results.get(marker["call_id"], [])
        if len(got) != 1 or got[0]["is_error"] or got[0]["content"] != "first: charged and shipped":
            problems.append(f"{where}: the durable call was not resumed with its recorded step replayed: {got}")
    if mode == "after_tool" and second.joined_into != first.id:
        problems.append(f"{where}: the joined message is no longer joined into the first: {second.joined_into}")
    if mode == "settle":
        answers = [m for m in msgs if m["kind"] == "assistant"]
        if len(answers) != 2 or first.result != "Finished the work.":
            problems.append(
                f"{where}: the completed response was not settled as "
                f"recorded: result={first.result!r}, {len(answers)} answers"
            )
    if mode != "after_tool" and second.joined_into is not None and second.joined_into != first.id:
        problems.append(f"{where}: the second message joined an unexpected submission {second.joined_into}")
    return problems


def _check_second_kill(d: Path, marker: dict[str, Any], again: dict[str, Any]) -> list[str]:
    """The recovering process was killed too: the interrupted call answered once, a partial."""
    with _open(d) as store:
        records = store.records(CONVERSATION)
        partial = store.partial(marker["first"])
    results = [
        r.data for r in _messages(records) if r.data["kind"] == "tool_result" and r.data["call_id"] == marker["call_id"]
    ]
    problems = []
    if len(results) != 1 or not results[0]["is_error"]:
        problems.append(f"{d.name}: at the second kill the interrupted call has results {results}")
    if again["first"] != marker["first"] or not (partial and partial.get("text")):
        problems.append(
            f"{d.name}: the second kill was not mid-stream of the first submission: {again}, partial {partial}"
        )
    return problems


def _check_kept_not_cleared(d: Path, marker: dict[str, Any], again: dict[str, Any]) -> list[str]:
    """Killed between keeping the half-streamed response and clearing its snapshot."""
    with _open(d) as store:
        records = store.records(CONVERSATION)
        partial = store.partial(marker["first"])
    kept = [r.data for r in _messages(records) if r.data["kind"] == "assistant" and r.data["aborted"]]
    if (
        again["cleared"] != marker["first"]
        or len(kept) != 1
        or not partial
        or again["partial_text"] != marker["partial_text"]
    ):
        return [
            (
                f"{d.name}: the second kill was not between keep and clear: "
                f"kept {len(kept)}, partial {partial}, marker {again}"
            )
        ]
    return []


def _repetition(mode: str, root: Path, i: int, pg: Any = None, *, prefill: int = 0) -> Tally:
    d = root / f"{mode}-{i}"
    d.mkdir()
    if pg is not None:
        (d / "pg_url").write_text(pg.create_database())
    if prefill:
        from tests.runtime.test_scale import bulk_build

        bulk_build(d / "store.sqlite", CONVERSATION, prefill, t0=time.time() - prefill - 60)
        with _open(d) as store:
            (d / "prefilled").write_text("\n".join(s.id for s in store.submissions(CONVERSATION)))
    first_point = {"twice": "tool", "keep": "stream"}.get(mode, mode)
    marker = _kill_at_marker(first_point, d)
    pre = _check_kill_point(first_point, d, marker)
    if mode == "keep":
        os.replace(d / "marker", d / "marker.first")
        again = _kill_at_marker("recover_keep", d)
        pre += _check_kept_not_cleared(d, marker, again)
    if mode == "twice":
        os.replace(d / "marker", d / "marker.first")
        again = _kill_at_marker("recover_slow", d)
        pre += _check_second_kill(d, marker, again)
        marker["partial_text"] = again["partial_text"]
    _recover(d)
    t = _analyse(mode, d, marker)
    t.unreached = pre
    return t


@pytest.mark.parametrize("mode", ["stream", "tool", "after_tool", "settle"])
def test_sigkill_then_recovery_on_a_conversation_of_ten_thousand_submissions(mode: str, tmp_path: Path) -> None:
    # The same kill points on a conversation that already holds 10,000 settled submissions (as
    # a served kernel's or a team chat's does, issue 37): once each, the checks the same, the
    # conversation's earlier submissions untouched by the kill and by the recovery.
    t = _repetition(mode, tmp_path, 0, prefill=10_000)
    MATRIX[f"{mode} (after 10,000)"] = t
    if t.unreached:
        pytest.fail("kill point not reached as intended:\n" + "\n".join(t.unreached))
    assert not t.problems, "\n".join(t.problems)
    assert t.submissions >= 2 and t.exactly_once == t.submissions and t.lost == 0 and t.duplicated == 0
    assert t.tool_reruns == 0
    with _open(tmp_path / f"{mode}-0") as store:
        before = _prefilled(tmp_path / f"{mode}-0")
        subs = store.submissions(CONVERSATION)
        assert len(before) == 10_000 and {s.id for s in subs[:10_000]} == before
        assert all(s.outcome == Outcome.COMPLETED for s in subs if s.id in before)
        settlements = Counter(r.submission_id for r in store.records(CONVERSATION, kinds=["settlement"]))
        assert all(settlements[sid] == 1 for sid in before)
        assert store.count_submissions(CONVERSATION) == 10_000 + t.submissions


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("admitted", id="after_admission_before_model_call"),
        pytest.param("abort", id="after_abort_intent_before_it_took_effect"),
        pytest.param("stream", id="mid_stream_after_partial_snapshot"),
        pytest.param("tool", id="mid_tool_after_side_effect"),
        pytest.param("durable", id="mid_durable_tool_between_steps"),
        pytest.param("after_tool", id="after_tool_result_before_next_turn"),
        pytest.param("settle", id="after_final_message_before_settlement"),
        pytest.param("admitting", id="while_admitting_messages"),
        pytest.param("twice", id="mid_tool_then_again_while_recovering"),
        pytest.param(
            "keep",
            id="mid_stream_then_again_between_keeping_and_clearing_the_partial",
        ),
    ],
)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_sigkill_then_recovery_settles_each_submission_exactly_once(
    mode: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pg = request.getfixturevalue("pg_server") if backend == "postgres" else None
    tally = Tally()
    with ThreadPoolExecutor(WORKERS) as pool:
        for t in pool.map(lambda i: _repetition(mode, tmp_path, i, pg), range(REPS)):
            tally.add(t)
    MATRIX[mode if backend == "sqlite" else f"{mode} (postgres)"] = tally
    if tally.unreached:
        # pytest.fail, not assert: an xfail below expects only the findings' AssertionError.
        pytest.fail("kill points not reached as intended:\n" + "\n".join(tally.unreached))
    assert tally.reps == REPS
    assert tally.submissions >= 2 * REPS if mode != "admitting" else tally.submissions >= 3 * REPS
    assert not tally.problems, "\n".join(tally.problems)
    assert tally.exactly_once == tally.submissions and tally.lost == 0 and tally.duplicated == 0
    assert tally.tool_reruns == 0
