"""The extension's background warm-up: what the first `%flue` cell needs, loaded off the main path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = r"""
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.extension_manager.load_extension("flue_nb")
from flue_nb.notebook.magics import _warm
warm = list(_warm._started)  # also when it already ended (threading.enumerate() misses that)
for t in warm:
    t.join(JOIN)
from flue_nb.runtime.core import tokens
from flue_nb.runtime.providers import anthropic as provider
print(json.dumps({
    "thread": bool(warm) and warm[0].name == "flue-warmup",
    "finished": not any(t.is_alive() for t in warm),
    "anthropic": "anthropic" in sys.modules and provider.sdk_loaded(),
    "runtime": "flue_nb.runtime.session" in sys.modules,
    "tokenizer": tokens._DEFAULT._loaded,
    "live": "flue_nb.notebook.document.live_document" in sys.modules,
    # Outside a kernel nothing imports ipykernel: from the warm-up thread its import defined
    # IPython's magics classes beside the main thread's (one global registry: mixed magics).
    "ipykernel": any(m in sys.modules for m in ("ipykernel.zmqshell", "ipykernel.kernelapp")),
}))
"""


# How long the child waits for the warm-up to end: the SDK import alone took 18 s with the
# machine loaded (1.2-1.6 s idle), and a child that stopped waiting saw it unloaded. A hang
# guard, not a target: `bench/first_cell.py` times a first cell with the warm-up.
JOIN = 200


def _loaded(tmp_path, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "FLUE_MODEL", "FLUE_WARMUP")}
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", CHILD.replace("JOIN", str(JOIN))],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=JOIN + 60,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "env",
    [{"ANTHROPIC_API_KEY": "sk-test"}, {"FLUE_MODEL": "anthropic:claude-sonnet-4-6"}],
    ids=["key", "model-setting"],
)
def test_with_claude_configured_the_sdk_runtime_and_tokenizer_load_in_the_background(tmp_path, env):
    assert _loaded(tmp_path, **env) == {
        "thread": True,
        "finished": True,
        "anthropic": True,
        "runtime": True,
        "tokenizer": True,
        "live": False,  # no Jupyter server runs this Python: the live document stays unloaded
        "ipykernel": False,
    }


def test_offline_the_sdk_is_not_loaded(tmp_path):
    assert _loaded(tmp_path) == {
        "thread": True,
        "finished": True,
        "anthropic": False,
        "runtime": True,
        "tokenizer": True,
        "live": False,  # no Jupyter server runs this Python: the live document stays unloaded
        "ipykernel": False,
    }


def test_flue_warmup_0_turns_it_off(tmp_path):
    assert _loaded(tmp_path, FLUE_WARMUP="0", ANTHROPIC_API_KEY="sk-test") == {
        "thread": False,
        "finished": True,
        "anthropic": False,
        "runtime": False,
        "tokenizer": False,
        "live": False,
        "ipykernel": False,
    }
