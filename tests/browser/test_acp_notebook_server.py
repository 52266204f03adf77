"""`flue-nb acp --notebook PATH` against a real Jupyter server (issue 38, point 1), no browser.

A JupyterLab server from `.venv-browser` (`_lab.Lab`: with a token as users have it, without one,
and with a password only) whose kernels run this venv's Python. A notebook in a folder under the
server's root is opened the way a front end opens it: `POST /api/sessions` with its path, name
and the test kernelspec. `flue-nb acp --notebook` then finds that session's kernel through the
server's own `jpserver-*.json` and sessions API: the agent's `python` runs in the server's kernel
(checked through the kernel's connection file in the server's runtime dir), and the session is
the notebook's own conversation, in its folder's store. A notebook the server has no session for
is refused at `session/new`, saying to open it first; behind a server that wants a password (so
tells no sessions to a token-less caller), saying to name the kernel's connection file instead.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _lab import Lab, server_prerequisites, write_notebook
from kernel_helpers import KERNEL_NAME, _spec_manager, jupyter_env

acp = pytest.importorskip("acp")
pytest.importorskip("anywidget", reason="the kernel's side of `flue-nb acp` needs the `widget` extra")

from acp import PROTOCOL_VERSION, text_block  # noqa: E402
from acp_client import Client  # noqa: E402
from test_acp_kernel import _acp, _conversation, _run, _stored  # noqa: E402 - the ACP harness of the kernel tests

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(1200)]

TOKEN = "s3cret-for-the-test"
PASSWORD = "a-password"


@pytest.fixture(scope="module")
def python() -> Path:
    return server_prerequisites()


@pytest.fixture
def lab(request: pytest.FixtureRequest, python: Path, tmp_path: Path) -> Iterator[Lab]:
    """A server on `tmp_path/nb`, with the token the test names (`TOKEN` unless parametrized),
    or, for `PASSWORD`, a password and no token."""
    (tmp_path / "nb").mkdir()
    _spec_manager(tmp_path)
    token, hashed = getattr(request, "param", TOKEN), ""
    if token == PASSWORD:
        code = f"from jupyter_server.auth import passwd; print(passwd({PASSWORD!r}))"
        done = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True, timeout=60)
        hashed = done.stdout.strip()
        token = ""
    server = Lab(python, tmp_path, jupyter_env(tmp_path), token=token, hashed_password=hashed)
    try:
        yield server
    finally:
        server.stop()


def _refusal(lab: Lab, path: Path, tmp_path: Path) -> acp.RequestError | str:
    """What `session/new` of `flue-nb acp --notebook path` answers, the server's runtime dir seen."""

    async def main() -> acp.RequestError | str:
        runtime = str(tmp_path / "runtime")
        async with _acp(Client(), tmp_path, "--notebook", str(path), JUPYTER_RUNTIME_DIR=runtime) as (conn, _p):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            try:
                await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            except acp.RequestError as exc:
                return exc
            return "accepted"

    return _run(main())


def _open(lab: Lab, relative: str) -> tuple[Path, dict[str, Any]]:
    """The notebook at `relative` (to the server's root) written and opened as a front end opens
    it: a session with its path and file name (the server names the kernel's `JPY_SESSION_NAME`
    from them)."""
    path = lab.root / "nb" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    write_notebook(path, ["x = 1"])
    body = {"path": relative, "name": path.name, "type": "notebook", "kernel": {"name": KERNEL_NAME}}
    with lab.open("api/sessions", body=body) as r:
        assert r.status == 201
        return path, json.loads(r.read())


def _kernel_prints(connection_file: Path, code: str) -> str:
    """What `code` prints when run in the kernel of `connection_file` (the server's own file)."""
    from jupyter_client.blocking.client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    client.start_channels()
    out: list[str] = []
    try:
        client.wait_for_ready(timeout=60)

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])

        reply = client.execute_interactive(code, output_hook=hook, timeout=60)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        client.stop_channels()
    return "".join(out)


@pytest.mark.parametrize("lab", [TOKEN, ""], ids=["token", "no-token"], indirect=True)
def test_notebook_finds_the_kernel_of_a_real_jupyter_servers_session(lab: Lab, tmp_path: Path) -> None:
    path, session = _open(lab, "work/analysis.ipynb")
    runtime = tmp_path / "runtime"
    # The server announced itself where a kernel (and `flue-nb acp`) looks for it.
    [announce] = [json.loads(f.read_text()) for f in runtime.glob("jpserver-*.json")]
    assert announce["token"] == lab.token and Path(announce["root_dir"]).resolve() == (tmp_path / "nb").resolve()
    client = Client()

    async def main() -> tuple[str, Any]:
        # The ACP process runs elsewhere (tmp_path): it knows the notebook by its path alone.
        async with _acp(client, tmp_path, "--notebook", str(path), JUPYTER_RUNTIME_DIR=str(runtime)) as (conn, _p):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            return sid, await conn.prompt(session_id=sid, prompt=[text_block("work in the kernel")])

    sid, done = _run(main())
    assert done.stop_reason == "end_turn"
    assert client.text() == "Running it.\n\nThe kernel ran it: 42"
    # The tool ran in the kernel the server runs for the notebook.
    kernel_file = runtime / f"kernel-{session['kernel']['id']}.json"
    assert _kernel_prints(kernel_file, "print(answer)").strip() == "42"
    # The session is the notebook's own conversation (the name the server gave its kernel), in the
    # store of the notebook's folder.
    assert sid == _conversation(path)
    assert _stored(path, sid) == [("work in the kernel", "completed")]


def test_a_notebook_the_server_has_no_session_for_is_refused_saying_to_open_it(lab: Lab, tmp_path: Path) -> None:
    _open(lab, "other.ipynb")
    path = lab.root / "nb" / "analysis.ipynb"
    write_notebook(path, ["x = 1"])
    refused = _refusal(lab, path, tmp_path)
    assert isinstance(refused, acp.RequestError), refused
    assert refused.code == -32603
    message = str(refused)
    assert message.startswith(f"cannot attach to the kernel: no running kernel for {path.resolve()}: "), message
    # It names what the server has open and what to do.
    assert f"{lab.url}/: open notebooks: other.ipynb" in message, message
    assert message.endswith("(open the notebook in Jupyter first)"), message


@pytest.mark.parametrize("lab", [PASSWORD], ids=["password"], indirect=True)
def test_a_server_that_wants_a_password_is_named_with_the_way_around_it(lab: Lab, tmp_path: Path) -> None:
    """A server behind a password and no token announces no token: its sessions cannot be asked,
    so opening the notebook would not help; its kernel's connection file would."""
    path = lab.root / "nb" / "analysis.ipynb"
    write_notebook(path, ["x = 1"])
    [announce] = [json.loads(f.read_text()) for f in (tmp_path / "runtime").glob("jpserver-*.json")]
    assert (announce["token"], announce["password"]) == ("", True)
    refused = _refusal(lab, path, tmp_path)
    assert isinstance(refused, acp.RequestError), refused
    message = str(refused)
    assert f"{lab.url}/: /api/sessions answered HTTP 403" in message, message
    assert message.endswith("(no server told its sessions: pass the kernel's connection file instead)"), message
