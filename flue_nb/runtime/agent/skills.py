"""Skills: a folder with a SKILL.md (YAML front matter `name`, `description`; body = instructions).

Imported skills come from `use_skill(path)` on the host; workspace skills are discovered under
`<cwd>/.agents/skills/*/SKILL.md` through the sandbox when one is attached (contract 8, 9.2).
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from flue_nb.runtime.errors import ConfigError

__all__ = ["Skill", "discover_workspace_skills", "load_skill", "parse_skill_md"]

SKILLS_DIR = ".agents/skills"


@dataclass(frozen=True, slots=True)
class Skill:
    """A skill the model can activate."""

    name: str
    description: str
    instructions: str
    path: str
    """The skill's folder (host path for imported skills, sandbox path for workspace ones)."""
    source: Literal["imported", "workspace"] = "imported"
    resources: tuple[str, ...] = field(default=())
    """Files packaged beside SKILL.md, relative to `path` (imported skills only)."""


_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
MAX_NAME = 64
"""Longest skill `name` the Agent Skills standard allows."""
MAX_DESCRIPTION = 1024
"""Longest skill `description` the standard allows; a longer one loads, with a warning."""
HARD_MAX_DESCRIPTION = 4096
"""Longest `description` loaded at all: every description sits in the system prompt."""


def _front_matter(text: str, where: str) -> tuple[str, str]:
    """The YAML between the opening and the closing `---`, and the body after it."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise ConfigError(f"{where}: SKILL.md must start with a `---` front matter block holding name and description")
    for i, line in enumerate(lines[1:], start=1):
        if line.rstrip() == "---":
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1 :]).strip()
    raise ConfigError(f"{where}: SKILL.md front matter is not closed with `---`")


def _strings(value: object) -> object:
    # BaseLoader already gives str, list and dict only; an empty value (`license:`) is "".
    if isinstance(value, dict):
        return {str(k): _strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings(v) for v in value]
    return "" if value is None else str(value)


def parse_skill_md(text: str, *, where: str, folder_name: str | None = None) -> tuple[dict[str, Any], str]:
    """Split SKILL.md into its YAML front matter and its body, and check `name` and `description`.

    Every scalar stays a string (`version: 1.0` is `"1.0"`, `yes` is `"yes"`), as the Agent
    Skills reference validator reads it; keys other than `name` and `description` are kept but
    not checked. `name` must be 1-64 lowercase letters, digits and single hyphens and, when
    `folder_name` is given, equal to it; `description` 1-4096 characters, with a warning past the
    standard's 1024 (real skills exceed it: Anthropic's `claude-api` has 1,068, and the clients
    users compare us with load them).
    """
    import yaml  # only when a skill is loaded

    raw, body = _front_matter(text, where)
    try:
        # BaseLoader resolves no tags: every scalar is a string, nothing is constructed.
        meta = _strings(yaml.load(raw, Loader=getattr(yaml, "CBaseLoader", yaml.BaseLoader)))  # noqa: S506
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: SKILL.md front matter is not valid YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{where}: SKILL.md front matter must be a mapping of `key: value` lines")
    name, description = meta.get("name"), meta.get("description")
    for key, value in (("name", name), ("description", description)):
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}: SKILL.md front matter needs a `{key}` (a non-empty string)")
    assert isinstance(name, str) and isinstance(description, str)
    if len(name) > MAX_NAME or not _NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: skill name {name!r} must be 1-{MAX_NAME} lowercase letters, digits and hyphens "
            "(no leading, trailing or doubled hyphen), e.g. `csv-report`"
        )
    if folder_name is not None and name != folder_name:
        raise ConfigError(f"{where}: skill name {name!r} must equal its folder's name {folder_name!r}; rename one")
    if len(description) > HARD_MAX_DESCRIPTION:
        raise ConfigError(
            f"{where}: skill description is {len(description):,} characters; at most "
            f"{HARD_MAX_DESCRIPTION:,} are loaded (the Agent Skills standard allows {MAX_DESCRIPTION:,})"
        )
    if len(description) > MAX_DESCRIPTION:
        warnings.warn(
            f"{where}: skill description is {len(description):,} characters; the Agent Skills standard "
            f"allows {MAX_DESCRIPTION:,}. It is loaded whole, but other clients may refuse it.",
            UserWarning,
            stacklevel=3,
        )
    return meta, body


def load_skill(path: Path | str, *, source: Literal["imported", "workspace"] = "imported") -> Skill:
    """Load a skill folder from the host file system."""
    folder = Path(path).expanduser().resolve()
    skill_md = folder / "SKILL.md"
    if not skill_md.is_file():
        raise ConfigError(f"no SKILL.md in {str(folder)!r}: a skill is a folder holding SKILL.md")
    meta, body = parse_skill_md(skill_md.read_text(encoding="utf-8"), where=str(skill_md), folder_name=folder.name)
    resources = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(root, name), folder)
            if rel != "SKILL.md" and not name.startswith("."):
                resources.append(rel)
    return Skill(meta["name"], meta["description"], body, str(folder), source, tuple(resources))


async def discover_workspace_skills(sandbox: object) -> list[Skill]:
    """Find `<cwd>/.agents/skills/*/SKILL.md` in the sandbox; unreadable ones are skipped."""
    base = os.path.join(sandbox.cwd, SKILLS_DIR)  # type: ignore[attr-defined]
    try:
        entries = await sandbox.list_dir(base)  # type: ignore[attr-defined]
    except (FileNotFoundError, NotADirectoryError, OSError):
        return []
    skills = []
    for entry in entries:
        if entry.kind != "dir":
            continue
        folder = os.path.join(base, entry.name)
        try:
            raw = await sandbox.read_file(os.path.join(folder, "SKILL.md"))  # type: ignore[attr-defined]
            meta, body = parse_skill_md(raw.decode("utf-8", "replace"), where=folder, folder_name=entry.name)
        except (OSError, ConfigError):
            # A half-written skill in the workspace must not stop the agent; it is just not offered.
            continue
        skills.append(Skill(meta["name"], meta["description"], body, folder, "workspace"))
    return skills
