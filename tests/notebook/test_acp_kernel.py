"""`flue-nb acp --kernel FILE`, `--notebook PATH` and a session naming its kernel in `_meta`,
attached to a real kernel, driven by the ACP package's own client: the agent's `python` runs in
the kernel's namespace, the session is the conversation the kernel's `%flue` cells continue (in
the kernel's store), a `%flue chat` open in the kernel follows the ACP turn and can answer its
approval, and the kernel's server stops when the ACP process ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kernel_helpers import Kernel, chat_helpers

acp = pytest.importorskip("acp")
pytest.importorskip("anywidget", reason="the chat widget needs the `widget` extra")

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from acp_client import TRANSPORT, Client  # noqa: E402

pytestmark = pytest.mark.kernel

SETUP = """\
import json, time
import flue_nb as flue
from flue_nb.models import ScriptedModel
from flue_nb.notebook.views.chat.widget import open_widgets
own = ScriptedModel(["the kernel's own assistant answers"])
%config FlueMagics.model = 'own'
""" + chat_helpers(tries=400)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "FLUE_MODEL", "FLUE_DB")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 180))


@contextlib.asynccontextmanager
async def _acp(client: Client, cwd: Path, *args: str, **env: str) -> Any:
    command = ["-m", "flue_nb.cli", "acp", "--model", "acp_models:model", *args]
    try:
        async with spawn_agent_process(
            client, sys.executable, *command, env=_env(**env), cwd=cwd, transport_kwargs=TRANSPORT
        ) as opened:
            yield opened
    except ProcessLookupError:
        # The acp library terminates the agent on exit; an agent that already ended when its
        # stdin closed (it does, at once) makes that terminate() raise: nothing is left running.
        pass


@pytest.fixture
def notebook(tmp_path: Path) -> Iterator[tuple[Kernel, Path]]:
    """A kernel running `work/analysis.ipynb` (as a Jupyter server names it), a chat open in it."""
    work = tmp_path / "work"
    work.mkdir()
    path = work / "analysis.ipynb"
    path.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    kernel = Kernel(tmp_path / "jupyter", work, JPY_SESSION_NAME=str(path))
    try:
        kernel.ok(SETUP)
        kernel.ok("%flue chat")
        kernel.ok("w = open_widgets()[-1]")
        yield kernel, path
    finally:
        kernel.shutdown()


def _conversation(path: Path) -> str:
    from flue_nb.notebook.document.identity import default_conversation_id

    return default_conversation_id({"JPY_SESSION_NAME": str(path)})


def _stored(path: Path, sid: str) -> list[tuple[str, str | None]]:
    from flue_nb.runtime.session import open_conversation

    stored = open_conversation(sid, db=str(path.parent / ".flue" / "flue.sqlite"))
    return [(s.text, s.outcome.value if s.outcome else None) for s in stored.submissions()]


def test_a_prompt_runs_python_in_the_kernel_in_the_notebooks_own_conversation(tmp_path, notebook):
    kernel, path = notebook
    client = Client()

    async def main() -> tuple[str, Any]:
        # The ACP process runs elsewhere (tmp_path): the kernel's directory and store are used.
        async with _acp(client, tmp_path, "--kernel", kernel.km.connection_file) as (conn, _proc):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            return sid, await conn.prompt(session_id=sid, prompt=[text_block("compute it in the kernel")])

    sid, done = _run(main())
    assert done.stop_reason == "end_turn"
    # The tool ran in the kernel's own namespace.
    assert kernel.ok("print(answer)").stdout.strip() == "42"
    # The session is the notebook's conversation, durable in the kernel's store.
    assert sid == _conversation(path)
    assert _stored(path, sid) == [("compute it in the kernel", "completed")]
    # The call was put to the client as the kernel's `python`, an execute call.
    [(call, _options)] = client.asked
    assert call.kind == "execute" and call.title.startswith("python: answer = 6 * 7")
    [start] = [u for _, u in client.updates if u.session_update == "tool_call"]
    assert (start.kind, start.raw_input) == ("execute", {"code": "answer = 6 * 7\nprint(answer)"})
    assert client.text() == "Running it.\n\nThe kernel ran it: 42"  # one answer a paragraph
    # The chat open in the kernel followed the turn through the store, tool card included.
    seen = json.loads(
        kernel.ok(
            "blocks = wait_for(lambda: [b for b in w.history if b['kind'] == 'submission' and b['outcome']], 'settled')\n"
            "print(json.dumps(blocks))"
        ).stdout
    )
    [block] = seen
    assert (block["text"], block["outcome"]) == ("compute it in the kernel", "completed")
    [card] = [p for p in block["parts"] if p["kind"] == "tool"]
    assert card["name"] == "python" and card["status"] == "ok", card
    assert [p["text"] for p in block["parts"] if p["kind"] == "text"][-1] == "The kernel ran it: 42"
    # The ACP process has ended: the server the kernel started for it stopped with it.
    assert kernel.ok("from flue_nb.notebook import serve\nprint(serve.current())").stdout.strip() == "None"


def test_the_kernels_chat_answers_the_approval_the_client_leaves_open(tmp_path, notebook):
    kernel, path = notebook

    class Silent(Client):
        async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kw: Any) -> Any:
            self.asked.append((tool_call, [o.option_id for o in options]))
            self.asked_event.set()
            await asyncio.sleep(300)  # the person answers in the notebook instead

    client = Silent()

    async def main() -> Any:
        async with _acp(client, tmp_path, "--kernel", kernel.km.connection_file) as (conn, _proc):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            running = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("run it in the kernel")]))
            await client.asked_event.wait()
            # The person clicks Approve on the card of the chat open in the kernel.
            asked = await asyncio.to_thread(
                kernel.ok,
                "card = wait_for(lambda: [c for c in tool_cards(w.history + w.live) if c.get('ask')], 'asked')[0]\n"
                "assert w.answer(card['call_id'], True)\n"
                "print(json.dumps(card))",
            )
            return json.loads(asked.stdout), await running

    card, done = _run(main())
    assert card["name"] == "python" and card["ask"].startswith("python: answer = 6 * 7"), card
    assert done.stop_reason == "end_turn"
    assert kernel.ok("print(answer)").stdout.strip() == "42"
    [end] = [u for _, u in client.updates if u.session_update == "tool_call_update"]
    assert end.status == "completed" and end.raw_output["approval"]["reason"] == "approved"
    assert end.raw_output["approval"]["by"].startswith("analysis.ipynb (kernel ")


def test_stop_in_the_kernels_chat_aborts_the_acp_turn(tmp_path, notebook):
    kernel, path = notebook
    client = Client()

    async def main() -> tuple[str, Any]:
        async with _acp(client, tmp_path, "--kernel", kernel.km.connection_file) as (conn, _proc):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            running = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("wait for it")]))
            # The chat sees the turn running (through the store) and the person clicks Stop.
            await asyncio.to_thread(
                kernel.ok,
                "wait_for(lambda: [b for b in w.history + w.live if b.get('text') == 'wait for it'], 'running')\n"
                "w._on_browser_msg(w, {'type': 'stop'}, [])",
            )
            return sid, await running

    sid, done = _run(main())
    assert done.stop_reason == "cancelled"
    assert _stored(path, sid) == [("wait for it", "aborted")]


def test_stop_in_the_kernels_chat_stops_the_acp_run_whose_call_holds_the_kernel(tmp_path, notebook):
    from test_serve_stop_kernel import _holding, _stop_request

    kernel, path = notebook
    client = Client()

    async def main() -> tuple[str, str, dict[str, Any], Any]:
        async with _acp(client, tmp_path, "--kernel", kernel.km.connection_file) as (conn, _proc):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            running = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("hold the kernel")]))
            # The chat of the notebook's conversation is told the call holds the main thread, and
            # its Stop goes by the control channel, as chat.js sends it.
            held = await asyncio.to_thread(_holding, kernel, True, 150)
            reply = await asyncio.to_thread(_stop_request, kernel, {"call_id": held})
            return sid, held, reply, await running

    sid, held, reply, done = _run(main())
    assert held and reply == {"status": "ok", "stopped": True}
    assert done.stop_reason == "cancelled"
    assert _stored(path, sid) == [("hold the kernel", "aborted")]
    [end] = [u for _, u in client.updates if u.session_update == "tool_call_update"]
    assert end.status == "failed" and "Aborted in the notebook" in end.content[0].content.text


class _Sessions(BaseHTTPRequestHandler):
    """`GET /api/sessions` of a Jupyter server that runs one notebook (behind its token)."""

    sessions: list[dict[str, Any]] = []
    token = "s3cret"

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        if self.headers.get("Authorization") != f"token {self.token}" or self.path != "/api/sessions":
            self.send_response(403)
            self.end_headers()
            return
        body = json.dumps(self.sessions).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_notebook_finds_the_kernel_through_the_jupyter_servers_sessions_api(tmp_path, notebook):
    kernel, path = notebook
    runtime = Path(kernel.env["JUPYTER_RUNTIME_DIR"])
    kid = Path(kernel.km.connection_file).stem.removeprefix("kernel-")
    _Sessions.sessions = [
        {"id": "s1", "path": "other.ipynb", "type": "notebook", "kernel": {"id": "not-this-one"}},
        {"id": "s2", "path": "analysis.ipynb", "type": "notebook", "kernel": {"id": kid, "name": "python3"}},
    ]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sessions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    announce = {"url": url, "token": _Sessions.token, "pid": os.getpid(), "root_dir": str(path.parent)}
    (runtime / f"jpserver-{os.getpid()}.json").write_text(json.dumps(announce))
    client = Client()

    async def main() -> tuple[str, Any]:
        async with _acp(client, tmp_path, "--notebook", str(path), JUPYTER_RUNTIME_DIR=str(runtime)) as (conn, _p):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            return sid, await conn.prompt(session_id=sid, prompt=[text_block("work in the kernel")])

    try:
        sid, done = _run(main())
    finally:
        server.shutdown()
        server.server_close()
    assert done.stop_reason == "end_turn"
    assert kernel.ok("print(answer)").stdout.strip() == "42"
    assert sid == _conversation(path)
    assert _stored(path, sid) == [("work in the kernel", "completed")]
    # Another client loads the notebook's conversation from the kernel's store.
    again = Client()

    async def load() -> None:
        async with _acp(again, tmp_path, "--kernel", kernel.km.connection_file) as (conn, _proc):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            await conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])

    _run(load())
    assert again.text("user_message_chunk") == "work in the kernel"
    assert again.text() == "Running it.\n\nThe kernel ran it: 42"  # the replay keeps the paragraphs
    assert "tool_call" in again.kinds()


def test_a_session_names_its_kernel_in_meta_and_loads_there_too(tmp_path, notebook):
    """As jupyter-ai's flue_nb persona does: one process for every chat, each session naming its
    notebook's kernel in `_meta` (`{"flue_nb": {"kernel": CONNECTION_FILE}}`)."""
    kernel, path = notebook
    client = Client()
    named = {"kernel": kernel.km.connection_file, "notebook": "analysis.ipynb"}

    async def main() -> tuple[str, Any, str]:
        async with _acp(client, tmp_path) as (conn, _proc):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[], flue_nb=named)).session_id
            done = await conn.prompt(session_id=sid, prompt=[text_block("\n\ncompute it in the kernel")])
            # A session naming no kernel is an ordinary one, in the client's directory.
            plain = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            return sid, done, plain

    sid, done, plain = _run(main())
    assert done.stop_reason == "end_turn"
    assert kernel.ok("print(answer)").stdout.strip() == "42"
    # The notebook's own conversation, in the kernel's store; the blank lines before it dropped.
    assert sid == _conversation(path)
    assert _stored(path, sid) == [("compute it in the kernel", "completed")]
    assert plain.startswith("acp-") and plain != sid
    again = Client()

    async def load() -> None:
        async with _acp(again, tmp_path) as (conn, _proc):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            await conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[], flue_nb=named)

    _run(load())
    assert again.text().endswith("The kernel ran it: 42")


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["--agent", "acp_models:own_agent"], "runs its own tools"),
        (["--kernel", "KERNEL"], "works in the kernel it was started for"),
    ],
)
def test_a_session_cannot_name_a_kernel_the_agent_does_not_work_in(tmp_path, notebook, args, refusal):
    kernel, _path = notebook
    args = [kernel.km.connection_file if a == "KERNEL" else a for a in args]

    async def main() -> str:
        async with _acp(Client(), tmp_path, *args) as (conn, _proc):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            try:
                await conn.new_session(cwd=str(tmp_path), mcp_servers=[], flue_nb={"kernel": "elsewhere.json"})
            except acp.RequestError as exc:
                return str(exc.data or exc)
            return "accepted"

    assert refusal in _run(main())
