"""`%flue` on a store that cannot be opened or read: one paragraph, never a traceback (issue 12.4)."""

from __future__ import annotations

import pytest
from kernel_helpers import Kernel

pytestmark = pytest.mark.kernel

SETUP = """
from flue_nb.models import FunctionModel, reply
echo = FunctionModel(lambda req: reply("echo"))
"""
BAD = {
    "adir": "is a directory",
    "notsql.txt": "restore it from a backup",
    "trunc.sqlite": "restore it from a backup",
}


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyter")
    cwd = tmp_path_factory.mktemp("work")
    (cwd / "adir").mkdir()
    (cwd / "notsql.txt").write_text("hello, this is not SQLite\n" * 100)
    # A real store cut short: its header promises pages that are not there.
    import flue_nb as flue
    from flue_nb.models import ScriptedModel

    @flue.agent
    def a():
        flue.use_model(ScriptedModel(["hi " * 2000]))

    from flue_nb.runtime.core.loop import RunSettings

    s = flue.init(a, db=str(cwd / "full.sqlite"), conversation="c", settings=RunSettings())
    s.prompt("hello", timeout=30)
    s.store.close()
    (cwd / "trunc.sqlite").write_bytes((cwd / "full.sqlite").read_bytes()[:5000])
    k = Kernel(root, cwd)
    k.ok(SETUP)
    yield k
    k.shutdown()


@pytest.mark.parametrize("db", sorted(BAD))
@pytest.mark.parametrize("command", ["status", "history", "abort", "-m echo status", "-m echo hello"])
def test_a_bad_store_is_one_paragraph_naming_the_file_and_the_remedy(kernel, db, command):
    run = kernel.run(f"%flue --db {db} {command}", timeout=30)
    text = run.all_text().strip()
    assert run.status == "error", text
    assert "Traceback" not in text and "Error" not in text.split(":")[0], text
    assert db in text and BAD[db] in text and "--db" in text, text
    assert "\n\n" not in text, text
