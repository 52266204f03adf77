"""Skills: a folder with a SKILL.md (front matter `name`, `description`; body = instructions).

Imported skills come from `use_skill(path)` on the host; workspace skills are discovered under
`<cwd>/.agents/skills/*/SKILL.md` through the sandbox when one is attached (contract 8, 9.2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

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


def parse_skill_md(text: str, *, where: str) -> tuple[dict[str, str], str]:
    """Split SKILL.md into its front matter (simple `key: value` lines) and its body."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise ConfigError(f"{where}: SKILL.md must start with a `---` front matter block holding name and description")
    meta: dict[str, str] = {}
    for i, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            body = "\n".join(lines[i + 1 :]).strip()
            break
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ConfigError(f"{where}: front matter line {i + 1} is not `key: value`: {line!r}")
        meta[key.strip()] = value.strip().strip("\"'")
    else:
        raise ConfigError(f"{where}: SKILL.md front matter is not closed with `---`")
    for key in ("name", "description"):
        if not meta.get(key):
            raise ConfigError(f"{where}: SKILL.md front matter needs a `{key}`")
    return meta, body


def load_skill(path: Path | str, *, source: Literal["imported", "workspace"] = "imported") -> Skill:
    """Load a skill folder from the host file system."""
    folder = Path(path).expanduser().resolve()
    skill_md = folder / "SKILL.md"
    if not skill_md.is_file():
        raise ConfigError(f"no SKILL.md in {str(folder)!r}: a skill is a folder holding SKILL.md")
    meta, body = parse_skill_md(skill_md.read_text(encoding="utf-8"), where=str(skill_md))
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
            meta, body = parse_skill_md(raw.decode("utf-8", "replace"), where=folder)
        except (OSError, ConfigError):
            # A half-written skill in the workspace must not stop the agent; it is just not offered.
            continue
        skills.append(Skill(meta["name"], meta["description"], body, folder, "workspace"))
    return skills
