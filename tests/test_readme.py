"""Every code block of the README works when pasted, offline.

A `python` block with a magic line (`%...`) is a notebook cell: those run in order in one fresh
kernel, as a reader pasting them into a new notebook would, with the default model answered by a
loopback Messages API. Any other `python` block is a file of its own: each runs in a fresh
interpreter in an empty directory; a configuration file's block (lines setting `c.<Class>...`,
as in `jupyterhub_config.py`) runs with the `c` such files are given. `bash` blocks (`make demo`,
`make test`) and other languages are not run here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.anthropic_server import AnthropicServer, stream, text
from tests.notebook.kernel_helpers import Kernel, jupyter_env

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def blocks(kind: str) -> list[tuple[int, str]]:
    """(line number, code) of the README's python blocks: `cell` (with magics) or `file`."""
    readme = (ROOT / "README.md").read_text()
    found = []
    for m in FENCE.finditer(readme):
        if m.group(1) != "python":
            continue
        code = m.group(2)
        is_cell = any(line.lstrip().startswith("%") for line in code.splitlines())
        if is_cell == (kind == "cell"):
            found.append((readme.count("\n", 0, m.start()) + 1, code))
    return found


FILES = blocks("file")


def test_the_readme_has_snippets_of_both_kinds():
    # Guards the two tests below against passing vacuously (a changed fence, a renamed file).
    assert len(blocks("cell")) >= 4 and len(FILES) >= 2


@pytest.mark.parametrize("line,code", FILES, ids=[f"README.md:{n}" for n, _ in FILES])
def test_python_snippet_runs_as_a_file(line, code, tmp_path):
    if re.search(r"^c\.[A-Z]\w*\.", code, re.M):
        code = "from traitlets.config import Config\nc = Config()\n" + code
    env = jupyter_env(tmp_path / "jupyter")
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"README.md:{line}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr


@pytest.mark.kernel
def test_notebook_snippets_run_in_order_in_a_fresh_kernel(tmp_path):
    cells = blocks("cell")
    with AnthropicServer() as server:
        server.enqueue(*[stream(text(f"Answer {n} from the loopback API.")) for n in range(10)])
        work = tmp_path / "work"
        work.mkdir()
        kernel = Kernel(
            tmp_path / "jupyter",
            work,
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=server.url,
        )
        try:
            for line, code in cells:
                run = kernel.run(code, timeout=120)
                shown = run.all_text()
                assert run.status == "ok", f"README.md:{line}\n{shown}"
                assert "Error" not in shown, f"README.md:{line}\n{shown}"
                if code.startswith("%%flue"):
                    assert "[✓ completed]" in shown, f"README.md:{line}\n{shown}"
        finally:
            kernel.shutdown()
    # The default model answered the first cells (over the loopback API, with the key given),
    # and the second cell continued the first one's conversation, as the README says.
    assert len(server.requests) >= 2
    second = [m["content"] for m in server.requests[1].body["messages"]]
    assert "Load sales.csv" in str(second[0]) and "Now plot it." in str(second[-1]), second
    assert server.requests[0].headers.get("x-api-key") == "test-key" or (
        server.requests[0].headers.get("authorization") == "Bearer test-key"
    )
    assert os.path.exists(work / ".flue" / "flue.sqlite")
