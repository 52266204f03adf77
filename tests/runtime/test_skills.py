"""SKILL.md front matter is YAML, read as the Agent Skills standard reads it (issue 20.6): block
scalars, quoted strings with escapes and `metadata:` maps load; every value stays a string;
unknown keys are ignored; `name` and `description` are checked with an error naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from flue_nb.runtime.agent.skills import load_skill, parse_skill_md
from flue_nb.runtime.errors import ConfigError


def skill(tmp_path: Path, front: str, *, folder: str = "pdf-tools", body: str = "Use it well.") -> Path:
    d = tmp_path / folder
    d.mkdir(parents=True, exist_ok=True)
    (d / "SKILL.md").write_text(f"---\n{front}\n---\n{body}\n", encoding="utf-8")
    return d


def test_a_folded_block_scalar_description_is_one_line(tmp_path: Path) -> None:
    s = load_skill(
        skill(
            tmp_path,
            "name: pdf-tools\ndescription: >-\n  Extract text and tables from PDF files,\n  fill forms and merge documents.",
        )
    )
    assert s.description == "Extract text and tables from PDF files, fill forms and merge documents."
    assert s.instructions == "Use it well."


def test_a_literal_block_scalar_keeps_its_lines(tmp_path: Path) -> None:
    s = load_skill(skill(tmp_path, "name: pdf-tools\ndescription: |-\n  First line.\n  Second line."))
    assert s.description == "First line.\nSecond line."


def test_quoted_strings_with_escapes_and_colons(tmp_path: Path) -> None:
    s = load_skill(skill(tmp_path, 'name: "pdf-tools"\ndescription: "Use when: the user says \\"PDF\\"\\tor forms"'))
    assert s.name == "pdf-tools"
    assert s.description == 'Use when: the user says "PDF"\tor forms'
    s = load_skill(skill(tmp_path, "name: 'pdf-tools'\ndescription: 'It''s for PDFs: all of them'"))
    assert s.description == "It's for PDFs: all of them"


def test_metadata_maps_and_unknown_keys_are_kept_as_strings(tmp_path: Path) -> None:
    meta, _ = parse_skill_md(
        "---\nname: pdf-tools\ndescription: PDFs.\nlicense: Apache-2.0\nallowed-tools: Bash(git:*) Read\n"
        "metadata:\n  version: 1.0\n  internal: yes\n  author: me\nfuture-key: [a, 1]\n---\nbody",
        where="SKILL.md",
    )
    assert meta["metadata"] == {"version": "1.0", "internal": "yes", "author": "me"}
    assert meta["allowed-tools"] == "Bash(git:*) Read"
    assert meta["future-key"] == ["a", "1"]


def test_a_value_that_yaml_would_read_as_a_number_or_bool_stays_a_string(tmp_path: Path) -> None:
    s = load_skill(skill(tmp_path, "name: pdf-tools\ndescription: no", folder="pdf-tools"))
    assert s.description == "no"


@pytest.mark.parametrize(
    ("front", "folder", "says"),
    [
        ("name: PDF_Tools\ndescription: x", "PDF_Tools", "lowercase letters, digits and hyphens"),
        ("name: -pdf\ndescription: x", "-pdf", "no leading, trailing or doubled hyphen"),
        ("name: pdf--tools\ndescription: x", "pdf--tools", "doubled hyphen"),
        ("name: " + "a" * 65 + "\ndescription: x", "a" * 65, "1-64"),
        ("name: other-name\ndescription: x", "pdf-tools", "must equal its folder's name 'pdf-tools'"),
        ("name: pdf-tools\ndescription: " + "d" * 4097, "pdf-tools", "at most 4,096"),
        ("name: pdf-tools", "pdf-tools", "needs a `description`"),
        ("name: pdf-tools\ndescription: [a, b]", "pdf-tools", "needs a `description` (a non-empty string)"),
        ("name: pdf-tools\ndescription: 'unclosed", "pdf-tools", "not valid YAML"),
        ("- just\n- a list", "pdf-tools", "must be a mapping"),
    ],
)
def test_invalid_front_matter_is_a_clear_error_naming_the_file(
    tmp_path: Path, front: str, folder: str, says: str
) -> None:
    d = skill(tmp_path, front, folder=folder)
    with pytest.raises(ConfigError) as info:
        load_skill(d)
    assert says in info.value.message
    assert str(d / "SKILL.md") in info.value.message


def test_a_description_over_the_standards_1024_loads_with_a_warning_naming_the_limit(tmp_path: Path) -> None:
    # Issue 32.10: Anthropic's own `claude-api` skill has a 1,068-character description; it was
    # refused whole, where the clients users compare us with load it.
    description = ("Build apps with the Claude API or Anthropic SDK. " * 22)[:1068].strip()
    d = skill(tmp_path, f"name: claude-api\ndescription: {description}", folder="claude-api")
    with pytest.warns(UserWarning, match=r"1,06\d characters.*standard allows 1,024") as caught:
        s = load_skill(d)
    assert s.name == "claude-api" and s.description == description  # kept whole
    assert str(d / "SKILL.md") in str(caught[0].message)


def test_a_skill_whose_name_differs_from_its_folder_still_fails_clearly(tmp_path: Path) -> None:
    d = skill(tmp_path, "name: claude-api\ndescription: " + "d" * 1068, folder="claude_api")
    with pytest.raises(ConfigError, match="must equal its folder's name 'claude_api'"):
        load_skill(d)
