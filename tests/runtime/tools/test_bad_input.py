"""Bad input never escapes as an exception (contract 1.6): each case is an error result saying
what was wrong, and validation errors name the field."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools import standard_tools

TEN_MB = "x" * (10 * 1024 * 1024)


def test_tools_1_1_exactly_the_six_in_order_with_strict_documented_schemas(tmp_path: Path) -> None:
    tools = standard_tools(LocalSandbox(tmp_path))
    assert [t.name for t in tools] == ["read", "write", "edit", "bash", "grep", "glob"]
    for t in tools:
        spec = t.spec()
        assert len(spec.description) > 80
        assert spec.input_schema.get("additionalProperties") is False
        assert all(p.get("description") for p in spec.input_schema["properties"].values())
    fields = {t.name: list(t.input_model.model_fields) for t in tools}
    assert fields == {
        "read": ["path", "offset", "limit"],
        "write": ["path", "content"],
        "edit": ["path", "old_text", "new_text", "replace_all"],
        "bash": ["command", "timeout"],
        "grep": ["pattern", "path", "include", "literal"],
        "glob": ["pattern", "path"],
    }


def test_bad_input_1_6_read_of_a_missing_file(tools, call) -> None:
    out = call(tools["read"], {"path": "missing.txt"})
    assert out.is_error and "not found" in out.content.lower()


def test_bad_input_1_6_read_of_a_directory(tmp_path: Path, tools, call) -> None:
    (tmp_path / "d").mkdir()
    out = call(tools["read"], {"path": "d"})
    assert out.is_error and "directory" in out.content


@pytest.mark.parametrize("name", ["read", "edit"])
def test_bad_input_1_6_a_fifo_is_refused_not_waited_on(tmp_path: Path, tools, call, name: str) -> None:
    os.mkfifo(tmp_path / "pipe")
    out = call(
        tools[name],
        {"path": "pipe", "old_text": "a", "new_text": "b"} if name == "edit" else {"path": "pipe"},
    )
    assert out.is_error and "not a regular file" in out.content


def test_bad_input_1_6_read_of_a_binary_file(tmp_path: Path, tools, call) -> None:
    (tmp_path / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (tmp_path / "blob.dat").write_bytes(bytes(range(256)))
    out = call(tools["read"], {"path": "img.png"})
    # A PNG header over garbage: the error names why it is no image (issue 20.5), not "binary".
    assert out.is_error and "is a PNG file" in out.content and "cannot be decoded" in out.content
    out = call(tools["read"], {"path": "blob.dat"})
    assert out.is_error and "binary" in out.content


@pytest.mark.parametrize(
    ("name", "raw", "field"),
    [
        ("read", {"path": "a\x00b"}, "path"),
        ("write", {"path": "a\x00b", "content": "x"}, "path"),
        ("edit", {"path": "a\x00b", "old_text": "a", "new_text": "b"}, "path"),
        ("grep", {"pattern": "x", "path": "a\x00b"}, "path"),
        ("glob", {"pattern": "*\x00", "path": "."}, "pattern"),
    ],
)
def test_bad_input_1_6_a_nul_byte_in_a_path(tools, call, name: str, raw: dict, field: str) -> None:
    out = call(tools[name], raw)
    assert out.is_error and f"`{field}`" in out.content and "NUL" in out.content


@pytest.mark.parametrize("field", ["pattern", "include"])
def test_bad_input_1_6_nul_byte_in_a_grep_pattern(tools, call, field: str) -> None:
    out = call(tools["grep"], {"pattern": "a", field: "a\x00b"})
    assert out.is_error and f"`{field}`" in out.content and "NUL" in out.content


def test_bad_input_1_6_a_10mb_old_text(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("small file\n")
    out = call(tools["edit"], {"path": "f.txt", "old_text": TEN_MB, "new_text": "y"})
    assert out.is_error and "could not find" in out.content.lower() and "longer than the whole file" in out.content
    assert (tmp_path / "f.txt").read_text() == "small file\n"


@pytest.mark.parametrize(
    ("name", "raw", "says"),
    [
        ("grep", {"pattern": TEN_MB}, "`pattern`"),
        ("grep", {"pattern": "x", "include": TEN_MB}, "`include`"),
        ("glob", {"pattern": TEN_MB}, "`pattern`"),
        ("read", {"path": TEN_MB}, "`path`"),
        ("write", {"path": TEN_MB, "content": "x"}, "`path`"),
        ("bash", {"command": TEN_MB}, "too long"),
    ],
)
def test_bad_input_1_6_10mb_strings_elsewhere(tmp_path: Path, tools, call, name: str, raw: dict, says: str) -> None:
    (tmp_path / "f.txt").write_text("x\n")
    out = call(tools[name], raw)
    # Says what was wrong, and does not echo 10 MB back to the model.
    assert out.is_error and says in out.content and len(out.content) < 5000


def test_bad_input_1_6_a_negative_offset(tmp_path: Path, tools, call) -> None:
    (tmp_path / "f.txt").write_text("x\n")
    out = call(tools["read"], {"path": "f.txt", "offset": -5})
    assert out.is_error and "`offset`" in out.content and "greater than or equal to 1" in out.content
    out = call(tools["read"], {"path": "f.txt", "limit": 0})
    assert out.is_error and "`limit`" in out.content


@pytest.mark.parametrize(
    ("name", "raw", "field"),
    [
        ("read", {"path": 123}, "path"),
        ("read", {"path": "f.txt", "offset": "abc"}, "offset"),
        ("read", {"path": ["f.txt"]}, "path"),
        ("write", {"path": "f.txt", "content": None}, "content"),
        (
            "edit",
            {"path": "f.txt", "old_text": "a", "new_text": "b", "replace_all": "maybe"},
            "replace_all",
        ),
        ("bash", {"command": "ls", "timeout": "soon"}, "timeout"),
        ("grep", {"pattern": "x", "literal": {"no": 1}}, "literal"),
        ("glob", {"pattern": 5}, "pattern"),
    ],
)
def test_bad_input_1_6_wrong_types_name_the_field(tools, call, name: str, raw: dict, field: str) -> None:
    out = call(tools[name], raw)
    assert out.is_error and f"`{field}`" in out.content


@pytest.mark.parametrize(
    ("name", "raw", "field"),
    [
        ("read", {}, "path"),
        ("write", {"path": "f.txt"}, "content"),
        ("edit", {"path": "f.txt", "old_text": "a"}, "new_text"),
        ("bash", {}, "command"),
        ("bash", {"command": ""}, "command"),
        ("grep", {"pattern": ""}, "pattern"),
        ("read", {"path": "f.txt", "lines": 3}, "lines"),  # unknown field: forbidden
    ],
)
def test_bad_input_1_6_missing_empty_or_unknown_fields(tools, call, name: str, raw: dict, field: str) -> None:
    out = call(tools[name], raw)
    assert out.is_error and f"`{field}`" in out.content


@pytest.mark.parametrize("raw", [None, "path=f.txt", ["f.txt"], 42])
def test_bad_input_1_6_input_that_is_not_an_object(tools, call, raw) -> None:
    for tool in tools.values():
        out = call(tool, raw)
        assert out.is_error and "JSON object" in out.content


def test_bad_input_paths_with_dotdot_resolve_like_a_shell(tmp_path: Path, tools, call) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "top.txt").write_text("top\n")
    assert call(tools["read"], {"path": "sub/../top.txt"}).content == "top"
