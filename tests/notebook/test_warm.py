"""The extension's background warm-up: what the first `%flue` cell needs, loaded off the main path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = r"""
import json, sys, threading
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.extension_manager.load_extension("flue_nb")
warm = [t for t in threading.enumerate() if t.name == "flue-warmup"]
for t in warm:
    t.join(60)
from flue_nb.runtime.core import tokens
from flue_nb.runtime.providers import anthropic as provider
print(json.dumps({
    "thread": bool(warm),
    "anthropic": "anthropic" in sys.modules and provider.sdk_loaded(),
    "runtime": "flue_nb.runtime.session" in sys.modules,
    "tokenizer": tokens._DEFAULT._loaded,
}))
"""


def _loaded(tmp_path, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "FLUE_MODEL", "FLUE_WARMUP")}
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
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
        "anthropic": True,
        "runtime": True,
        "tokenizer": True,
    }


def test_offline_the_sdk_is_not_loaded(tmp_path):
    assert _loaded(tmp_path) == {
        "thread": True,
        "anthropic": False,
        "runtime": True,
        "tokenizer": True,
    }


def test_flue_warmup_0_turns_it_off(tmp_path):
    assert _loaded(tmp_path, FLUE_WARMUP="0", ANTHROPIC_API_KEY="sk-test") == {
        "thread": False,
        "anthropic": False,
        "runtime": False,
        "tokenizer": False,
    }
