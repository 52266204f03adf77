"""The live document against a real Jupyter server with jupyter-collaboration (issue 21.4, 21.7).

The server (`live_server.py`) runs on loopback with a token and temporary dirs; the notebook is
opened the way a front end opens it, so its kernel finds the server by itself (runtime-dir file,
connection file, sessions API). What the kernel writes is read back by a SEPARATE client —
`jupyter-nbmodel-client`, another implementation of the same protocol — and a raw Y awareness
peer, as a second browser tab would see it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from live_server import LiveServer, live_python

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(1200)]  # the first run builds .venv-live


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # Its kernels inherit a proxy that refuses everything: talking to their own server must not use it.
    dead_proxy = "http://127.0.0.1:9"
    proxies = {"HTTP_PROXY": dead_proxy, "HTTPS_PROXY": dead_proxy, "ALL_PROXY": dead_proxy, "NO_PROXY": ""}
    srv = LiveServer(live_python(), tmp_path_factory.mktemp("live"), env=proxies)
    yield srv
    srv.stop()


@pytest.fixture
def opened(server, request):
    """A saved notebook opened with a kernel of the server; yields (path, kernel)."""
    path = server.notebook(f"{request.node.name[:40]}.ipynb", ["x = 41", "print(x)"])
    session = server.session(path)
    kernel = server.attach(session["kernel"]["id"])
    yield path, kernel
    kernel.shutdown()
    server.api("DELETE", f"api/sessions/{session['id']}")


def _peer_cells(server: LiveServer, path: str) -> list[dict[str, Any]]:
    """The document's cells as another client of the room reads them."""
    from jupyter_nbmodel_client import NbModelClient, get_jupyter_notebook_websocket_url

    async def read() -> list[dict[str, Any]]:
        url = get_jupyter_notebook_websocket_url(server_url=server.url, token=server.token, path=path, timeout=10)
        async with NbModelClient(url, timeout=10) as nb:
            await asyncio.wait_for(nb.wait_until_synced(), 10)
            return [dict(nb[i]) for i in range(len(nb))]

    return asyncio.run(read())


def _peer_awareness(server: LiveServer, path: str | None, wait: float = 15.0) -> list[dict[str, Any]]:
    """The awareness states a newly joined peer receives within `wait` seconds: of the notebook
    `path`'s room, or (None) of the presence room JupyterLab's collaborators panel lists."""
    from jupyter_nbmodel_client import get_jupyter_notebook_websocket_url
    from pycrdt import Awareness, Doc, YMessageType, create_awareness_message, create_sync_message, read_message
    from websockets.asyncio.client import connect

    async def listen() -> list[dict[str, Any]]:
        if path is None:
            url = (
                server.url.replace("http", "ws", 1)
                + f"api/collaboration/room/JupyterLab:globalAwareness?token={server.token}"
            )
        else:
            url = get_jupyter_notebook_websocket_url(server_url=server.url, token=server.token, path=path, timeout=10)
        doc: Doc[Any] = Doc()
        awareness = Awareness(doc)
        awareness.set_local_state_field("user", {"name": "second tab"})
        async with connect(url) as ws:
            await ws.send(create_sync_message(doc))
            await ws.send(create_awareness_message(awareness.encode_awareness_update([awareness.client_id])))
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    msg = await asyncio.wait_for(ws.recv(), deadline - time.monotonic())
                except asyncio.TimeoutError:
                    break
                if isinstance(msg, bytes) and msg[0] == YMessageType.AWARENESS:
                    awareness.apply_awareness_update(read_message(msg[1:]), "remote")
                    others = [s for c, s in awareness.states.items() if c != awareness.client_id and s]
                    if others:
                        return others
        return []

    return asyncio.run(listen())


CONNECT = """
import asyncio, time
from flue_nb.notebook.document import live
from flue_nb.notebook.document.protocol import DocumentError
t0 = time.monotonic()
doc = live.connect(timeout={timeout})
print("connect", doc is not None, round(time.monotonic() - t0, 2), live.reason())
"""


def test_edits_from_the_kernel_are_seen_by_a_separate_client(server, opened):
    path, kernel = opened
    run = kernel.ok(CONNECT.format(timeout=10))
    assert "connect True" in run.stdout, run.all_text()
    assert float(run.stdout.split()[2]) < 10
    run = kernel.ok(
        """
flue = {"conversation": "conv-1", "submission": "sub-1", "tool_call_id": "call-7"}
cells = await doc.cells()
print([c.source for c in cells])
first, second = cells[0].id, cells[1].id
new = await doc.insert_cell("y = x + 1\\ny", after=first, metadata={"flue": flue})
note = await doc.insert_cell("## The end", kind="markdown", metadata={"flue": flue})
old = await doc.edit_cell(second, "print(x + 1)", metadata={"flue": {**flue, "tool_call_id": "call-8"}})
await doc.write_outputs(new, [
    {"output_type": "stream", "name": "stdout", "text": "computing\\n"},
    {"output_type": "execute_result", "execution_count": 3, "data": {"text/plain": "42"}, "metadata": {}},
], 3)
print("old", repr(old), "ids", new, note, doc.path, doc.live)
"""
    )
    assert "['x = 41', 'print(x)']" in run.stdout, run.all_text()
    assert "old 'print(x)'" in run.stdout
    assert f"{path} True" in run.stdout
    new_id, note_id = run.stdout.split("ids ")[1].split()[:2]

    cells = _peer_cells(server, path)
    assert [c["source"] for c in cells] == ["x = 41", "y = x + 1\ny", "print(x + 1)", "## The end"]
    assert [c["id"] for c in cells][1] == new_id and cells[3]["id"] == note_id
    assert [c["cell_type"] for c in cells] == ["code", "code", "code", "markdown"]
    run_cell = cells[1]
    assert run_cell["execution_count"] == 3
    assert [o["output_type"] for o in run_cell["outputs"]] == ["stream", "execute_result"]
    assert run_cell["outputs"][0]["text"] == "computing\n"
    assert run_cell["outputs"][1]["data"] == {"text/plain": "42"}
    assert run_cell["metadata"]["flue"] == {"conversation": "conv-1", "submission": "sub-1", "tool_call_id": "call-7"}
    assert cells[2]["metadata"]["flue"]["tool_call_id"] == "call-8"
    assert cells[3]["metadata"]["flue"]["submission"] == "sub-1"
    assert "flue" not in cells[0]["metadata"]  # untouched cells keep their metadata

    # The agent shows as a collaborator to a view that joins now.
    users = [s.get("user", {}) for s in _peer_awareness(server, path)]
    assert any(u.get("name") == "flue agent" for u in users), users
    # And in the presence room, whose awareness the collaborators panel lists, on this notebook.
    states = _peer_awareness(server, None)
    here = {"current": f"notebook:{path}", "documents": [path], "display_name": "flue agent"}
    seen = [{**s, "display_name": s.get("user", {}).get("display_name")} for s in states]
    assert any(all(s.get(k) == v for k, v in here.items()) for s in seen), states

    # And the server saves what every view shows (its save delay is ~1 s).
    saved: dict[str, Any] = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        saved = json.loads((server.nb / path).read_text())
        if len(saved["cells"]) == 4:
            break
        time.sleep(0.3)
    assert "".join(saved["cells"][1]["source"]) == "y = x + 1\ny"


def _peer_types(server: LiveServer, path: str, index: int, source: str) -> None:
    """Another view of the room (the user's tab) sets cell `index`'s source."""
    from jupyter_nbmodel_client import NbModelClient, get_jupyter_notebook_websocket_url

    async def edit() -> None:
        url = get_jupyter_notebook_websocket_url(server_url=server.url, token=server.token, path=path, timeout=10)
        async with NbModelClient(url, timeout=10) as nb:
            await asyncio.wait_for(nb.wait_until_synced(), 10)
            nb.set_cell_source(index, source)

    asyncio.run(edit())


def test_delete_and_move_go_through_the_room_and_delete_is_a_compare_and_set(server, opened):
    # Issue 35.5: delete_cell and move_cell on the collaboration path, the delete refused when
    # the cell changed since the agent read it, as on the front-end path.
    path, kernel = opened
    kernel.ok(CONNECT.format(timeout=10))
    run = kernel.ok(
        """
cells = await doc.cells()
a, b = cells[0].id, cells[1].id
c = await doc.insert_cell("z = 3")
await doc.write_outputs(a, [{"output_type": "stream", "name": "stdout", "text": "41\\n"}], 7)
print("moves", await doc.move_cell(c, after=None), await doc.move_cell(a, after=b), await doc.move_cell(b, after=c))
print("ids", a, b, c)
"""
    )
    assert "moves (2, 0) (1, 2) (1, 1)" in run.stdout, run.all_text()
    a, b, c = run.stdout.split("ids ")[1].split()[:3]
    cells = _peer_cells(server, path)
    assert [(x["id"], x["source"]) for x in cells] == [(c, "z = 3"), (b, "print(x)"), (a, "x = 41")]
    moved = cells[2]  # moved as a copy holding everything it had
    assert moved["execution_count"] == 7 and moved["outputs"][0]["text"] == "41\n"

    _peer_types(server, path, 1, "print(x)  # mine")
    run = kernel.ok(
        f"""
import time
from flue_nb.notebook.document.protocol import CellChanged
deadline = time.monotonic() + 15
while time.monotonic() < deadline and [x.source for x in await doc.cells()][1] != "print(x)  # mine":
    await asyncio.sleep(0.1)  # until the user's change has reached the kernel's copy of the room
try:
    await doc.delete_cell("{b}", expected="print(x)")
except CellChanged as exc:
    print("refused", repr(exc.current))
index, gone = await doc.delete_cell("{c}", expected="z = 3")
print("deleted", index, gone["source"], gone["id"] == "{c}")
"""
    )
    assert "refused 'print(x)  # mine'" in run.stdout, run.all_text()
    assert "deleted 0 z = 3 True" in run.stdout, run.all_text()
    assert [x["source"] for x in _peer_cells(server, path)] == ["print(x)  # mine", "x = 41"]


def test_a_missing_cell_is_a_document_error_the_model_can_act_on(server, opened):
    _, kernel = opened
    kernel.ok(CONNECT.format(timeout=10))
    run = kernel.ok(
        """
for call in (doc.edit_cell("nope", "1"), doc.insert_cell("1", after="nope"), doc.write_outputs("nope", [], 1)):
    try:
        await call
    except DocumentError as exc:
        print("error:", exc)
md = await doc.insert_cell("text", kind="markdown")
try:
    await doc.write_outputs(md, [], 1)
except DocumentError as exc:
    print("error:", exc)
"""
    )
    errors = [line for line in run.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 4, run.all_text()
    assert all("call `cells`" in e for e in errors[:3])
    assert "markdown cell" in errors[3]


def test_a_lost_connection_is_reopened_once(server, opened):
    path, kernel = opened
    kernel.ok(CONNECT.format(timeout=10))
    # Drop the socket under the document, as a network blip or a proxy timeout would.
    kernel.ok(
        "from flue_nb.notebook.document.live_document import _live_loop\n"
        "await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(doc._room._ws.close(), _live_loop()))"
    )
    run = kernel.ok('first = (await doc.cells())[0].id\nprint(await doc.edit_cell(first, "x = 1"))')
    assert "x = 41" in run.stdout, run.all_text()
    assert _peer_cells(server, path)[0]["source"] == "x = 1"
    # Parallel tool calls on a dropped socket: one reopening, each edit confirmed and made once.
    kernel.ok(
        "from flue_nb.notebook.document.live_document import _live_loop\n"
        "await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(doc._room._ws.close(), _live_loop()))"
    )
    kernel.ok('await asyncio.gather(*(doc.insert_cell(f"n = {i}") for i in range(4)), doc.edit_cell(first, "x = 3"))')
    sources = [c["source"] for c in _peer_cells(server, path)]
    assert sources[0] == "x = 3" and sorted(sources[2:]) == [f"n = {i}" for i in range(4)], sources


def test_a_server_that_stops_answering_gives_a_bounded_document_error(server, opened):
    path, kernel = opened
    kernel.ok(CONNECT.format(timeout=10))
    kernel.ok("doc.timeout = 1.0\nfirst = (await doc.cells())[0].id")
    server.pause()
    try:
        run = kernel.ok(
            """
t0 = time.monotonic()
try:
    await doc.edit_cell(first, "x = 2")
    print("no error")
except DocumentError as exc:
    print("error:", exc)
print("took", round(time.monotonic() - t0, 2))
""",
            timeout=60,
        )
    finally:
        server.resume()
    assert "error:" in run.stdout, run.all_text()
    assert "did not confirm the edit" in run.stdout
    assert "check with `cells`" in run.stdout  # it may land later: the model is told so
    assert float(run.stdout.split("took ")[1]) < 6  # 1 s answer, 1 s reopen, never the 4 s budget cap
    # Once the server answers again the document works again.
    run = kernel.ok("print(len(await doc.cells()))")
    assert run.stdout.strip() in ("2",), run.all_text()


def test_connect_returns_the_open_document_again(server, opened):
    _, kernel = opened
    kernel.ok(CONNECT.format(timeout=10))
    run = kernel.ok("print(live.connect(timeout=10) is doc)\nawait doc.close()\nprint(live.connect(timeout=10) is doc)")
    assert run.stdout.split() == ["True", "False"], run.all_text()


def test_without_collaboration_connect_is_none_and_says_why(tmp_path):
    # Lab or Notebook 7 without jupyter-collaboration: the kernel finds the server and the notebook,
    # the server has no room for it, and connect() says so instead of raising.
    srv = LiveServer(live_python(), tmp_path, extra=("--ServerApp.jpserver_extensions=jupyter_server_ydoc=False",))
    try:
        session = srv.session(srv.notebook("plain.ipynb", ["1"]))
        kernel = srv.attach(session["kernel"]["id"])
        try:
            run = kernel.ok(CONNECT.format(timeout=5))
        finally:
            kernel.shutdown()
    finally:
        srv.stop()
    assert "connect False" in run.stdout, run.all_text()
    assert float(run.stdout.split()[2]) < 5
    assert "no real-time collaboration for 'plain.ipynb'" in run.stdout


def test_a_served_kernel_loads_the_live_document_in_the_warm_up(opened):
    # Issue 33.10: the first `cells` call took 6-9 s importing it (nbformat -> jsonschema -> ...)
    # while the model waited; the extension's background warm-up imports it once the kernel
    # finds a server announced in its runtime dir (bench/first_cells.py times that call).
    _path, kernel = opened
    kernel.ok("%load_ext flue_nb")
    out = kernel.ok(
        "import sys\nfrom flue_nb.notebook.magics import _warm\nfor t in _warm._started:\n    t.join(200)\n"
        "print([t.is_alive() for t in _warm._started], 'flue_nb.notebook.document.live_document' in sys.modules)",
        timeout=240,
    ).stdout
    assert out.split() == ["[False]", "True"], out


AGENT = r"""
import re
import flue_nb as flue
from flue_nb.models import FunctionModel, reply, tool_call

def brain(req):
    results = [m for m in req.messages if m.kind == "tool_result"]
    if not results:
        return reply("Reading the notebook.", tool_call("cells", order="document"))
    last = results[-1]
    if last.name == "cells":
        first, second = re.findall(r"\d+\. id=(\S+)", last.content)[:2]
        return reply("", tool_call("insert_cell", source="z = x * 2\nz", after=first),
                     tool_call("edit_cell", id=second, source="print(x + 1)"))
    if last.name == "edit_cell":
        new = re.search(r"Inserted code cell (\S+)", results[-2].content).group(1)
        return reply("", tool_call("run_cell", id=new))
    return reply("Done.")

@flue.agent
def writer():
    flue.use_model(FunctionModel(brain))
    flue.use_sandbox(flue.kernel(approval="allow"))
    return "Work in the notebook."
"""


def test_the_notebook_tools_write_through_the_live_document(server, opened):
    # The tools themselves (insert_cell, edit_cell, run_cell) in a %%flue cell: what they did is
    # what a separate client of the room reads, provenance included.
    path, kernel = opened
    kernel.ok("%load_ext flue_nb")
    kernel.ok("x = 41")
    kernel.ok(AGENT)
    run = kernel.ok("%%flue --agent writer -c livetools\nput a cell in and run it", timeout=120)
    cells = _peer_cells(server, path)
    assert [c["source"] for c in cells] == ["x = 41", "z = x * 2\nz", "print(x + 1)"], run.all_text()
    inserted, edited = cells[1], cells[2]
    assert inserted["execution_count"] is not None
    assert any(o.get("data", {}).get("text/plain") == "82" for o in inserted["outputs"]), inserted["outputs"]
    for cell in (inserted, edited):
        flue_meta = cell["metadata"]["flue"]
        assert flue_meta["conversation"] == "livetools"
        assert flue_meta["submission"] and flue_meta["tool_call_id"]
    assert inserted["metadata"]["flue"]["tool_call_id"] != edited["metadata"]["flue"]["tool_call_id"]


REVISER = r"""
import re
import flue_nb as flue
from flue_nb.models import FunctionModel, reply, tool_call

def revise(req):
    results = [m for m in req.messages if m.kind == "tool_result"]
    if not results:
        return reply("Reading the notebook.", tool_call("cells", order="document"))
    if results[-1].name == "cells":
        second = re.findall(r"\d+\. id=(\S+)", results[-1].content)[1]
        return reply("", tool_call("edit_cell", id=second, source="print(x * 100)"))
    return reply("Changed the print.")

@flue.agent
def reviser():
    flue.use_model(FunctionModel(revise))
    flue.use_sandbox(flue.kernel(approval="allow"))
    return "Work in the notebook."
"""

TYPE_IN = """
from flue_nb.notebook.document import live
doc = live.connect(timeout=10)
cells = await doc.cells()
await doc.edit_cell(cells[1].id, {source!r})
"""


def test_an_edited_cell_is_undone_in_the_live_document(server, opened):
    # Issue 34.2/34.8: `%flue undo` of the agent's edit_cell puts the old source back through
    # the room (a separate client of it reads the old source); typed over since, the undo
    # refuses and changes nothing.
    path, kernel = opened
    kernel.ok("%load_ext flue_nb")
    kernel.ok("x = 41")
    kernel.ok(REVISER)
    run = kernel.ok("%%flue --agent reviser -c liveundo\nchange the print", timeout=120)
    assert [c["source"] for c in _peer_cells(server, path)] == ["x = 41", "print(x * 100)"], run.all_text()
    listed = kernel.ok("%flue changes -c liveundo").stdout
    assert "2.1 edit_cell: cell " in listed and f"edited in {path}" in listed, listed

    kernel.ok(TYPE_IN.format(source="print(x * 100)  # mine"))  # the user typed in the cell since
    refused = kernel.ok("%flue undo 2.1 -c liveundo").stdout
    assert "Nothing was changed" in refused and "changed again since" in refused, refused
    assert [c["source"] for c in _peer_cells(server, path)][1] == "print(x * 100)  # mine"

    kernel.ok(TYPE_IN.format(source="print(x * 100)"))  # typed back
    undone = kernel.ok("%flue undo 2.1 -c liveundo").stdout
    assert "Undone 1 item" in undone and "— in the live (collaborative) notebook" in undone, undone
    assert [c["source"] for c in _peer_cells(server, path)] == ["x = 41", "print(x)"]
    again = kernel.ok("%flue changes -c liveundo").stdout
    assert "[undone]" in again, again


WITHOUT_THE_EXTRA = """
import sys, threading
for thread in threading.enumerate():
    if thread.name == "flue-warmup":
        thread.join(60)
for name in [m for m in sys.modules if m.split(".")[0] in ("pycrdt", "jupyter_ydoc")
             or m in ("flue_nb.notebook.document.live_document", "flue_nb.notebook.document._room")]:
    del sys.modules[name]
sys.modules["pycrdt"] = None
"""


def test_without_the_extra_connect_is_none_and_says_how_to_get_it(server, opened):
    # The server has collaboration, the kernel lacks flue_nb[live] (pycrdt cannot be imported).
    # The warm-up imports the live document in the background when the extra is there (this
    # kernel has it): wait for it, then forget what it imported, as a kernel without it never had it.
    path, kernel = opened
    run = kernel.ok(WITHOUT_THE_EXTRA + CONNECT.format(timeout=5))
    assert "connect False" in run.stdout, run.all_text()
    assert f"runs this kernel's notebook {path!r}" in run.stdout
    assert "pip install 'flue_nb[live]'" in run.stdout


MOVER = r"""
import re
import flue_nb as flue
from flue_nb.models import FunctionModel, reply, tool_call

def mover_brain(req):
    results = [m for m in req.messages if m.kind == "tool_result"]
    if not results:
        return reply("Reading the notebook.", tool_call("cells", order="document"))
    first, second = re.findall(r"\d+\. id=(\S+)", results[0].content)[:2]
    if len(results) == 1:
        return reply("", tool_call("move_cell", id=second))
    if len(results) == 2:
        return reply("", tool_call("delete_cell", id=first))
    return reply("Done.")

mover_model = FunctionModel(mover_brain)

@flue.agent
def mover():
    flue.use_model(mover_model)
    flue.use_sandbox(flue.kernel(approval="allow"))
    return "Tidy the notebook."
"""


def test_move_cell_and_delete_cell_tools_write_through_the_live_document(server, opened):
    # The tools on the collaboration path (issue 35.5): what they did is what another view reads.
    path, kernel = opened
    kernel.ok("%load_ext flue_nb")
    kernel.ok(MOVER)
    kernel.ok("%%flue --agent mover -c livemove\nmove the print up, drop the first cell", timeout=120)
    results = kernel.ok(
        "print([m.content.splitlines()[0] for r in mover_model.requests[-1:] for m in r.messages if m.kind == 'tool_result'])"
    ).stdout
    assert "Moved cell" in results and "in the live (collaborative) notebook" in results, results
    assert "Deleted cell 2 of" in results, results
    assert [c["source"] for c in _peer_cells(server, path)] == ["print(x)"]
