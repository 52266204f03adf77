"""`grep` (contract 6): rg or `grep -E`, `path:line:text`, caps, no shell splicing."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import pytest

from flue_nb.runtime.sandbox import ExecResult
from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools import grep_tool, standard_tools
from flue_nb.runtime.tools.grep import has_rg


@pytest.fixture(params=["rg", "grep"])
def engine(request: pytest.FixtureRequest, sandbox: LocalSandbox, no_rg_sandbox: LocalSandbox, run):
    """(engine name, the grep tool on a sandbox that uses it) for both engines."""
    sb = sandbox if request.param == "rg" else no_rg_sandbox
    assert run(has_rg(sb)) is (request.param == "rg")
    return request.param, grep_tool(sb)


class CountingSandbox(LocalSandbox):
    """Counts the `rg --version` probes."""

    probes = 0

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        max_output: int | None = None,
        keep: Literal["head", "tail"] = "tail",
    ) -> ExecResult:
        if list(command) == ["rg", "--version"]:
            self.probes += 1
            await asyncio.sleep(0.05)  # concurrent first calls overlap the probe
        return await super().exec(command, cwd=cwd, env=env, timeout=timeout, max_output=max_output, keep=keep)


def test_grep_6_1_uses_rg_when_the_sandbox_has_it(tmp_path: Path, tools, call) -> None:
    (tmp_path / "a.txt").write_text("needle\n")
    out = call(tools["grep"], {"pattern": "needle"})
    assert out.details and out.details["engine"] == "rg"
    assert out.content == "a.txt:1:needle"


def test_grep_6_1_falls_back_to_grep_e_without_rg(tmp_path: Path, no_rg_sandbox, call) -> None:
    (tmp_path / "a.txt").write_text("needle\nnot it\n")
    out = call(grep_tool(no_rg_sandbox), {"pattern": "ne+dle|zzz"})  # extended regex
    assert out.details and out.details["engine"] == "grep"
    assert out.content == "a.txt:1:needle"


def test_grep_6_1_probes_rg_once_per_sandbox(tmp_path: Path, run, acall) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    sandbox = CountingSandbox(tmp_path)

    async def calls():
        grep = grep_tool(sandbox)
        await asyncio.gather(*(acall(grep, {"pattern": "x"}) for _ in range(3)))  # concurrent first calls
        await acall(grep, {"pattern": "x"})
        # A new tool list for the same sandbox (rebuilt per render) reuses the answer.
        again = {t.name: t for t in standard_tools(sandbox)}["grep"]
        return await acall(again, {"pattern": "x"})

    assert run(calls()).content == "a.txt:1:x"
    assert sandbox.probes == 1
    other = CountingSandbox(tmp_path)
    run(acall(grep_tool(other), {"pattern": "x"}))
    assert other.probes == 1  # per sandbox, not global


def test_grep_6_1_literal_and_include(tmp_path: Path, engine, call) -> None:
    _, grep = engine
    (tmp_path / "src").mkdir()
    (tmp_path / "src/m.py").write_text("a.c\nabc\n")
    (tmp_path / "notes.md").write_text("a.c\n")
    assert call(grep, {"pattern": "a.c", "literal": True, "include": "*.py"}).content == "src/m.py:1:a.c"
    regex = call(grep, {"pattern": "a.c", "include": "*.py"}).content.split("\n")
    assert regex == ["src/m.py:1:a.c", "src/m.py:2:abc"]


def test_grep_6_2_returns_path_line_text(tmp_path: Path, engine, call) -> None:
    _, grep = engine
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/mod.py").write_text("import os\n    value = compute()\n")
    assert call(grep, {"pattern": r"value\s*="}).content == "pkg/mod.py:2:    value = compute()"
    assert call(grep, {"pattern": "value", "path": "pkg"}).content == "pkg/mod.py:2:    value = compute()"
    assert call(grep, {"pattern": "value", "path": "pkg/mod.py"}).content == "pkg/mod.py:2:    value = compute()"


def test_grep_6_2_caps_at_100_matches_and_advises_narrowing(tmp_path: Path, engine, call) -> None:
    _, grep = engine
    (tmp_path / "many.txt").write_text("".join(f"hit {i}\n" for i in range(150)))
    out = call(grep, {"pattern": "hit"})
    body, note = out.content.split("\n\n")
    assert len(body.split("\n")) == 100 and all(ln.startswith("many.txt:") for ln in body.split("\n"))
    assert "100" in note and "narrow" in note.lower()
    assert not out.is_error


def test_grep_6_2_exactly_100_matches_is_not_capped(tmp_path: Path, engine, call) -> None:
    _, grep = engine
    (tmp_path / "f.txt").write_text("hit\n" * 100)
    out = call(grep, {"pattern": "hit"})
    assert len(out.content.split("\n")) == 100 and "narrow" not in out.content.lower()


def test_grep_6_2_lines_are_cut_to_500_characters(tmp_path: Path, engine, call) -> None:
    _, grep = engine
    (tmp_path / "long.txt").write_text("needle " + "x" * 5000 + "\nshort needle\n")
    out = call(grep, {"pattern": "needle"})
    lines = out.content.split("\n")
    assert len(lines) == 2 and all(len(ln) <= 500 for ln in lines)
    assert any(ln.startswith("long.txt:1:needle xxx") and len(ln) == 500 for ln in lines)


def test_grep_6_2_no_match_is_a_plain_result_not_an_error(tmp_path: Path, engine, call) -> None:
    _, grep = engine
    (tmp_path / "a.txt").write_text("hay\n")
    out = call(grep, {"pattern": "needle"})
    assert not out.is_error and "no matches" in out.content.lower()


def test_grep_6_2_a_bad_regex_is_an_error_result(tmp_path: Path, engine, call) -> None:
    _, grep = engine
    (tmp_path / "a.txt").write_text("x\n")
    out = call(grep, {"pattern": "(unclosed"})
    assert out.is_error and "exit code 2" in out.content


def test_grep_6_3_pattern_and_path_are_argv_not_shell(tmp_path: Path, engine, call) -> None:
    _, grep = engine
    (tmp_path / "a.txt").write_text("$(touch pwned)\n-v\n")
    out = call(grep, {"pattern": "$(touch pwned)", "literal": True})
    assert out.content == "a.txt:1:$(touch pwned)"
    assert call(grep, {"pattern": "-v"}).content == "a.txt:2:-v"  # a pattern, not an option
    out = call(grep, {"pattern": "x", "path": "; touch pwned2"})
    assert out.is_error and "not found" in out.content.lower()
    call(grep, {"pattern": "x", "include": "*.txt'; touch pwned3; '"})
    assert not any((tmp_path / n).exists() for n in ("pwned", "pwned2", "pwned3"))


def test_grep_missing_path_is_an_error_result(engine, call) -> None:
    _, grep = engine
    out = call(grep, {"pattern": "x", "path": "missing-dir"})
    assert out.is_error and "missing-dir" in out.content


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_grep_on_a_fifo_or_device_returns_at_once_with_a_clear_result(
    tmp_path: Path, engine, acall, run, special: str
) -> None:
    # Before: rg/grep read the FIFO (or /dev/zero) until the tool's 120 s timeout.
    if special == "fifo":
        os.mkfifo(tmp_path / "pipe")
        special = "pipe"
    _, tool = engine
    out = run(asyncio.wait_for(acall(tool, {"pattern": "x", "path": special}), 20))
    assert out.is_error
    assert "not a regular file or directory" in out.content and "FIFO" in out.content


def test_grep_skips_a_fifo_inside_a_searched_directory(tmp_path: Path, engine, acall, run) -> None:
    (tmp_path / "a.txt").write_text("needle\n")
    os.mkfifo(tmp_path / "pipe")
    _, tool = engine
    out = run(asyncio.wait_for(acall(tool, {"pattern": "needle"}), 20))
    assert out.content == "a.txt:1:needle"


def test_grep_and_glob_show_a_name_that_is_not_utf8_in_a_form_read_accepts(
    tmp_path: Path, sandbox: LocalSandbox, call
) -> None:
    with open(os.path.join(os.fsencode(tmp_path), b"caf\xe9.txt"), "wb") as f:
        f.write(b"needle\n")
    tools = {t.name: t for t in standard_tools(sandbox)}
    assert call(tools["grep"], {"pattern": "needle"}).content == "caf\\xe9.txt:1:needle"
    assert call(tools["glob"], {"pattern": "*.txt"}).content == "caf\\xe9.txt"
    assert call(tools["read"], {"path": "caf\\xe9.txt"}).content == "needle"
