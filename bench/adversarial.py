"""The adversarial categories of the hardening rounds (issues 20 and 32), re-run on what is cheap
here; prints the counts, one row per group (the categories it checks) and one for all.

Categories, each counted over every scenario below:
- lost: an accepted submission with no terminal outcome, a queued message never answered, or a
  served call with no record;
- duplicated: a submission settled twice, a recorded tool result produced by a second run, a
  served call whose code ran twice, or two tool results under one id;
- hangs: a scenario that did not end within its bound;
- tracebacks: an exception that escaped as something other than a flue_nb error, a log record
  carrying a traceback (uvicorn's too), or a CLI error longer than one line or exiting 0;
- leaks: a secret (as is, as Python's repr shows it, as JSON encodes it, or its first 6
  characters, as a cut leaves them) found in the store's bytes, an error message, a result the
  model was given, what the server saw or a span;
- unfenced: notebook text planted with an instruction found outside the `<notebook-data>` blocks
  of a notebook tool's result;
- overspent: a budgeted run that the provider billed above its limit by more than the README's
  margin (the gap between flue_nb's prompt estimate and the provider's count), or whose
  `status()` shows no cost after the provider billed it;
- late: a submission settled later than its `timeout` (or `model_call_timeout`) plus the README's
  5 s grace (and 0.1 s for the settling itself);
- untrue: a served call whose record disagrees with what its client got (a refused call recorded
  `completed`, an answered one recorded otherwise, a refused one whose code ran), or an answer
  cut by `finish_reason: "length"` with nothing saying so;
- ran on: a served call whose client disconnected (or that `stop()` cut short) whose code still
  ran to its end;
- retried: what the README says fails at once (a 200 answer that is not a stream, a loopback
  server refusing connections) sent more than once, or `content: null` sent to a server that
  answers it with HTTP 500.

Scenarios:
- kill storms: the crash matrix (tests/runtime/test_crash.py's repetitions: SIGKILL at each kill
  point, then recovery by a new process) on SQLite and, when a server can be had, PostgreSQL;
  and two processes dispatching into one conversation (bench/store.py);
- secrets on every path: a tool's result and its exception, the agent function's exception, an
  MCP server's stderr and a value given only through use_mcp(env=...), a subagent's answer
  quoting the key, a provider error body echoing the key;
- hostile MCP servers: bench/_mcp_raw_server.py's HOSTILE ways (garbage on stdout, a wrong id, a
  malformed result, a sampling request, exiting, hanging, control characters, deep nesting),
  each followed by an ordinary call;
- hostile model streams: the loopback Messages API cut mid-stream (clean EOF and a broken
  chunk), an error event, bad JSON, bytes that are not UTF-8, a stall, a 500, a 529;
- notebook tools (issue 32.2-3): `cells`/`cell`/`variables` with the secret where each cut falls
  inside it, an exception type, a namespace key and a saved notebook's cell id carrying an
  instruction, a saved notebook's source and output holding the secret;
- tracing with content off (32.4): spans for failures quoting the prompt, a subagent's task;
- CLI inputs (32.8): `flue-nb run` on a missing file, a directory, non-JSON, JSON that is not a
  notebook, bytes; `history` on non-SQLite, a directory, a conversation id that is not UTF-8,
  a store with each page damaged in turn;
- budgets (32.1, bench/_adv_budgets.py): the first call, output-heavy calls, 8 parallel
  subagents, cut-off streams retried, answers naming an unpriced model, no usage reported
  (dollars and tokens), against loopback servers that bill what they served;
- deadlines (32.5, bench/_adv_providers.py): Claude and OpenAI-compatible servers silent before
  their headers or mid-stream, overloaded every time, a model call's bound over all its tries,
  a tool that swallows its cancellation and one that blocks;
- %flue serve (32.6, bench/_adv_serve.py): a real `flue.serve()` and the `mcp` client: calls at
  once in one session, many clients under one name (waiting and refused), unknown tools,
  clients disconnecting mid-call, `stop()` during a call;
- hostile OpenAI-compatible servers (32.9, 32.12, bench/_adv_providers.py): HTML and plain JSON
  200 answers, a refused loopback connection, two tool calls sharing an id, a server that
  answers `content: null` with 500, `content: null` in a delta, `finish_reason: "length"`.

    .venv/bin/python bench/adversarial.py [--quick]
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _adv import (
    CATEGORIES,
    RAW,
    SECRET,
    Counts,
    Tracebacks,
    attempt,
    bounded,
    escaped,
    no_sleep,
)
from _adv import agent as _agent
from _adv import prompts as _prompts
from _adv_budgets import budgets
from _adv_notebook import cli_inputs, notebook_tools, tracing_content
from _adv_providers import deadlines, hostile_openai
from _adv_serve import serve
from _util import Result, load_line, print_table, verdict

# --- kill storms ---------------------------------------------------------------------------------


def kill_storms(quick: bool) -> Counts:
    import test_crash
    from store import two_processes

    c = Counts("kill storms (SIGKILL + recovery; two processes)")
    reps = 1 if quick else 2
    backends: list[tuple[str, Any]] = [("sqlite", None)]
    pg_server = None
    try:
        from tests.pg import PgServer, unavailable

        if unavailable() is None:
            pg_server = PgServer().start()
            backends.append(("postgres", pg_server))
        else:
            c.notes.append(f"postgres not run: {unavailable()}")
    except Exception as exc:  # noqa: BLE001 - PostgreSQL is optional here
        c.notes.append(f"postgres not run: {exc}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for backend, pg in backends:
                for mode in test_crash.KILL_POINTS:
                    root = Path(tmp) / f"{backend}-{mode}"
                    root.mkdir()
                    for i in range(reps):
                        c.scenarios += 1
                        ended, t, exc = bounded(lambda: test_crash._repetition(mode, root, i, pg), 300)  # noqa: B023
                        if not ended:
                            c.add("hangs", f"{backend} {mode} rep {i}")
                            continue
                        if exc is not None:
                            c.add("tracebacks", f"{backend} {mode} rep {i}: {type(exc).__name__}: {exc}")
                            continue
                        c.submissions += t.submissions
                        for _ in range(t.lost):
                            c.add("lost", f"{backend} {mode} rep {i}")
                        for _ in range(t.duplicated + t.tool_reruns):
                            c.add("duplicated", f"{backend} {mode} rep {i}")
                        c.notes += [f"problem ({backend} {mode}): {p}" for p in t.problems]
            dbs = [("sqlite", os.path.join(tmp, "two.sqlite"))]
            if pg_server is not None:
                dbs.append(("postgres", pg_server.create_database()))
            for label, db in dbs:
                c.scenarios += 1
                r = two_processes(db, 20 if quick else 50)
                c.submissions += r["messages"]
                for _ in range(r["lost"]):
                    c.add("lost", f"two processes on {label}")
                for _ in range(r["duplicated"]):
                    c.add("duplicated", f"two processes on {label}")
    finally:
        if pg_server is not None:
            pg_server.destroy()
    return c


# --- secrets on every path -----------------------------------------------------------------------


def _scenario(c: Counts, name: str, build: Callable[[str], Any], run: Callable[[Any], Any]) -> None:
    """Run one secrets scenario; count the secret's copies in the store and in what was seen."""
    import flue_nb as flue
    from flue_nb.runtime.tools.mcp import close_mcp_servers

    c.scenarios += 1
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "s.sqlite")
        s = flue.init(build(name), db=db, conversation=name, settings=no_sleep())
        seen: list[str] = []
        s.observe(lambda e: seen.append(repr(e)))
        try:
            out = run(s)
            seen.append(repr(out))
        except flue.FlueError as exc:
            seen.append(str(exc) + repr(getattr(exc, "details", None)))
        except Exception as exc:  # noqa: BLE001 - counted
            c.add("tracebacks", f"{name}: {type(exc).__name__}: {exc}")
            seen.append(str(exc))
        finally:
            close_mcp_servers()
        seen += [repr(m) for m in s.history()] + [repr(sub) for sub in s.submissions()]
        blob = open(db, "rb").read() + b"".join(
            open(os.path.join(tmp, f), "rb").read() for f in os.listdir(tmp) if f.startswith("s.sqlite-")
        )
        for form in escaped(SECRET):
            if form.encode() in blob:
                c.add("leaks", f"{name}: in the store as {form[:12]}…")
            if any(form in x for x in seen):
                c.add("leaks", f"{name}: in what was shown or returned as {form[:12]}…")


def secrets(quick: bool) -> Counts:
    import flue_nb as flue
    from flue_nb.models import ScriptedModel, reply, tool_call
    from flue_nb.runtime.providers.anthropic import AnthropicModel
    from tests.anthropic_server import AnthropicServer, error

    c = Counts("secrets on every path")
    os.environ["ADV_SERVICE_API_KEY"] = SECRET  # a secret by its name, as a user's key would be

    @flue.tool
    def leaky() -> str:
        """Return the service key (a careless tool)."""
        return f"key={os.environ['ADV_SERVICE_API_KEY']}"

    @flue.tool
    def raising() -> str:
        """Fail quoting the key."""
        raise RuntimeError(f"auth failed with {os.environ['ADV_SERVICE_API_KEY']!r}")

    def agent(model: Any, extra: Callable[[], None] | None = None, fail: bool = False) -> Callable[[str], Any]:
        def build(name: str) -> Any:
            @flue.agent(name=f"adv_{name}")
            def a() -> str:
                flue.use_model(model)
                flue.use_tool(leaky)
                flue.use_tool(raising)
                if extra is not None:
                    extra()
                if fail:
                    raise ValueError(f"bad config {os.environ['ADV_SERVICE_API_KEY']}")
                return "adversarial"

            return a

        return build

    _scenario(
        c, "tool_result", agent(ScriptedModel([reply("", tool_call("leaky")), reply("ok")])), lambda s: s.prompt("go")
    )
    _scenario(
        c, "tool_error", agent(ScriptedModel([reply("", tool_call("raising")), reply("ok")])), lambda s: s.prompt("go")
    )
    _scenario(c, "agent_error", agent(ScriptedModel(["never"]), fail=True), lambda s: s.prompt("go"))
    stderr_cmd = ["sh", "-c", 'printf "starting with %s\\n" "$LOCAL_TOKEN_VALUE" >&2; exit 1']
    _scenario(
        c,
        "mcp_stderr",
        agent(
            ScriptedModel(["never"]), lambda: flue.use_mcp("bad", command=stderr_cmd, env={"LOCAL_TOKEN_VALUE": SECRET})
        ),
        lambda s: s.prompt("go"),
    )
    echo = ScriptedModel([reply("", tool_call("mcp__raw__env", name="UPSTREAM_SECRET")), reply("ok")])
    _scenario(
        c,
        "mcp_env_value",
        agent(echo, lambda: flue.use_mcp("raw", command=RAW, env={"UPSTREAM_SECRET": SECRET})),
        lambda s: s.prompt("go"),
    )
    _subagent_answer(c)
    with AnthropicServer() as server:
        for _ in range(8):
            server.enqueue(error(401, "authentication_error", f"invalid x-api-key: {SECRET}"))
        model = AnthropicModel("claude-sonnet-4-6", api_key=SECRET, base_url=server.url)
        _scenario(c, "provider_401_body", agent(model), lambda s: s.prompt("go"))
        sent = json.dumps([r.body for r in server.requests])
        if SECRET in sent:
            c.add("leaks", "provider_401_body: in a request body")
    del os.environ["ADV_SERVICE_API_KEY"]
    return c


def _subagent_answer(c: Counts) -> None:
    """A subagent quoting the key in its answer: the answer is the parent's `task` result, so it
    must reach neither the store nor the parent's model. (The subagent's own live text is its
    model's words, shown as the top-level model's are: not counted.)"""
    import flue_nb as flue
    from flue_nb.models import ScriptedModel, reply, tool_call
    from flue_nb.runtime.messages import ToolResultMessage

    c.scenarios += 1
    kid_model = ScriptedModel([f"The key is {SECRET}."])
    kid = flue.define_subagent("kid", "Finds things", agent=_agent("adv_kid", kid_model))
    parent_model = ScriptedModel([reply("", tool_call("task", prompt="find the key", agent="kid")), reply("ok")])

    @flue.agent(name="adv_subagent_answer")
    def parent() -> str:
        flue.use_model(parent_model)
        flue.use_subagent(kid)
        return "adversarial"

    with tempfile.TemporaryDirectory() as tmp:
        s = flue.init(parent, db=os.path.join(tmp, "s.sqlite"), settings=no_sleep())
        if not attempt(c, "subagent_answer", s, lambda: s.prompt("go"), 60):
            return
        given = [m.content for r in parent_model.requests for m in r.messages if isinstance(m, ToolResultMessage)]
        c.notes.append(
            f"subagent_answer: the parent's model was given {given[-1][:60]!r}"
            if given
            else "subagent_answer: no task result"
        )
        blob = b"".join(open(os.path.join(tmp, f), "rb").read() for f in os.listdir(tmp))
        for form in escaped(SECRET):
            if form.encode() in blob:
                c.add("leaks", f"subagent_answer: in the store as {form[:12]}…")
            if any(form in g for g in given):
                c.add("leaks", f"subagent_answer: in the parent model's task result as {form[:12]}…")


# --- hostile MCP servers -------------------------------------------------------------------------


def hostile_mcp(quick: bool) -> Counts:
    from _mcp_raw_server import HOSTILE

    import flue_nb as flue
    from flue_nb.models import ScriptedModel, reply, tool_call
    from flue_nb.runtime.messages import ToolResultMessage
    from flue_nb.runtime.tools.mcp import close_mcp_servers

    c = Counts("hostile MCP servers")
    for how in HOSTILE:
        c.scenarios += 1
        model = ScriptedModel(
            [
                reply("", tool_call("mcp__raw__hostile", how=how)),
                reply("", tool_call("mcp__raw__echo", text="after")),
                reply("done"),
            ]
        )

        s = flue.init(_agent(f"hostile_{how}", model, mcp=True), db=":memory:", settings=no_sleep())
        if not attempt(c, how, s, lambda: s.prompt("go"), 60):  # noqa: B023
            continue
        if len(model.requests) >= 2:
            [first] = [m for m in model.requests[1].messages if isinstance(m, ToolResultMessage)][-1:]
            c.notes.append(f"{how}: {'error' if first.is_error else 'ok'}: {first.content.splitlines()[0][:90]!r}")
        last = [m for m in model.requests[-1].messages if isinstance(m, ToolResultMessage)] if model.requests else []
        if len(model.requests) == 3 and last and last[-1].content != "after":
            c.notes.append(f"{how}: the next call answered {last[-1].content[:80]!r}")
        close_mcp_servers()
    return c


# --- hostile model streams -----------------------------------------------------------------------


def hostile_streams(quick: bool) -> Counts:
    import flue_nb as flue
    from flue_nb.runtime.providers.anthropic import AnthropicModel
    from tests.anthropic_server import AnthropicServer, error, stream, text

    c = Counts("hostile model streams")
    bad = {
        "cut (clean EOF)": [stream(text("half"), cut_after=4, cut_mode="eof")],
        "cut (broken chunk)": [stream(text("half"), cut_after=4, cut_mode="chunk")],
        "error event": [stream(text("half"), error_after=4)],
        "bad JSON": [stream(text("x"), raw_before={3: b"event: content_block_delta\ndata: {not json\n\n"})],
        "not UTF-8": [stream(text("x"), raw_before={3: b"event: content_block_delta\ndata: \xff\xfe\n\n"})],
        "stall": [stream(text("half"), stall_after=4, stall_seconds=5.0)],
        "500": [error(500, "api_error", "boom")],
        "529": [error(529, "overloaded_error", "overloaded")],
    }
    for name, replies in bad.items():
        c.scenarios += 1
        with AnthropicServer() as server:
            for _ in range(4):  # the provider retries transient faults; then it answers
                server.enqueue(*replies)
            server.enqueue(stream(text("fine")), stream(text("fine again")))
            model = AnthropicModel("claude-sonnet-4-6", api_key="test", base_url=server.url, idle_timeout=1.0)

            s = flue.init(_agent("hostile_stream", model), db=":memory:", settings=no_sleep())
            if not attempt(c, name, s, lambda: _prompts(s, "one", "two"), 120):  # noqa: B023
                continue
            c.notes.append(f"{name}: {[sub.outcome for sub in s.submissions()]}, {len(server.requests)} requests")
            if len(s.submissions()) != 2:
                c.add("lost", f"{name}: {len(s.submissions())} submissions for 2 prompts")
    return c


GROUPS = [
    kill_storms,
    secrets,
    hostile_mcp,
    hostile_streams,
    notebook_tools,
    tracing_content,
    cli_inputs,
    budgets,
    deadlines,
    serve,
    hostile_openai,
]


def run(quick: bool = False) -> list[Result]:
    """Every group in turn; a row per group (the categories it checks), and one for all."""
    tracebacks = Tracebacks()
    logging.getLogger().addHandler(tracebacks)
    rows = []
    total = dict.fromkeys(CATEGORIES, 0)
    try:
        for group in GROUPS:
            start = len(tracebacks.records)
            started = time.monotonic()
            c = group(quick)
            for record in tracebacks.records[start:]:
                c.add("tracebacks", f"logged: {record.getMessage()[:120]}")
            for note in c.notes:
                print(f"  [{c.name}] {note}")
            if c.submissions:
                print(f"  [{c.name}] {c.submissions} submissions checked")
            for k in CATEGORIES:
                total[k] += c.n[k]
            rows.append(
                Result(
                    "adversarial",
                    f"{c.name} ({c.scenarios} scenarios, {time.monotonic() - started:.0f} s)",
                    ", ".join(f"{c.n[k]} {k}" for k in c.shown()),
                    "all 0",
                    verdict(not any(c.n.values())),
                )
            )
    finally:
        logging.getLogger().removeHandler(tracebacks)
    rows.append(
        Result(
            "adversarial",
            "all",
            ", ".join(f"{total[k]} {k}" for k in CATEGORIES),
            "all 0",
            verdict(not any(total.values())),
        )
    )
    return rows


def main() -> None:
    print(load_line())
    print_table(run("--quick" in sys.argv))


if __name__ == "__main__":
    main()
