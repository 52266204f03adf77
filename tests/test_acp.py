"""`flue-nb acp` driven as a subprocess by the ACP package's own client side (`acp.connect_to_agent`
through `spawn_agent_process`), against an offline model: initialize, new and loaded sessions,
streamed text, thinking and tool calls, permission requests answered both ways, cancel."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

acp = pytest.importorskip("acp")

from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block  # noqa: E402
from acp_client import TRANSPORT, Client  # noqa: E402

TESTS = Path(__file__).parent


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "FLUE_MODEL", "FLUE_DB")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return env


def _subs(tmp_path: Path, sid: str) -> list[tuple[str, str | None, str]]:
    """(text, outcome, state) of each submission of conversation `sid` in the test's store."""
    from flue_nb.runtime.session import open_conversation

    stored = open_conversation(sid, db=str(tmp_path / "flue.sqlite"))
    return [(s.text, s.outcome.value if s.outcome else None, s.state.value) for s in stored.submissions()]


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


def _agent(client: Client, tmp_path: Path, *extra: str) -> Any:
    args = ["-m", "flue_nb.cli", "acp", "--model", "acp_models:model", "--db", str(tmp_path / "flue.sqlite"), *extra]
    return spawn_agent_process(client, sys.executable, *args, env=_env(), cwd=tmp_path, transport_kwargs=TRANSPORT)


async def _start(conn: Any, tmp_path: Path) -> str:
    init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
    assert init.protocol_version == PROTOCOL_VERSION
    assert init.agent_capabilities.load_session is True
    assert init.agent_info.name == "flue_nb"
    return str((await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id)


def test_a_prompt_streams_thinking_and_text_and_is_stored(tmp_path):
    client = Client()

    async def main() -> tuple[str, Any]:
        async with _agent(client, tmp_path) as (conn, _proc):
            sid = await _start(conn, tmp_path)
            done = await conn.prompt(session_id=sid, prompt=[text_block("hello")])
            return sid, done

    sid, done = _run(main())
    assert done.stop_reason == "end_turn"
    assert client.text("agent_thought_chunk") == "A greeting; answer briefly."
    assert client.text() == "Hi there."
    assert {s for s, _ in client.updates} == {sid}
    # The session is a flue_nb conversation of the same id, durable in the store.
    assert _subs(tmp_path, sid) == [("hello", "completed", "settled")]


@pytest.mark.parametrize(("answer", "written"), [("approve", True), ("reject", False)])
def test_a_tool_call_asks_permission_and_the_answer_decides(tmp_path, answer, written):
    client = Client(answer)

    async def main() -> Any:
        async with _agent(client, tmp_path) as (conn, _proc):
            sid = await _start(conn, tmp_path)
            return await conn.prompt(session_id=sid, prompt=[text_block("please write a note")])

    done = _run(main())
    assert done.stop_reason == "end_turn"
    [(call, options)] = client.asked
    assert call.kind == "edit" and call.title.startswith("write: ")
    assert [loc.path for loc in call.locations] == [str(tmp_path / "note.txt")]
    assert options[0] == "approve" and "reject" in options
    starts = [u for _, u in client.updates if u.session_update == "tool_call"]
    ends = [u for _, u in client.updates if u.session_update == "tool_call_update"]
    assert [(u.kind, u.title, u.status) for u in starts] == [("edit", "write: note.txt", "in_progress")]
    assert [loc.path for loc in starts[0].locations] == [str(tmp_path / "note.txt")]
    [end] = ends
    assert end.tool_call_id == starts[0].tool_call_id
    assert end.status == ("completed" if written else "failed")
    assert end.raw_output["approval"]["reason"] == ("approved" if written else "declined")
    assert (tmp_path / "note.txt").exists() is written
    assert client.text() == "Writing it.\n\n" + ("Wrote note.txt." if written else "Refused, so nothing was written.")


def test_cancel_aborts_the_running_prompt(tmp_path):
    client = Client()

    async def main() -> tuple[str, Any]:
        async with _agent(client, tmp_path) as (conn, _proc):
            sid = await _start(conn, tmp_path)
            running = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("wait for it")]))
            while not [s for s in _subs(tmp_path, sid) if s[2] == "running"]:  # the run has started
                await asyncio.sleep(0.05)
            await conn.cancel(session_id=sid)
            return sid, await running

    sid, done = _run(main())
    assert done.stop_reason == "cancelled"
    assert [s[1] for s in _subs(tmp_path, sid)] == ["aborted"]


def test_load_replays_a_stored_conversation_and_continues_it(tmp_path):
    first = Client()

    async def make() -> str:
        async with _agent(first, tmp_path) as (conn, _proc):
            sid = await _start(conn, tmp_path)
            await conn.prompt(session_id=sid, prompt=[text_block("hello")])
            await conn.prompt(session_id=sid, prompt=[text_block("write it down")])
            return sid

    sid = _run(make())
    again = Client()

    async def load() -> Any:
        async with _agent(again, tmp_path) as (conn, _proc):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            await conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
            replayed = list(again.kinds())
            done = await conn.prompt(session_id=sid, prompt=[text_block("hello again")])
            return replayed, done

    replayed, done = _run(load())
    assert replayed[0] == "user_message_chunk"
    assert again.text("user_message_chunk") == "hellowrite it down"
    assert "tool_call" in replayed and "tool_call_update" in replayed
    assert done.stop_reason == "end_turn"
    assert [s[0] for s in _subs(tmp_path, sid)] == ["hello", "write it down", "hello again"]


def test_unknown_sessions_are_protocol_errors(tmp_path):
    client = Client()

    async def main() -> list[str]:
        errors = []
        async with _agent(client, tmp_path) as (conn, _proc):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            for call in (
                conn.prompt(session_id="nope", prompt=[text_block("hi")]),
                conn.load_session(cwd=str(tmp_path), session_id="never-stored", mcp_servers=[]),
            ):
                with pytest.raises(RequestError) as info:
                    await call
                errors.append(str(info.value))
        return errors

    errors = _run(main())
    assert "no session 'nope'" in errors[0]
    assert "no conversation 'never-stored'" in errors[1]


def test_bad_json_and_unknown_methods_get_protocol_errors(tmp_path):
    import json
    import subprocess

    lines = [
        "this is not json",
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}),
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "no/such/method", "params": {}}),
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "session/new",
                "params": {"cwd": str(tmp_path / "gone"), "mcpServers": []},
            }
        ),
    ]
    args = ["-m", "flue_nb.cli", "acp", "--model", "acp_models:model", "--db", str(tmp_path / "flue.sqlite")]
    done = subprocess.run(
        [sys.executable, *args],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        cwd=tmp_path,
        check=False,
    )
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    by_id = {r.get("id"): r for r in replies}
    # The package skips a line that is not JSON (it answers no -32700): the connection goes on.
    assert sorted(by_id) == [1, 2, 3], replies
    assert by_id[1]["result"]["agentInfo"]["name"] == "flue_nb"
    assert by_id[2]["error"]["code"] == -32601
    assert by_id[3]["error"]["code"] == -32602 and "not a directory" in by_id[3]["error"]["message"]
    assert done.returncode == 0, done.stderr  # stdin closed: the agent ends cleanly


def test_a_client_that_disappears_mid_prompt_loses_nothing(tmp_path):
    client = Client()

    async def main() -> tuple[str, Any]:
        async with _agent(client, tmp_path) as (conn, proc):
            sid = await _start(conn, tmp_path)
            asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("wait for it")]))
            while not [s for s in _subs(tmp_path, sid) if s[2] == "running"]:
                await asyncio.sleep(0.05)
            proc.stdin.close()  # the client goes away without a word
            return sid, await asyncio.wait_for(proc.wait(), 60)

    sid, code = _run(main())
    assert code == 0
    # The message was admitted durably: it is in the store, unsettled, for whoever opens it next.
    [(text, outcome, _state)] = _subs(tmp_path, sid)
    assert (text, outcome) == ("wait for it", None)


def test_approve_for_session_keeps_a_grant_and_the_next_call_is_not_asked(tmp_path):
    client = Client("approve_for_session")

    async def main() -> list[Any]:
        async with _agent(client, tmp_path) as (conn, _proc):
            sid = await _start(conn, tmp_path)
            await conn.prompt(session_id=sid, prompt=[text_block("write a note")])
            client.updates.clear()
            await conn.prompt(session_id=sid, prompt=[text_block("write it again")])
            return [u for _, u in client.updates if u.session_update == "tool_call_update"]

    [end] = _run(main())
    assert len(client.asked) == 1  # the second call ran on the grant
    assert "approve_for_session" in client.asked[0][1]
    assert end.status == "completed" and end.raw_output["approval"]["reason"] == "allowed"


def test_an_answer_from_another_view_of_the_conversation_wins(tmp_path):
    from flue_nb.runtime.session import open_conversation
    from flue_nb.runtime.tools.ballot import answer_request, approvals

    class Silent(Client):
        async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kw: Any) -> Any:
            self.asked.append((tool_call, [o.option_id for o in options]))
            self.asked_event.set()
            await asyncio.sleep(300)  # nobody answers here

    client = Silent()

    async def main() -> Any:
        async with _agent(client, tmp_path) as (conn, _proc):
            sid = await _start(conn, tmp_path)
            running = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("write a note")]))
            await client.asked_event.wait()
            # A `%flue chat` of the same conversation, in another process, answers the store's ballot.
            store = open_conversation(sid, db=str(tmp_path / "flue.sqlite")).store
            [asked] = approvals(store.records(sid)).values()
            answer_request(store, sid, asked.seq, True)
            return await running

    done = _run(main())
    assert done.stop_reason == "end_turn"
    assert (tmp_path / "note.txt").read_text() == "hello from acp\n"
    [end] = [u for _, u in client.updates if u.session_update == "tool_call_update"]
    assert end.raw_output["approval"]["reason"] == "approved"


def test_a_failed_run_is_a_protocol_error_with_flue_nbs_message(tmp_path):
    client = Client()

    async def main() -> str:
        async with _agent(client, tmp_path) as (conn, _proc):
            sid = await _start(conn, tmp_path)
            with pytest.raises(RequestError) as info:
                await conn.prompt(session_id=sid, prompt=[text_block("please fail")])
            return str(info.value)

    assert "scripted refusal" in _run(main())


def test_an_agent_of_ones_own_asks_the_client_too(tmp_path):
    client = Client("reject")

    async def main() -> Any:
        async with _agent(client, tmp_path, "--agent", "acp_models:own_agent") as (conn, _proc):
            sid = await _start(conn, tmp_path)
            return await conn.prompt(session_id=sid, prompt=[text_block("write a note")])

    assert _run(main()).stop_reason == "end_turn"
    assert len(client.asked) == 1
    assert not (tmp_path / "note.txt").exists()
    assert client.text().endswith("Refused, so nothing was written.")


def test_the_clients_mcp_servers_are_mounted_under_the_same_approvals(tmp_path):
    from acp.schema import McpServerStdio

    client = Client()
    server = McpServerStdio(
        name="my calc", command=sys.executable, args=[str(TESTS / "runtime" / "mcp_server.py")], env=[]
    )

    async def main() -> Any:
        async with _agent(client, tmp_path) as (conn, _proc):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[server])).session_id
            return await conn.prompt(session_id=sid, prompt=[text_block("add two and three")])

    assert _run(main()).stop_reason == "end_turn"
    assert len(client.asked) == 1, client.updates  # not read-only by its hints: asked
    [(call, _options)] = client.asked
    assert call.title.startswith("mcp__my_calc__add")
    [start] = [u for _, u in client.updates if u.session_update == "tool_call"]
    assert (start.kind, start.raw_input) == ("other", {"a": 2, "b": 3})
    assert client.text() == "The sum is 5."


def test_load_opens_a_conversation_a_notebook_made(tmp_path):
    import flue_nb
    from flue_nb.models import ScriptedModel, reply

    scripted = ScriptedModel([reply("Made in a notebook.")])

    @flue_nb.agent
    def notebook_agent() -> str:
        flue_nb.use_model(scripted)
        return "A notebook's agent."

    conversation = str(tmp_path / "analysis.ipynb")  # a notebook's default conversation is its path
    made = flue_nb.init(notebook_agent, conversation=conversation, db=str(tmp_path / "flue.sqlite"), cwd=str(tmp_path))
    assert made.prompt("from the notebook", timeout=60) == "Made in a notebook."
    client = Client()

    async def load() -> None:
        async with _agent(client, tmp_path) as (conn, _proc):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            await conn.load_session(cwd=str(tmp_path), session_id=conversation, mcp_servers=[])

    _run(load())
    assert client.kinds() == ["user_message_chunk", "agent_message_chunk"]
    assert (client.text("user_message_chunk"), client.text()) == ("from the notebook", "Made in a notebook.")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--kernel", "kernel-1.json"], "--kernel kernel-1.json: no such connection file"),
        (["--notebook", "a.ipynb"], "--notebook a.ipynb: no such notebook"),
        (["--kernel", "k.json", "--agent", "acp_models:own_agent"], "--agent runs its own tools"),
        (["--kernel", "k.json", "--db", "x.sqlite"], "the kernel's own store"),
        ([], "no model: pass --model"),
        (["--model", "acp_models:nothing_here"], "nothing_here"),
    ],
)
def test_what_acp_cannot_start_with_is_one_line(tmp_path, args, said):
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "flue_nb.cli", "acp", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
        cwd=tmp_path,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert done.stdout == ""  # nothing a client would take for protocol
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("flue-nb acp: ") and said in line
