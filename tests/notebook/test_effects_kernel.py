"""Rewind and undo in a real kernel (issue 34.3, 34.8): a DataFrame the agent's `python` call
changed goes back to its old value with `%flue rewind`, a file `bash` wrote is undone with
`%flue undo`, and an edited cell is undone in the saved notebook (the document fallback)."""

from __future__ import annotations

import json
import time

import pytest
from kernel_helpers import Kernel

pytest.importorskip("pandas")

pytestmark = pytest.mark.kernel

SETUP = """
import pandas as pd
from flue_nb.models import ScriptedModel, reply, tool_call
df = pd.DataFrame({"a": [1.0, None, 3.0], "b": [4, 5, 6]})
cleaner = ScriptedModel([
    reply("", tool_call("python", code="df = df.dropna()\\ndf['c'] = df['a'] * 2")),
    reply("", tool_call("bash", command="echo made > made.txt")),
    reply("cleaned"),
])
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyter")
    cwd = tmp_path_factory.mktemp("work")
    k = Kernel(root, cwd)
    k.ok(SETUP)
    k.ok("%config FlueMagics.db = 'flue.sqlite'")
    k.cwd = cwd  # type: ignore[attr-defined]
    yield k
    k.shutdown()


def test_a_dataframe_changed_by_python_is_rewound_and_a_bash_file_undone(kernel):
    run = kernel.ok("%flue -c clean --no-widget -m cleaner clean the data")
    assert "cleaned" in run.all_text()
    assert kernel.ok("print(df.shape)").stdout.strip() == "(2, 3)"
    listed = kernel.ok("%flue -c clean -m cleaner changes").stdout
    assert "1.1 python: `df` changed (DataFrame 3×2 → DataFrame 2×3)" in listed, listed
    assert "2.1 bash: file" in listed and "made.txt created" in listed
    undone = kernel.ok("%flue -c clean -m cleaner undo 2.1").stdout
    assert "Undone 1 item" in undone, undone
    assert not (kernel.cwd / "made.txt").exists()
    rewound = kernel.ok("%flue -c clean -m cleaner rewind 1").stdout
    assert "Undone 1 item" in rewound, rewound
    out = kernel.ok("print(df.shape, df['a'].isna().sum(), list(df.columns))").stdout.strip()
    assert out == "(3, 2) 1 ['a', 'b']"


def test_an_edited_cell_is_undone_in_the_saved_notebook(kernel, tmp_path):
    nb = tmp_path / "n.ipynb"
    cell = {
        "cell_type": "code",
        "id": "c1",
        "metadata": {},
        "source": "x = 2  # edited",
        "outputs": [],
        "execution_count": None,
    }
    nb.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    code = f"""
import time
from flue_nb.runtime.effects import CellEffect, Effects
from flue_nb.runtime.messages import ToolResultMessage, message_to_dict
from flue_nb.runtime.store.sqlite import SQLiteStore
st = SQLiteStore('cells.sqlite')
st.admit('cells', 'go', submission_id='s1', now=time.time())
e = Effects(cells=(CellEffect('edited', 'c1', {str(nb)!r}, source_before='x = 1', source_after='x = 2  # edited'),))
m = ToolResultMessage('k1', 'edit_cell', 'Edited', details={{'effects': e.to_dict()}})
st.append('cells', 's1', [('message', message_to_dict(m))], now=time.time())
st.settle('s1', __import__('flue_nb.runtime.store', fromlist=['Outcome']).Outcome.COMPLETED, now=time.time())
st.close()
"""
    kernel.ok(code)
    out = kernel.ok("%flue -c cells --db cells.sqlite -m cleaner undo all").stdout
    assert "Undone 1 item" in out and "— in the saved file n.ipynb (no live document" in out, out
    assert json.loads(nb.read_text())["cells"][0]["source"] == "x = 1"
    # Undone once: asked again, there is nothing left to undo and the file stays as it is.
    again = kernel.ok("%flue -c cells --db cells.sqlite -m cleaner undo all").stdout
    assert "Undone 0 items" in again and json.loads(nb.read_text())["cells"][0]["source"] == "x = 1"


RUNS = """
total = 1
open("keep.txt", "w").close()
runner = ScriptedModel([
    reply("", tool_call("run_cell", source="total = 10\\n__import__('pathlib').Path('ran.txt').write_text('from run_cell')")),
    reply("", tool_call("python", code="__import__('pathlib').Path('py.txt').write_text('from python')\\n"
                                       "__import__('os').remove('keep.txt')")),
    reply("ran both"),
])
"""


def test_run_cell_and_python_record_what_they_change_and_it_is_undone(kernel):
    # Issue 34.1: code run through `run_cell` changes the namespace (recorded as that step's
    # variables, old values kept), and `python` and `run_cell` change files (the workspace scan,
    # as for `bash`); options after the subcommand work as before it.
    kernel.ok(RUNS)
    run = kernel.ok("%flue -c runs --no-widget -m runner go")
    assert "ran both" in run.all_text()
    listed = kernel.ok("%flue changes -c runs -m runner").stdout
    lines = [ln.strip() for ln in listed.splitlines()[1:]]
    assert lines[0] == "1.1 run_cell: `total` changed (int → int)", listed
    assert lines[1].startswith("1.2 run_cell: file ") and "ran.txt created" in lines[1], listed
    assert lines[2] == "1.3 run_cell: cell (new code) ran", listed
    assert lines[3].startswith("2.1 python: file ") and "keep.txt deleted" in lines[3], listed
    assert lines[4].startswith("2.2 python: file ") and "py.txt created" in lines[4], listed
    assert len(lines) == 5 and "flue.sqlite" not in listed, listed  # the store's own files are not effects
    one = kernel.ok("%flue undo 2.1 -c runs -m runner").stdout
    assert "Undone 1 item" in one and (kernel.cwd / "keep.txt").exists(), one
    rest = kernel.ok("%flue rewind 1 -c runs -m runner").stdout
    assert "Undone 3 items" in rest, rest
    assert not (kernel.cwd / "ran.txt").exists() and not (kernel.cwd / "py.txt").exists()
    assert kernel.ok("print(total)").stdout.strip() == "1"


def test_an_option_after_a_subcommand_missing_its_value_is_a_usage_error(kernel):
    out = kernel.run("%flue changes -c")
    assert "expected one argument" in out.all_text(), out.all_text()


CRASHY = """
import pathlib, time
import flue_nb.runtime.undo as undo_module
from flue_nb.models import ScriptedModel, reply, tool_call
%config FlueMagics.db = 'flue.sqlite'
writer = ScriptedModel([
    reply("", tool_call("write", path="a.txt", content="new a\\n")),
    reply("", tool_call("write", path="b.txt", content="new b\\n")),
    reply("written"),
])
"""

STOP_AFTER_ONE = """
applied = undo_module._apply
def apply_then_hang(c, store, ns):
    done = applied(c, store, ns)
    pathlib.Path("marker").write_text("one item restored")
    time.sleep(120)
    return done
undo_module._apply = apply_then_hang
"""


def test_a_kernel_killed_during_a_rewind_ends_in_the_new_state_and_says_so(tmp_path):
    # Issue 34.8: SIGKILL while `%flue rewind` is between its two restores. The next `%flue` of
    # the conversation, in the new kernel, finishes the journalled plan (never a mix of the two
    # states left behind) and says which state it is in.
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "a.txt").write_text("old a\n")
    (cwd / "b.txt").write_text("old b\n")
    k = Kernel(tmp_path / "jupyter", cwd)
    try:
        k.ok(CRASHY)
        assert "written" in k.ok("%flue -c crash --no-widget -m writer write them").all_text()
        assert (cwd / "a.txt").read_text() == "new a\n" and (cwd / "b.txt").read_text() == "new b\n"
        k.ok(STOP_AFTER_ONE)
        k.send("%flue rewind 1 -c crash -m writer")
        deadline = time.monotonic() + 60
        while not (cwd / "marker").exists():
            assert time.monotonic() < deadline, "the rewind never reached its first restore"
            time.sleep(0.1)
        k.restart()  # SIGKILL, then a new kernel
        # Killed between the restores (newest first): b.txt is back, a.txt is not, until the
        # next `%flue` of the conversation finishes the plan.
        assert (cwd / "b.txt").read_text() == "old b\n" and (cwd / "a.txt").read_text() == "new a\n"
        k.ok(CRASHY)
        said = k.ok("%flue changes -c crash -m writer").stdout
        assert "A rewind to before step 1 was cut off by a crash; it is now finished (the new state)" in said, said
        assert (cwd / "a.txt").read_text() == "old a\n" and (cwd / "b.txt").read_text() == "old b\n"
        assert said.count("[undone]") == 2, said
        again = k.ok("%flue changes -c crash -m writer").stdout
        assert "cut off by a crash" not in again, again  # finished once
    finally:
        k.shutdown()
