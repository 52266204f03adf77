"""The writing tools on a live document and across a crash (issue 21.4), in an in-process shell.

The live document here is a small in-memory `Document` (the real one, on a Jupyter server with
collaboration, is tested by the live-doc suite): it checks what the tools send through the
protocol — provenance metadata, the old source for undo, outputs and execution count written back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import flue_nb as flue
from flue_nb.models import ScriptedModel
from flue_nb.notebook.celllog.log import install, uninstall
from flue_nb.notebook.document.protocol import CellChanged, Document, DocumentError, NotebookCell
from flue_nb.notebook.kernel import read_tools
from flue_nb.notebook.kernel.notebook_tools import notebook_tools
from flue_nb.runtime.core.loop import RunSettings
from flue_nb.runtime.messages import (
    AssistantMessage,
    TextPart,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    message_to_dict,
)
from flue_nb.runtime.store import SubmissionState
from flue_nb.runtime.store.sqlite import SQLiteStore
from flue_nb.runtime.tools.tool import ToolContext, execute_tool


class FakeLive:
    """An in-memory live document that records what it was asked to do."""

    live = True
    path = "work.ipynb"

    def __init__(self, cells: list[NotebookCell], *, fail: bool = False) -> None:
        self._cells = cells
        self.fail = fail
        self.outputs: dict[str, tuple[list[Mapping[str, Any]], int | None]] = {}

    async def cells(self) -> list[NotebookCell]:
        return list(self._cells)

    async def insert_cell(self, source: str, *, kind: Any = "code", after: str | None = None,
                          metadata: Mapping[str, Any] | None = None) -> str:  # fmt: skip
        if self.fail:
            raise DocumentError("the server went away (timed out after 5 s)")
        cell = NotebookCell(f"new{len(self._cells)}", kind, source, metadata=dict(metadata or {}))
        at = len(self._cells) if after is None else [c.id for c in self._cells].index(after) + 1
        self._cells.insert(at, cell)
        return cell.id

    async def edit_cell(
        self, cell_id: str, source: str, *, metadata: Mapping[str, Any] | None = None, expected: str | None = None
    ) -> str:
        i = [c.id for c in self._cells].index(cell_id)
        old = self._cells[i]
        if expected is not None and old.source != expected:
            raise CellChanged(cell_id, old.source)
        self._cells[i] = NotebookCell(cell_id, old.kind, source, metadata={**old.metadata, **(metadata or {})})
        return old.source

    async def delete_cell(self, cell_id: str, *, expected: str) -> tuple[int, dict[str, Any]]:
        i = [c.id for c in self._cells].index(cell_id)
        if self._cells[i].source != expected:
            raise CellChanged(cell_id, self._cells[i].source)
        gone = self._cells.pop(i)
        return i, {"id": gone.id, "cell_type": gone.kind, "source": gone.source}

    async def move_cell(self, cell_id: str, *, after: str | None) -> tuple[int, int]:
        i = [c.id for c in self._cells].index(cell_id)
        cell = self._cells.pop(i)
        to = 0 if after is None else [c.id for c in self._cells].index(after) + 1
        self._cells.insert(to, cell)
        return i, to

    async def write_outputs(
        self, cell_id: str, outputs: Sequence[Mapping[str, Any]], execution_count: int | None
    ) -> None:
        self.outputs[cell_id] = (list(outputs), execution_count)

    async def close(self) -> None:
        pass


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    install(sh)
    yield sh
    uninstall(sh)
    InteractiveShell.clear_instance()


def _use(monkeypatch: Any, doc: Any) -> None:
    """Make `doc` (or no document) the one the tools find."""

    async def found(ns: Any, runner: Any = None) -> Any:
        return doc

    monkeypatch.setattr(read_tools, "find_document", found)


async def _inline(fn: Any) -> Any:
    return fn()


def _tools(shell: Any) -> dict[str, Any]:
    return {t.name: t for t in notebook_tools(lambda: shell.user_ns, runner=_inline)}


def _call(tool: Any, args: dict[str, Any]) -> Any:
    ctx = ToolContext("call_7", conversation_id="conv_1", submission_id="sub_1")
    return asyncio.run(execute_tool(tool, args, ctx))


def test_the_fake_is_a_document():
    assert isinstance(FakeLive([]), Document)


def test_live_insert_and_edit_carry_provenance_and_the_old_source(shell, monkeypatch):
    doc = FakeLive([NotebookCell("a", "code", "df = load()")])

    _use(monkeypatch, doc)
    t = _tools(shell)
    inserted = _call(t["insert_cell"], {"source": "df.plot()", "after": "a"})
    assert not inserted.is_error and "Inserted code cell new1 after cell a" in inserted.content
    flue_meta = doc._cells[1].metadata["flue"]
    assert flue_meta == {"conversation": "conv_1", "submission": "sub_1", "tool_call_id": "call_7"}
    unread = _call(t["edit_cell"], {"id": "a", "source": "df = load('sales.csv')"})
    # Never read: refused, and the result is the reading (a retry now compares with it).
    assert unread.is_error and "you have not read cell a" in unread.content and "df = load()" in unread.content
    assert doc._cells[0].source == "df = load()"
    edited = _call(t["edit_cell"], {"id": "a", "source": "df = load('sales.csv')"})
    assert "old source, for undo" in edited.content and "df = load()" in edited.content
    assert doc._cells[0].source == "df = load('sales.csv')" and "flue" in doc._cells[0].metadata


def test_an_edit_of_a_cell_the_user_changed_since_the_agent_read_it_is_refused(shell, monkeypatch):
    doc = FakeLive([NotebookCell("a", "code", "x = 1")])
    _use(monkeypatch, doc)
    t = _tools(shell)
    shell.run_cell("x = 1")  # the cell log exists, as in a notebook
    assert not _call(t["cells"], {"order": "document"}).is_error
    doc._cells[0] = NotebookCell("a", "code", "x = 1  # the user's typing")
    refused = _call(t["edit_cell"], {"id": "a", "source": "x = 2"})
    assert refused.is_error and "changed since you read it" in refused.content
    assert "x = 1  # the user's typing" in refused.content and refused.details["written"] is False
    assert doc._cells[0].source == "x = 1  # the user's typing"
    # The refusal was the reading: the retry, against the user's text, goes through.
    again = _call(t["edit_cell"], {"id": "a", "source": "x = 2  # the user's typing"})
    assert not again.is_error and doc._cells[0].source == "x = 2  # the user's typing"


def test_delete_is_a_compare_and_set_and_move_says_where_the_cell_went(shell, monkeypatch):
    doc = FakeLive([NotebookCell("a", "code", "x = 1"), NotebookCell("b", "code", "y = 2"),
                    NotebookCell("c", "code", "z = 3")])  # fmt: skip
    _use(monkeypatch, doc)
    t = _tools(shell)
    unread = _call(t["delete_cell"], {"id": "b"})
    assert unread.is_error and "you have not read cell b yet" in unread.content and len(doc._cells) == 3
    doc._cells[1] = NotebookCell("b", "code", "y = 2  # mine")  # the user types after the agent read it
    changed = _call(t["delete_cell"], {"id": "b"})
    assert changed.is_error and "changed since you read it" in changed.content and "# mine" in changed.content
    assert [c.source for c in doc._cells] == ["x = 1", "y = 2  # mine", "z = 3"]  # kept as it is
    deleted = _call(t["delete_cell"], {"id": "b"})  # the refusal showed it: now read
    assert not deleted.is_error and deleted.details["written"] and [c.id for c in doc._cells] == ["a", "c"]
    moved = _call(t["move_cell"], {"id": "c"})
    assert not moved.is_error and [c.id for c in doc._cells] == ["c", "a"]
    assert (moved.details["index_before"], moved.details["index_after"]) == (1, 0)


def test_live_run_cell_writes_outputs_and_the_execution_count_back(shell, monkeypatch):
    doc = FakeLive([NotebookCell("a", "code", "print('hi')\n6 * 7")])

    _use(monkeypatch, doc)
    result = _call(_tools(shell)["run_cell"], {"id": "a"})
    assert not result.is_error, result.content
    assert "written into cell 1 of work.ipynb in the live (collaborative) notebook" in result.content
    outputs, count = doc.outputs["a"]
    assert count == result.details["execution_count"] and count is not None
    assert {"output_type": "stream", "name": "stdout", "text": "hi\n"} in outputs
    (res,) = [o for o in outputs if o["output_type"] == "execute_result"]
    assert res["data"]["text/plain"] == "42" and res["execution_count"] == count


def test_a_failed_live_insert_says_it_did_not_happen(shell, monkeypatch):
    doc = FakeLive([], fail=True)

    _use(monkeypatch, doc)
    result = _call(_tools(shell)["insert_cell"], {"source": "x = 1"})
    assert result.is_error and "was not inserted" in result.content and "timed out" in result.content


def test_a_cell_that_raises_under_run_cell_is_an_error_result_with_its_traceback(shell, monkeypatch):
    _use(monkeypatch, None)
    result = _call(_tools(shell)["run_cell"], {"source": "{}['revenue']"})
    assert result.is_error and "KeyError" in result.content and "not in the notebook document" in result.content


def test_a_crash_during_run_cell_does_not_run_the_cell_again_on_recovery(tmp_path, shell):
    """Contract 11.2: the unresolved `run_cell` call gets an unknown-outcome result; nothing re-runs."""
    path, cid = tmp_path / "s.sqlite", "crashed"
    store = SQLiteStore(path)
    now = time.time()
    store.ensure_conversation(cid, now=now)
    sub = store.admit(cid, "run it", submission_id="sub_crashed", now=now - 5)
    store.acquire_lease(cid, "dead-owner", ttl=1)
    store.update_submission(sub.id, state=SubmissionState.RUNNING, attempts=1, started_at=now - 5,
                            lease_owner="dead-owner", lease_expires=now - 9)  # fmt: skip
    call = ToolCall("c_run", "run_cell", {"source": "ran_again = True"})
    messages = [UserMessage("run it", sub.id), AssistantMessage([TextPart("Running."), call])]
    store.append(cid, sub.id, [("message", message_to_dict(m)) for m in messages], now=now - 4)
    store.close()

    model = ScriptedModel(["checked"])

    @flue.agent
    def notebook_agent() -> str:
        flue.use_model(model)
        flue.use_sandbox(flue.kernel(tmp_path, namespace=shell.user_ns, runner=_inline))
        return "You work in a notebook."

    s = flue.init(notebook_agent, db=str(path), conversation=cid, settings=RunSettings())
    assert s.read("sub_crashed", timeout=20) == "checked"
    assert "ran_again" not in shell.user_ns  # the cell was not run a second time
    (result,) = [m for m in model.requests[0].messages if isinstance(m, ToolResultMessage)]
    assert result.is_error and "outcome is unknown" in result.content


def test_the_approval_question_shows_the_cell_source(tmp_path):
    from flue_nb.runtime.tools.approval import request_summary

    # Each tool words its own question (`Tool.question`): the runtime names none of them.
    tools = {t.name: t for t in flue.kernel(tmp_path, namespace={}).tools()}
    assert (
        request_summary(tools["insert_cell"], {"source": "df.plot()\nplt.show()"})
        == "insert_cell: df.plot() (+1 more lines)"
    )
    assert request_summary(tools["edit_cell"], {"id": "a1", "source": "x = 2"}) == "edit_cell: cell a1: x = 2"
    assert request_summary(tools["run_cell"], {"id": "a1"}) == "run_cell: cell a1 (its current source)"


def test_the_writing_tools_go_through_the_approval_policy_like_python(tmp_path):
    sandbox = flue.kernel(tmp_path, namespace={}, approval="deny")
    by_name = {t.name: t for t in sandbox.tools()}
    for name, args in (("insert_cell", {"source": "x"}), ("edit_cell", {"id": "a", "source": "x"}),
                       ("run_cell", {"source": "x = 1"})):  # fmt: skip
        result = asyncio.run(execute_tool(by_name[name], args, ToolContext("c")))
        assert result.is_error and "denies" in result.content, name
    # The read tools are never asked about.
    assert by_name["variables"] is not None
    assert asyncio.run(execute_tool(by_name["variables"], {}, ToolContext("c"))).approval is None


def test_a_secret_a_cell_printed_is_redacted_before_the_model_sees_it(shell, monkeypatch):
    monkeypatch.setenv("WAREHOUSE_TOKEN", "tok-1234567890-abcdef")
    shell.run_cell("import os\nprint('connecting with', os.environ['WAREHOUSE_TOKEN'])", store_history=True)
    result = _call(_tools(shell)["cell"], {"id": "#1"})
    assert "tok-1234567890-abcdef" not in result.content
    assert "connecting with [redacted:WAREHOUSE_TOKEN]" in result.content


def test_a_custom_tool_cannot_take_a_notebook_tool_name(tmp_path):
    from flue_nb.runtime.errors import ToolNameConflictError

    @flue.tool
    def cells() -> str:
        """My own cells."""
        return "mine"

    model = ScriptedModel(["never asked"])

    @flue.agent
    def clash() -> str:
        flue.use_model(model)
        flue.use_sandbox(flue.kernel(tmp_path, namespace={}))
        flue.use_tool(cells)
        return "x"

    s = flue.init(clash, db=str(tmp_path / "s.sqlite"), settings=RunSettings())
    with pytest.raises(ToolNameConflictError, match="cells"):
        s.prompt("hi")
    assert model.requests == []


def test_an_edit_is_put_to_the_person_as_a_diff_against_the_cell_now(monkeypatch):
    from flue_nb.notebook.kernel import write_tools

    doc = FakeLive([NotebookCell("a", "code", "total = sum(df['revenue'])\nprint(total)")])

    async def found(ns: Any) -> Any:
        return doc

    monkeypatch.setattr(write_tools, "find_document", found)
    args = {"id": "a", "source": "total = sum(df['units'])\nprint(total)"}
    shown = asyncio.run(write_tools.edit_diff(args, {}))
    assert shown is not None and shown.startswith("edit_cell: cell a\n--- now\n+++ proposed")
    assert "-total = sum(df['revenue'])" in shown and "+total = sum(df['units'])" in shown
    assert " print(total)" in shown
    # The approval wrapper asks the diff of `edit_cell` only; a cell the document does not have
    # keeps the question's plain line.
    by_name = {t.name: t for t in notebook_tools(dict, runner=_inline)}
    assert by_name["edit_cell"].question_detail is not None and by_name["run_cell"].question_detail is None
    assert asyncio.run(write_tools.edit_diff({"id": "zz", "source": "x"}, {})) is None
