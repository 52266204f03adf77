"""`flue-nb run` fails loudly when a submission fails; `flue-nb demo` runs the quickstart;
`flue-nb history` reads a store without a notebook."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.kernel

MODEL_CELL = (
    "from flue_nb.models import ScriptedModel, reply, fail\n"
    "m = ScriptedModel([reply('fine'), fail('invalid_request', 'scripted refusal', status=400)])\n"
    "%config FlueMagics.model = 'm'\n"
    "%config FlueMagics.db = ':memory:'"
)


def _cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "FLUE_MODEL")}
    for var in ("IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        env[var] = str(tmp_path / "jupyter" / var.lower())
        os.makedirs(env[var], exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "flue_nb.cli", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )


def _notebook(path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def test_run_succeeds_and_writes_the_executed_notebook(tmp_path):
    # A `python3` kernelspec elsewhere must not matter: the kernel is this interpreter's.
    stray = tmp_path / "jupyter" / "jupyter_data_dir" / "kernels" / "python3"
    stray.mkdir(parents=True)
    (stray / "kernel.json").write_text(
        '{"argv": ["/nonexistent/python", "-f", "{connection_file}"], "display_name": "x", "language": "python"}'
    )
    nb = _notebook(tmp_path / "ok.ipynb", MODEL_CELL, "%flue say something")
    result = _cli(["run", str(nb), "--transcript"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "fine\n[✓ completed]" in result.stdout
    # No kernel log lines: no transport warning, and no kernel left to outlive the command.
    assert "without encryption" not in result.stderr + result.stdout
    assert "Parent appears to have exited" not in result.stderr
    # Not next to the source: a temporary directory, named in the output.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jupyter", "ok.ipynb"]
    where = result.stdout.split("executed notebook written to ")[1].splitlines()[0]
    assert Path(where).name == "ok.executed.ipynb" and Path(where).parent != tmp_path
    executed = nbformat.read(where, as_version=4)
    assert any("[✓ completed]" in o.get("data", {}).get("text/plain", "") for o in executed.cells[1].outputs)


def test_run_exits_non_zero_when_a_submission_fails(tmp_path):
    nb = _notebook(tmp_path / "bad.ipynb", MODEL_CELL, "%flue first", "%flue second", "print('never runs')")
    result = _cli(["run", str(nb), "-o", str(tmp_path / "out" / "bad.ipynb")], tmp_path)
    assert result.returncode == 1
    assert "FAILED" in result.stderr and "the submission failed" in result.stderr
    assert "scripted refusal" in result.stderr
    assert f"executed notebook written to {tmp_path / 'out' / 'bad.ipynb'}" in result.stdout
    executed = nbformat.read(tmp_path / "out" / "bad.ipynb", as_version=4)
    assert executed.cells[3].outputs == []  # execution stopped at the failing cell


def test_demo_runs_the_quickstart_offline_and_says_where_it_wrote_it(tmp_path):
    result = _cli(["demo", "-o", str(tmp_path / "demo.ipynb")], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "· edit: notes.md ✓" in result.stdout and "user: Show me what notes.md says now." in result.stdout
    assert f"executed notebook written to {tmp_path / 'demo.ipynb'}" in result.stdout
    assert (tmp_path / "demo.ipynb").exists()


def test_a_background_cell_keeps_updating_while_later_cells_run_headless(tmp_path):
    # The runtime thread's updates carry the running cell's parent header, which nbclient
    # needs to apply them (it drops output addressed to cells that already finished).
    # A pass-through hook on the kernel's display publisher notes when the final update has
    # gone out; the next cell runs until then, not for a fixed time (under load, > 2 s).
    slow = (
        "from flue_nb.models import ScriptedModel\n"
        "bg = ScriptedModel([' '.join(f'b{i}' for i in range(30))], delay=0.02)\n"
        "%config FlueMagics.db = ':memory:'\n"
        "sent, publish = [], get_ipython().display_pub.publish\n"
        "def watch(data, *args, **kw):\n"
        "    publish(data, *args, **kw)\n"
        "    sent.append(kw.get('update') and data.get('text/plain', '').endswith('[✓ completed]'))\n"
        "get_ipython().display_pub.publish = watch"
    )
    wait = "import time\ndeadline = time.monotonic() + 60\nwhile not any(sent) and time.monotonic() < deadline:\n    time.sleep(0.05)"
    nb = _notebook(tmp_path / "bg.ipynb", slow, "%flue -m bg --background go", wait)
    result = _cli(["run", str(nb), "-o", str(tmp_path / "bg.out.ipynb")], tmp_path)
    assert result.returncode == 0, result.stderr
    executed = nbformat.read(tmp_path / "bg.out.ipynb", as_version=4)
    (out,) = executed.cells[1].outputs
    assert out["data"]["text/plain"].endswith("b29\n[✓ completed]"), out


def test_run_fails_when_a_background_submission_fails_or_never_finishes(tmp_path):
    setup = (
        "from flue_nb.models import ScriptedModel, fail\n"
        "bad = ScriptedModel([fail('bad_request', 'background refusal')])\n"
        "endless = ScriptedModel([' '.join(f'e{i}' for i in range(2000))], delay=0.01)\n"
        "%config FlueMagics.db = ':memory:'"
    )
    # The next cell waits until the background cell's final display update has gone out (a
    # pass-through hook on the display publisher sees its last line name the outcome), not for
    # a fixed time after the store settled it (1 s was not enough once under load).
    hook = (
        "\nsent, publish = [], get_ipython().display_pub.publish\n"
        "def watch(data, *args, **kw):\n"
        "    publish(data, *args, **kw)\n"
        "    last = data.get('text/plain', '').rstrip().splitlines()[-1:] or ['']\n"
        "    sent.append(bool(kw.get('update')) and last[0].startswith('[') and 'fail' in last[0])\n"
        "get_ipython().display_pub.publish = watch"
    )
    wait = "import time\ndeadline = time.monotonic() + 60\nwhile not any(sent) and time.monotonic() < deadline:\n    time.sleep(0.05)"
    nb = _notebook(tmp_path / "bgfail.ipynb", setup + hook, "%flue -m bad --background go", wait)
    result = _cli(["run", str(nb)], tmp_path)
    assert result.returncode == 1 and "cell 1: submission failed" in result.stderr, result.stderr
    nb = _notebook(tmp_path / "bgopen.ipynb", setup, "%flue -c other -m endless --background go")
    result = _cli(["run", str(nb)], tmp_path)
    # Still queued or already running when the last cell ended, depending on the machine's load.
    assert result.returncode == 1, result.stderr
    assert "cell 1: submission running" in result.stderr or "cell 1: submission queued" in result.stderr


def test_history_lists_conversations_and_shows_one_with_its_outcomes(tmp_path):
    import flue_nb as flue
    from flue_nb.models import ScriptedModel, fail, reply

    model = ScriptedModel([reply("first answer"), fail("invalid_request", "refused", status=400)])

    @flue.agent
    def helper():
        flue.use_model(model)
        return "Help."

    db = str(tmp_path / "store.sqlite")
    session = flue.init(helper, conversation="talk", db=db, cwd=str(tmp_path))
    session.prompt("hello there")
    with pytest.raises(flue.FlueError):
        session.prompt("and again")
    listing = _cli(["history", "--db", db], tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "talk  (since " in listing.stdout
    assert "2 submission(s): 1 completed, 1 failed)" in listing.stdout
    one = _cli(["history", "--db", db, "talk"], tmp_path)
    assert one.returncode == 0, one.stderr
    assert "completed\n     hello there" in one.stdout
    assert "failed: refused" in one.stdout and "user: and again" in one.stdout
    assert "assistant: first answer" in one.stdout and "[failed: refused]" in one.stdout
    missing = _cli(["history", "--db", db, "nope"], tmp_path)
    assert missing.returncode != 0 and "no conversation 'nope'" in missing.stderr


def test_history_names_a_conversations_images_in_their_place(tmp_path):
    PIL = pytest.importorskip("PIL.Image", reason="Pillow (the `images` extra) draws the test's PNG")
    import flue_nb as flue
    from flue_nb.models import ScriptedModel, reply

    PIL.new("RGB", (64, 48), "teal").save(tmp_path / "plot.png")

    @flue.agent
    def looker():
        flue.use_model(ScriptedModel([reply("A teal square.")]))
        return "Look."

    db = str(tmp_path / "store.sqlite")
    flue.init(looker, conversation="look", db=db, cwd=str(tmp_path)).prompt(
        "what is it?", images=[str(tmp_path / "plot.png")]
    )
    one = _cli(["history", "--db", db, "look"], tmp_path)
    assert one.returncode == 0, one.stderr
    assert "user: what is it?\n    [plot.png: 64×48 PNG]\nassistant: A teal square." in one.stdout


def test_history_lists_the_conversations_of_a_postgresql_store(pg_url):
    from flue_nb.cli import history
    from flue_nb.runtime.store import Outcome
    from flue_nb.runtime.store.postgres import PostgresStore

    with PostgresStore(pg_url) as store:
        store.admit("talk", "hello", submission_id="s1", now=1.0)
        store.settle("s1", Outcome.COMPLETED, result="hi", now=2.0)
        store.admit("team:report", "draft it", submission_id="s2", now=3.0)
    listing = history(pg_url, None)
    assert "talk  (since " in listing and "1 submission(s): 1 completed)" in listing
    assert "team:report  (since " in listing and "1 submission(s): 1 unsettled)" in listing
