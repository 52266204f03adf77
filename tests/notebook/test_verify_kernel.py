"""`%flue verify`, `%flue materialize` and `flue-nb verify` with real kernels (issue 34.4, 34.5).

A notebook whose `%%flue` cell lets the agent "clean" `df` with a hidden `python` call is run
headless (`flue-nb run`, which saves it with its outputs and leaves the store beside it), then its
cells are run again in a live kernel. The rerun replays the stored answer, so its `df` keeps all
10 rows while the live one has 8: verify must name the agent's step; once the step is a cell of
the notebook, it must pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from kernel_helpers import Kernel, jupyter_env

pytestmark = pytest.mark.kernel

CELLS = [
    "import pandas as pd\ndf = pd.DataFrame({'x': range(10)})",
    "from flue_nb.models import ScriptedModel, reply, tool_call\n"
    "offline = ScriptedModel([reply('', tool_call('python', code='df = df[df.x < 8]')), reply('Cleaned.')])\n"
    "%config FlueMagics.model = 'offline'",
    "%%flue\nclean df",
    "len(df)",
]


def _cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flue_nb.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The notebook, run and saved with its outputs (work/analysis.ipynb), its store beside it."""
    root, work = tmp_path_factory.mktemp("jupyter"), tmp_path_factory.mktemp("work")
    env = jupyter_env(root)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nbformat.write(nb, work / "src.ipynb")
    done = _cli("run", "src.ipynb", "-o", str(work / "analysis.ipynb"), cwd=work, env=env)
    assert done.returncode == 0, done.stderr
    assert (work / ".flue" / "flue.sqlite").exists()
    return root, work, env


def test_flue_nb_verify_names_the_hidden_step_and_exits_1(saved):
    _root, work, env = saved
    done = _cli("verify", "analysis.ipynb", cwd=work, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert out.startswith("flue verify: analysis.ipynb does not reproduce:")
    assert "cell 4's outputs differ from the saved ones: saved 'execute_result: 8', rerun 'execute_result: 10'" in out
    assert (
        "the agent's python call in conversation `src-" in out and "step 1" in out and "changed `df`, in no cell" in out
    )
    assert "Traceback" not in out + done.stderr


def test_flue_nb_verify_exits_0_for_a_notebook_that_reproduces(saved, tmp_path):
    _root, _work, env = saved
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = sum(range(5))\nx"), nbformat.v4.new_markdown_cell("done")]
    nbformat.write(nb, tmp_path / "plain.ipynb")
    assert _cli("run", "plain.ipynb", "-o", str(tmp_path / "plain.ipynb"), cwd=tmp_path, env=env).returncode == 0
    done = _cli("verify", "plain.ipynb", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reruns top to bottom and reproduces" in done.stdout


def test_flue_nb_verify_says_in_one_line_why_an_input_is_not_a_notebook(saved, tmp_path):
    _root, _work, env = saved
    (tmp_path / "bad.ipynb").write_text("not json")
    for arg, words in (("missing.ipynb", "no such file"), ("bad.ipynb", "not JSON")):
        done = _cli("verify", arg, cwd=tmp_path, env=env)
        assert done.returncode == 1 and done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr
    done = _cli("verify", str(_work / "analysis.ipynb"), "--db", "nowhere.sqlite", cwd=tmp_path, env=env)
    assert done.returncode == 1 and done.stderr.startswith("flue-nb verify: no store at"), done.stderr


def test_a_flue_cell_that_never_ran_fails_the_rerun_without_calling_a_model(saved, tmp_path):
    _root, _work, env = saved
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS[:3]]  # never run: no stored answer
    nbformat.write(nb, tmp_path / "fresh.ipynb")
    done = _cli("verify", "fresh.ipynb", cwd=tmp_path, env=env)
    assert done.returncode == 1
    assert "cell 3 fails when the notebook reruns: FlueCellError: flue verify: no stored answer" in done.stdout


def test_percent_verify_names_the_hidden_step_and_passes_after_materialize(saved):
    root, work, _env = saved
    path = work / "analysis.ipynb"
    k = Kernel(root, work, JPY_SESSION_NAME=str(path))
    try:
        for source in CELLS:
            k.ok(source)
        out = k.ok("%flue verify --timeout 60", timeout=300).stdout
        assert "does not reproduce" in out
        line = next(ln for ln in out.splitlines() if ln.startswith("- `df`"))
        assert line.startswith(
            "- `df` has 8 rows live, 10 when the notebook reruns: changed by the agent's python call"
        )
        assert "conversation `analysis-" in line and "step 1" in line and "in no cell" in line
        proposed = k.ok("%flue materialize", timeout=120).stdout
        assert "proposed 1 step(s) as one cell below this one" in proposed, proposed
        # The person keeps the proposed cell (here: put into the saved notebook after the %%flue cell).
        nb = nbformat.read(path, as_version=4)
        nb.cells.insert(3, nbformat.v4.new_code_cell("# flue: changed df\ndf = df[df.x < 8]"))
        nbformat.write(nb, path)
        out = k.ok("%flue verify --timeout 60", timeout=300).stdout
        assert out.startswith("flue verify:") and "reproduces and matches the live namespace" in out, out
    finally:
        k.shutdown()
    assert os.path.exists(path)
