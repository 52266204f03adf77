"""`%config FlueMagics.*` settings are checked when they are set (issue 20.7): a bad value is
refused in one line naming the setting and what it takes, and the old value stays."""

from __future__ import annotations

import pytest
from kernel_helpers import Kernel

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("jupyter"), tmp_path_factory.mktemp("work"))
    k.ok("import os; os.mkdir('a_folder')")
    yield k
    k.shutdown()


def value(kernel: Kernel, name: str) -> str:
    shown = kernel.ok(f"print(repr(get_ipython().magics_manager.registry['FlueMagics'].{name}))")
    return shown.stdout.strip()


@pytest.mark.parametrize(
    ("name", "bad", "says"),
    [
        ("lease_ttl", "-5", "from 1 to 86400"),
        ("lease_ttl", "0", "from 1 to 86400"),
        ("lease_ttl", "float('nan')", "from 1 to 86400"),
        ("lease_ttl", "float('inf')", "from 1 to 86400"),
        ("model", "'anthropic/claude sonnet'", "no spaces"),
        ("db", "'a_folder'", "is a directory"),
        ("allow_hosts", "['https://models.example.test/simple']", "not URLs"),
    ],
)
def test_a_bad_setting_is_refused_when_set_and_the_old_value_stays(kernel: Kernel, name: str, bad: str, says: str):
    before = value(kernel, name)
    run = kernel.run(f"%config FlueMagics.{name} = {bad}")
    shown = run.stderr + run.stdout + run.all_text()
    assert f"FlueMagics.{name}" in shown and says in shown, shown
    assert "Traceback" not in shown
    assert value(kernel, name) == before


def test_good_settings_are_taken_and_a_model_spec_is_trimmed(kernel: Kernel):
    kernel.ok("%config FlueMagics.lease_ttl = 45")
    assert value(kernel, "lease_ttl") == "45.0"
    kernel.ok("%config FlueMagics.model = '  anthropic/claude-sonnet-4-6 '")
    assert value(kernel, "model") == "'anthropic/claude-sonnet-4-6'"
    kernel.ok("%config FlueMagics.db = 'a_folder/flue.sqlite'")
    assert value(kernel, "db") == "'a_folder/flue.sqlite'"
    assert value(kernel, "sandbox") == "'auto'"  # contained by default
    kernel.ok("%config FlueMagics.allow_hosts = ['Models.Example.test', '*.files.example.test']")
    assert value(kernel, "allow_hosts") == "['models.example.test', '*.files.example.test']"
