"""Fuzzed model input: whatever the model sends, every tool answers with a result, never a crash."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools import standard_tools
from flue_nb.runtime.tools.tool import ToolContext, ToolOutput, execute_tool

NASTY_STRINGS = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "../../../../etc/passwd",
    "..",
    "/dev/null",
    "~/nope",
    "$(touch pwned)",
    "`id`",
    "*",
    "**/*",
    "[",
    "(unclosed",
    "\\",
    "\n" * 50,
    "é" * 1000,
    "x" * 100_000,
    "🙂",
    "-rf",
    "--help",
    "bin.dat",
    "dir",
    "a.txt",
    "./a.txt",
]


def random_value(rng: random.Random) -> Any:
    pick = rng.randrange(12)
    if pick >= 9:
        return rng.choice(NASTY_STRINGS[:-4])  # plausible strings more often: more calls reach `run`
    if pick < 4:
        return rng.choice(NASTY_STRINGS)
    if pick == 4:
        return rng.choice([-1, 0, 1, 2**63, -(2**63), 3.5, float("nan")])
    if pick == 5:
        return rng.choice([True, False, None])
    if pick == 6:
        return [rng.choice(NASTY_STRINGS)]
    if pick == 7:
        return {"nested": rng.choice(NASTY_STRINGS)}
    return rng.choice(["echo hi", "true", "exit 3", "printf '\\x00\\x01'", "a", "hello"])


def random_input(rng: random.Random, fields: list[str]) -> Any:
    if rng.random() < 0.05:
        return rng.choice([None, "not an object", 42, ["path"]])  # not even a JSON object
    raw = {f: random_value(rng) for f in fields if rng.random() < 0.7}
    if rng.random() < 0.1:
        raw["unknown_field"] = 1
    return raw


def test_fuzzed_inputs_to_the_six_tools_always_come_back_as_results(tmp_path, monkeypatch):
    # Four levels down, so "../../../../etc/passwd" stays inside tmp_path: the sandbox is the
    # host, and a fuzzed `write` from tmp_path itself once replaced the machine's /etc/passwd.
    work = tmp_path / "1" / "2" / "3" / "4"
    work.mkdir(parents=True)
    tools = {t.name: t for t in standard_tools(LocalSandbox(work))}
    monkeypatch.chdir(work)
    (work / "a.txt").write_text("alpha\nbeta\n")
    (work / "bin.dat").write_bytes(bytes(range(256)) * 8)
    (work / "dir").mkdir()
    rng = random.Random(20261130)
    # The tools' own input fields (the names are pinned in test_bad_input.py).
    fields = {name: list(t.input_model.model_fields) for name, t in tools.items()}

    async def run_all() -> list[tuple[str, Any, ToolOutput]]:
        out = []
        for i in range(800):
            name = rng.choice(sorted(fields))
            raw = random_input(rng, fields[name])
            if name == "bash" and isinstance(raw, dict):
                raw["timeout"] = 5  # keep a fuzzed `sleep` from stalling the suite
            result = await execute_tool(tools[name], raw, ToolContext(f"fuzz{i}"))
            out.append((name, raw, result))
        return out

    results = asyncio.run(run_all())
    assert len(results) == 800
    reached_run = [r for _, _, r in results if not r.content.startswith("Invalid input")]
    assert len(reached_run) >= 100  # the fuzz reaches the tools' own code, not just validation
    for name, raw, result in results:
        assert isinstance(result, ToolOutput) and isinstance(result.content, str), (name, raw)
        if not isinstance(raw, dict) or "unknown_field" in raw:
            assert result.is_error, (name, raw, result.content)
    # `bash` runs shell text by design; every other tool passes its input as data, never to a shell.
    bash_ran_it = any(n == "bash" and isinstance(r, dict) and "pwned" in str(r.get("command")) for n, r, _ in results)
    assert bash_ran_it or not (work / "pwned").exists()
    assert any(n != "bash" and isinstance(r, dict) and "$(touch pwned)" in r.values() for n, r, _ in results)
