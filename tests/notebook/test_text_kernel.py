"""`%flue` in a real kernel with text that is not valid UTF-8 (issue 12, point 1): a `-c`
conversation id or an `--interpolate`d value holding a lone surrogate works, and keeps working
in the next cells (before, the id stuck and every later cell failed)."""

from __future__ import annotations

import pytest
from kernel_helpers import Kernel

pytestmark = pytest.mark.kernel

SETUP = """
from flue_nb.models import FunctionModel, reply

def _last_user(req):
    return [m for m in req.messages if m.kind == "user"][-1].text

echo = FunctionModel(lambda req: reply("echo: " + _last_user(req)))
bad_id = "notes-" + chr(0xDCFF)   # os.fsdecode(b"notes-\\xff"): a name that is not UTF-8
bad_value = "caf" + chr(0xDCE9)
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("jupyter"), tmp_path_factory.mktemp("work"))
    k.ok(SETUP)
    k.ok("%config FlueMagics.db = 'flue.sqlite'")
    yield k
    k.shutdown()


def test_a_conversation_id_with_a_lone_surrogate_works_and_does_not_stick_broken(kernel):
    first = kernel.ok('get_ipython().run_line_magic("flue", f"-c {bad_id} -m echo first")')
    assert "echo: first" in first.text()
    second = kernel.ok("%flue -m echo second")  # continues the same (escaped) conversation
    assert "echo: second" in second.text()
    history = kernel.ok("%flue history").text()
    assert "first" in history and "second" in history
    assert "notes-\\\\xff" in kernel.ok("print(repr(get_ipython().find_magic('flue').__self__.conversation_id))").stdout


def test_an_interpolated_value_with_a_lone_surrogate_reaches_the_model_escaped(kernel):
    run = kernel.ok("%flue -c interp -m echo --interpolate I like {bad_value}")
    assert "echo: I like caf\\xe9" in run.text()
