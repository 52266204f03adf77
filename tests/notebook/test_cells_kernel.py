"""The cell log and the notebook read tools in a real kernel (issue 21.1, 21.2, 21.7): what the
user ran, printed and broke, seen by an offline agent through `cells`, `cell` and `variables`."""

from __future__ import annotations

import json

import pytest
from kernel_helpers import Kernel

pytestmark = pytest.mark.kernel

SETUP = """
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.notebook.celllog.log import cell_log
"""


def _script(name: str, *calls: str) -> str:
    """A cell defining an offline model that calls the given tools, then answers 'done'."""
    steps = ", ".join(f"reply('', {c})" for c in calls)
    return f"{name} = ScriptedModel([{steps}, reply('done')])"


def _results(kernel: Kernel, model: str) -> list[str]:
    """The tool results the model received, in order."""
    code = (
        "import json\n"
        f"print(json.dumps([m.content for r in {model}.requests for m in r.messages "
        "if type(m).__name__ == 'ToolResultMessage']))"
    )
    seen = json.loads(kernel.ok(code).stdout)
    # Each request repeats the earlier results: keep each once, in order.
    out: list[str] = []
    for text in seen:
        if text not in out:
            out.append(text)
    return out


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyter")
    cwd = tmp_path_factory.mktemp("work")
    k = Kernel(root, cwd)
    k.ok(SETUP)
    k.ok("%config FlueMagics.db = 'flue.sqlite'")
    yield k
    k.shutdown()


def test_the_log_records_each_cell_with_its_count_outcome_streams_and_outputs(kernel):
    kernel.ok("import sys\nprint('hello')\nprint('warn', file=sys.stderr)\n40 + 2")
    kernel.run("sales = {'units': 3}\nsales['revenue']")
    code = (
        "log = cell_log()\nr1, r2 = log.records()[-3], log.records()[-2]\n"
        "print(r1.kind, r1.outcome, repr(r1.stdout), repr(r1.stderr), r1.outputs[0]['data']['text/plain'])\n"
        "print(r2.kind, r2.outcome, r2.error.type, r2.error.message, r1.execution_count + 1 == r2.execution_count)\n"
        "print('\\x1b[' in r2.error.traceback, 'sales[' in r2.error.traceback)"
    )
    lines = kernel.ok(code).stdout.splitlines()
    assert lines[0] == "user ok 'hello\\n' 'warn\\n' 42"
    assert lines[1] == "user error KeyError 'revenue' True"
    assert lines[2] == "False True"  # the traceback is plain text and shows the user's line


def test_a_cell_printing_100_mb_is_recorded_cut_with_head_and_tail(kernel):
    run = kernel.run(
        "import sys\nfor i in range(100):\n    sys.stdout.write(f'{i:04d}' + 'x' * 1_048_570 + '\\n')", timeout=120
    )
    assert run.status == "ok"
    code = (
        "r = cell_log().records()[-2]\n"
        "print(len(r.stdout.encode()) <= 51200, r.stdout.startswith('0000'), r.stdout.rstrip().endswith('x'),"
        " 'left out' in r.stdout)"
    )
    assert kernel.ok(code).stdout.split() == ["True", "True", "True", "True"]


def test_flue_cells_are_marked_and_the_agent_reads_the_last_error_through_cell(kernel):
    kernel.run("df = {'units': [1, 2]}\ntotal = sum(df['revenue'])")
    kernel.ok(_script("fixer", "tool_call('cell', last_error=True)", "tool_call('cells')"))
    run = kernel.ok("%%flue -c fix --no-widget -m fixer\nfix the error above")
    assert "done" in run.text(), run.all_text()
    error_result, listing = _results(kernel, "fixer")
    assert "KeyError: 'revenue'" in error_result and "sum(df['revenue'])" in error_result
    assert '<notebook-data nonce="' in error_result
    assert "%%flue (your conversation, not a user cell)" in listing
    assert "error" in listing and "KeyError" in listing
    # The %%flue cell itself is in the log as kind `flue`, never as a user cell.
    kinds = kernel.ok("print([r.kind for r in cell_log().records()][-4:])").stdout
    assert "'flue'" in kinds


def test_variables_summarises_the_namespace_without_modules_or_functions(kernel):
    kernel.ok("import os\nrows = [1, 2, 3]\nname = 'abc'\ndef helper():\n    return 1")
    kernel.ok(_script("looker", "tool_call('variables')", "tool_call('variables', name='rows')"))
    kernel.ok("%%flue -c vars --no-widget -m looker\nwhat do I have?")
    summary, detail = _results(kernel, "looker")
    assert "rows: list, len 3" in summary and "name: str, len 3" in summary
    assert "helper" not in summary and "os:" not in summary and "In:" not in summary
    assert "[1, 2, 3]" in detail


def test_run_cell_runs_in_the_kernel_is_logged_as_the_agents_and_says_it_is_not_in_the_document(kernel):
    kernel.ok(_script("runner", "tool_call('run_cell', source='value = 6 * 7\\nprint(value)')"))
    run = kernel.ok("%%flue -c run --no-widget -m runner\nrun it")
    assert "42" not in run.stdout  # the agent's cell is not echoed under the %%flue cell
    (result,) = _results(kernel, "runner")
    assert "ok" in result and "42" in result and "not in the notebook document" in result
    assert kernel.ok("print(value, cell_log().last_agent.kind)").stdout.split() == ["42", "agent"]


def test_insert_cell_headless_writes_nothing_and_edit_cell_cannot_edit(kernel):
    kernel.ok(
        _script("writer", "tool_call('insert_cell', source='x = 1')", "tool_call('edit_cell', id='abc', source='y')")
    )
    kernel.ok("%%flue -c write --no-widget -m writer\nwrite")
    inserted, edited = _results(kernel, "writer")
    assert "Nothing was inserted" in inserted and "headless" in inserted
    assert "Cannot edit" in edited and "Nothing was changed" in edited


def test_the_system_prompt_describes_the_notebook_tools_and_the_envelope(kernel):
    kernel.ok(_script("prompted", "tool_call('variables')"))
    kernel.ok("%%flue -c prompt --no-widget -m prompted\nhello")
    system = kernel.ok("print(prompted.requests[0].system)").stdout
    assert "## The notebook" in system and "notebook-data" in system and "`run_cell`" in system


def test_insert_cell_in_jupyter_without_collaboration_proposes_the_cell_below(tmp_path):
    # A kernel a Jupyter server started (it names the notebook), with no live document.
    k = Kernel(tmp_path / "jupyter", tmp_path, JPY_SESSION_NAME="analysis.ipynb")
    try:
        calls = (
            "tool_call('insert_cell', source='totals.get(\"east\", 0)')",
            "tool_call('insert_cell', source='print(1)')",
        )
        k.ok(SETUP + _script("proposer", *calls))
        msg_id = k.send("%%flue -c propose --no-widget -m proposer\nadd a safer cell")
        k.collect(msg_id)
        reply = k.kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = k.kc.get_shell_msg(timeout=30)
        payloads = reply["content"].get("payload", [])
        proposed = [p["text"] for p in payloads if p.get("source") == "set_next_input"]
        assert proposed == ['totals.get("east", 0)\n\nprint(1)']  # the second joins the first, none lost
        first, second = _results(k, "proposer")
        assert "Proposed the cell below the %%flue cell" in first and "not in the notebook" in first
        assert "joined to the code you proposed earlier" in second
    finally:
        k.shutdown()


def test_insert_cell_from_a_run_no_cell_waits_for_says_it_cannot_propose(tmp_path):
    k = Kernel(tmp_path / "jupyter", tmp_path, JPY_SESSION_NAME="analysis.ipynb")
    try:
        k.ok(SETUP + _script("bg", "tool_call('insert_cell', source='x = 1')"))
        k.ok("%flue -c bgprop -m bg --background add a cell")
        for _ in range(100):  # the background run ends on its own; poll for its last request
            if k.ok("print(len(bg.requests))").stdout.strip() == "2":
                break
            k.ok("import time; time.sleep(0.1)")
        (result,) = _results(k, "bg")
        assert "Nothing was inserted" in result and "not attached to one" in result
    finally:
        k.shutdown()


def test_an_insert_from_the_chat_that_reached_no_notebook_is_an_error_card_not_a_check(tmp_path):
    # Plain JupyterLab from the chat (issue 35.4): a Jupyter kernel with no server to find (no
    # collaboration, no open tab), and the message sent from the chat, so no %%flue cell waits.
    pytest.importorskip("anywidget", reason="the chat widget needs the `widget` extra")
    k = Kernel(tmp_path / "jupyter", tmp_path, JPY_SESSION_NAME="analysis.ipynb")
    try:
        k.ok(SETUP + _script("chatty", "tool_call('insert_cell', source='x = 1')"))
        k.ok("%flue chat -c plainchat -m chatty")
        k.ok(
            "from flue_nb.notebook.views.chat.widget import open_widgets\nw = open_widgets()[-1]\nw.send_message('add')"
        )
        for _ in range(100):  # the chat's run ends on its own; poll for its last request
            if k.ok("print(len(chatty.requests))").stdout.strip() == "2":
                break
            k.ok("import time; time.sleep(0.1)")
        (result,) = _results(k, "chatty")
        assert "Nothing was inserted" in result and "not attached to one" in result
        cards = (
            "import json, time\n"
            "for _ in range(100):\n"
            "    w.flush()\n"
            "    cards = [p for b in w.history + w.live for p in b['parts'] if p.get('name') == 'insert_cell']\n"
            "    if cards and cards[0]['status'] not in ('running', 'awaiting_approval'):\n"
            "        break\n"
            "    time.sleep(0.1)\n"
            "print(json.dumps([(p['status'], p['result']['text'][:40]) for p in cards]))"
        )
        ((status, text),) = json.loads(k.ok(cards).stdout)
        assert status == "error" and text.startswith("Nothing was inserted"), (status, text)  # drawn ✗, not ✓
    finally:
        k.shutdown()


def test_a_figure_a_user_cell_showed_is_kept_by_digest_and_reaches_the_model_as_an_image(kernel):
    pytest.importorskip("matplotlib")
    kernel.ok("import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.title('sales')\nplt.show()")
    kept = kernel.ok(
        "r = cell_log().records()[-2]\n"
        "(out,) = [o for o in r.outputs if 'image/png' in o['data']]\n"
        "d = out['data']['image/png']['digest']\n"
        "print(len(d), d in cell_log().images)"
    )
    assert kept.stdout.split() == ["64", "True"]  # a sha256 digest; the bytes are in the log's image store
    number = int(kernel.ok("print(cell_log().records()[-3].number)").stdout)
    kernel.ok(_script("viewer", f"tool_call('cell', id='#{number}')"))
    kernel.ok("%%flue -c view --no-widget -m viewer\nwhat did I plot?")
    seen = kernel.ok(
        "(m,) = [m for r in viewer.requests[-1:] for m in r.messages if type(m).__name__ == 'ToolResultMessage']\n"
        "print([(i.media_type, i.width > 0) for i in m.images], 'image/png' in m.content)"
    )
    assert seen.stdout.strip() == "[('image/png', True)] True"
