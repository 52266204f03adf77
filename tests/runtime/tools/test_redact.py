"""Secrets never leave a tool result (issue 12, point 11): the provider key in use and secret-
looking environment variables become `[redacted:NAME]` before the model, the store or the
display sees the result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from flue_nb.runtime.redact import ALLOW_ENV, DENY_ENV, redact, register_secret
from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools import bash_tool
from flue_nb.runtime.tools.tool import ToolOutput, define_tool

CHILD = r"""
import json, os, sqlite3, sys
import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call

work, db = sys.argv[1], sys.argv[2]

@flue.tool
def env_dump() -> str:
    '''What the python tool would print for os.environ.'''
    return repr(dict(os.environ))

model = ScriptedModel([
    reply("", tool_call("bash", command="tr '\\0' '\\n' < /proc/$PPID/environ | grep FLUE_T_")),
    reply("", tool_call("env_dump")),
    reply("done"),
])

@flue.agent
def snoop():
    flue.use_model(model)
    flue.use_sandbox(flue.local(work))
    flue.use_tool(env_dump)
    return "Find secrets."

s = flue.init(snoop, db=db)
assert s.prompt("look") == "done"
to_model = [m.content for m in model.requests[-1].messages if getattr(m, "kind", "") == "tool_result"]
events = [repr(e) for e in s.events()]
print(json.dumps({"to_model": to_model, "events": events}))
"""


def test_secrets_read_from_the_kernels_environment_are_redacted_everywhere(tmp_path: Path) -> None:
    key, token, short = "sk-proc-environ-0123456789abcdef", "ghp_tokenvalue987654321", "kb"
    env = {
        **os.environ,
        "FLUE_T_API_KEY": key,
        "FLUE_T_GITHUB_TOKEN": token,
        "FLUE_T_KEYMAP": short,  # too short to be a secret: left alone
        "FLUE_T_PLAIN": "not-a-secret-value",
    }
    work, db = tmp_path / "work", tmp_path / "s.sqlite"
    work.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(work), str(db)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    bash_result, python_result = got["to_model"]
    assert "FLUE_T_API_KEY=[redacted:FLUE_T_API_KEY]" in bash_result
    assert "FLUE_T_GITHUB_TOKEN=[redacted:FLUE_T_GITHUB_TOKEN]" in bash_result
    assert "FLUE_T_KEYMAP=kb" in bash_result and "FLUE_T_PLAIN=not-a-secret-value" in bash_result
    assert "'FLUE_T_API_KEY': '[redacted:FLUE_T_API_KEY]'" in python_result
    everything = json.dumps(got)
    for secret in (key, token):
        assert secret not in everything  # not sent to the model, not in events (the display)
        for f in tmp_path.glob("s.sqlite*"):  # not in the store (its WAL included)
            assert secret.encode() not in f.read_bytes(), f


def test_allow_and_deny_settings_choose_which_names_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVICE_API_KEY", "abcdefgh-1234")
    monkeypatch.setenv("DATABASE_URL", "postgres://me:pw@db/x")
    text = "key abcdefgh-1234 url postgres://me:pw@db/x"
    assert redact(text) == "key [redacted:SERVICE_API_KEY] url postgres://me:pw@db/x"
    monkeypatch.setenv(DENY_ENV, "DATABASE_*")
    monkeypatch.setenv(ALLOW_ENV, "service_api_key")
    assert redact(text) == "key abcdefgh-1234 url [redacted:DATABASE_URL]"


def test_a_registered_provider_key_is_redacted_whatever_the_allow_list_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    register_secret("ANTHROPIC_API_KEY", "sk-ant-registered-0123456789")
    monkeypatch.setenv(ALLOW_ENV, "*")
    assert redact("a sk-ant-registered-0123456789 b") == "a [redacted:ANTHROPIC_API_KEY] b"
    register_secret("ANTHROPIC_API_KEY", "test")  # a placeholder is not a key
    assert redact("a test b") == "a test b"


def test_a_secret_opted_into_the_shell_is_redacted_from_its_output(tmp_path: Path, call) -> None:
    sandbox = LocalSandbox(tmp_path, env={"DEPLOY_TOKEN": "tok-opted-in-123456"})
    out = call(bash_tool(sandbox), {"command": "echo token=$DEPLOY_TOKEN"})
    assert out.content == "token=[redacted:DEPLOY_TOKEN]"


def test_details_for_the_display_are_redacted_too(monkeypatch: pytest.MonkeyPatch, call) -> None:
    monkeypatch.setenv("SOME_SECRET", "hush-hush-hush-42")

    class Empty(BaseModel):
        pass

    def run(_: Empty) -> ToolOutput:
        return ToolOutput("saw hush-hush-hush-42", details={"raw": ["hush-hush-hush-42"]})

    out = call(define_tool("peek", "Peek.", input=Empty, run=run), {})
    assert out.content == "saw [redacted:SOME_SECRET]"
    assert out.details == {"raw": ["[redacted:SOME_SECRET]"]}
