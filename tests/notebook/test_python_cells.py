"""`python_tool="cells"` and `materialize` on a live document (issue 34.5, 34.6).

The live document is the in-memory `FakeLive` of test_cells_write (the real one, on a Jupyter
server with collaboration, is the live-doc suite's): these check what goes through the protocol —
the cell's code under its comment, its `metadata["flue"]` provenance, and where it is inserted.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_cells_write import FakeLive

import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.notebook.celllog.log import install, uninstall
from flue_nb.notebook.document.protocol import NotebookCell
from flue_nb.notebook.kernel import python_cells
from flue_nb.notebook.verify.materialize import materialize
from flue_nb.runtime.errors import ConfigError


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    install(sh)
    yield sh
    uninstall(sh)
    InteractiveShell.clear_instance()


def _use(monkeypatch: Any, doc: Any) -> None:
    async def found(ns: Any, runner: Any = None) -> Any:
        return doc

    monkeypatch.setattr(python_cells, "find_document", found)


def _session(shell: Any, tmp_path: Any, mode: str, script: list[Any]) -> Any:
    box = flue.kernel(tmp_path, namespace=shell.user_ns, python_tool=mode, sandbox="none")  # type: ignore[arg-type]

    model = ScriptedModel(script)

    @flue.agent
    def a() -> None:
        flue.use_model(model)
        flue.use_sandbox(box)

    return flue.init(a, db=str(tmp_path / "flue.sqlite"), conversation="conv")


SCRIPT = [
    reply("", tool_call("python", code="df = [r for r in df if r < 8]")),
    reply("", tool_call("python", code="len(df)")),  # read-only: no cell
    reply("", tool_call("python", code="total = sum(df)")),
    reply("Cleaned."),
]


def test_python_tool_cells_writes_each_state_changing_call_as_a_marked_cell(shell, tmp_path, monkeypatch):
    shell.user_ns["df"] = list(range(10))
    doc = FakeLive([NotebookCell("c1", "code", "df = list(range(10))"), NotebookCell("c2", "code", "%%flue\nclean")])
    _use(monkeypatch, doc)
    session = _session(shell, tmp_path, "cells", SCRIPT)
    assert session.prompt("clean df") == "Cleaned."
    cells = asyncio.run(doc.cells())
    written = [c for c in cells if c.metadata.get("flue", {}).get("materialized")]
    assert [c.source.splitlines()[1] for c in written] == ["df = [r for r in df if r < 8]", "total = sum(df)"]
    assert written[0].source.startswith("# flue: changed df (the agent's python call call_")
    assert written[1].source.startswith("# flue: created total")
    prov = written[0].metadata["flue"]
    assert prov["conversation"] == "conv" and prov["tool_call_id"] and prov["submission"].startswith("sub_")
    assert [c.id for c in cells][-2:] == [written[0].id, written[1].id]  # in the order they ran
    results = [m for m in session.history() if type(m).__name__ == "ToolResultMessage"]
    assert "written into the notebook as cell" in results[0].content
    assert "written into the notebook" not in results[1].content  # the read-only call


def test_python_tool_hidden_writes_nothing_and_cells_says_when_there_is_no_live_document(shell, tmp_path, monkeypatch):
    shell.user_ns["df"] = list(range(10))
    doc = FakeLive([NotebookCell("c1", "code", "x = 1")])
    _use(monkeypatch, doc)
    session = _session(shell, tmp_path, "hidden", SCRIPT)
    session.prompt("clean df")
    assert len(asyncio.run(doc.cells())) == 1
    _use(monkeypatch, None)
    shell.user_ns["df"] = list(range(10))
    (tmp_path / "b").mkdir()
    other = _session(shell, tmp_path / "b", "cells", SCRIPT)
    other.prompt("clean df")
    results = [m for m in other.history() if type(m).__name__ == "ToolResultMessage"]
    assert "not written into the notebook: there is no live document" in results[0].content


def test_python_tool_takes_only_hidden_or_cells(tmp_path):
    with pytest.raises(ConfigError, match="python_tool"):
        flue.kernel(tmp_path, namespace={}, python_tool="all")  # type: ignore[arg-type]


def test_materialize_inserts_the_runs_state_changing_calls_after_its_flue_cell(shell, tmp_path, monkeypatch):
    shell.user_ns["df"] = list(range(10))
    session = _session(shell, tmp_path, "hidden", SCRIPT)
    receipt = session.dispatch("clean df")
    session.read(receipt)
    sid = receipt.submission_id
    run_cell = NotebookCell(
        "run",
        "code",
        "%%flue\nclean df",
        outputs=({"output_type": "display_data", "metadata": {"flue": {"submission_id": sid}}},),
    )
    doc = FakeLive([NotebookCell("c1", "code", "df = list(range(10))"), run_cell, NotebookCell("c3", "code", "df")])
    done = asyncio.run(materialize(session.store, "conv", None, doc))
    assert done.written == "live" and len(done.cells) == 2
    cells = asyncio.run(doc.cells())
    assert [c.id for c in cells][0:2] == ["c1", "run"] and cells[-1].id == "c3"
    assert cells[2].source.endswith("df = [r for r in df if r < 8]") and "step 1 of" in cells[2].source
    assert cells[3].source.endswith("total = sum(df)") and cells[3].metadata["flue"]["step"] == 3
    again = asyncio.run(materialize(session.store, "conv", None, doc))  # nothing is written twice
    assert again.cells == [] and len(asyncio.run(doc.cells())) == 5
    assert "no state-changing python call" in again.text()


def test_materialize_without_a_live_document_shows_the_cells_and_says_nothing_was_written(shell, tmp_path):
    shell.user_ns["df"] = list(range(10))
    session = _session(shell, tmp_path, "hidden", SCRIPT)
    session.prompt("clean df")
    done = asyncio.run(materialize(session.store, "conv", None, None))
    assert done.written == "shown"
    assert "nothing was written" in done.text() and "total = sum(df)" in done.text()


def test_session_materialize_needs_the_notebook_layer_then_writes_through_it(shell, tmp_path, monkeypatch):
    from flue_nb.runtime import materializer

    shell.user_ns["df"] = list(range(10))
    session = _session(shell, tmp_path, "hidden", SCRIPT)
    session.prompt("clean df")
    monkeypatch.setattr(materializer, "MATERIALIZERS", [])
    with pytest.raises(ConfigError, match="%load_ext flue_nb"):
        session.materialize()
    from flue_nb.notebook.magics.extension import load_ipython_extension

    load_ipython_extension(shell)  # installs the notebook's materializer, as a kernel's load does
    doc = FakeLive([NotebookCell("c0", "code", "%%flue\nclean df")])
    monkeypatch.setattr("flue_nb.notebook.document.saved.find_document", _found(doc))
    done = session.materialize()
    assert done.written == "live" and len(done.cells) == 2
    assert asyncio.run(doc.cells())[-1].source.endswith("total = sum(df)")


def _found(doc: Any) -> Any:
    async def found(ns: Any, runner: Any = None) -> Any:
        return doc

    return found
