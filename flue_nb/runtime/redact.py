"""Secrets kept out of tool results: known secret values become `[redacted:NAME]`.

The model's `bash` can read the kernel's environment (`/proc/$PPID/environ`) and the `python`
tool sees `os.environ`, so a key could reach the model, the store and the display through a tool
result. `execute_tool` passes every result through `redact` before anyone sees it.

What counts as a secret, looked up at each call (so a key set later in the notebook counts):

- the provider key in use (`register_secret`, called by the provider that resolved it; 16
  characters or more), always;
- every environment variable (the kernel's, or one given to a sandbox's shell) whose name
  contains `KEY`, `TOKEN`, `SECRET` or `PASSWORD` (any case), when its value is at least 8
  characters (shorter values such as `KEYMAP=us` are too likely to occur in ordinary text);
- names matching a pattern in `FLUE_REDACT_DENY` (comma-separated `fnmatch` patterns, e.g.
  `DATABASE_URL,*_DSN`), when the value is at least 4 characters;

minus names matching a pattern in `FLUE_REDACT_ALLOW` (e.g. `PUBLIC_KEY_PATH`). A value is
caught as it is and as the escaping of Python's `repr` and of JSON shows it (backslashes doubled,
quotes escaped, JSON's `\\u` escapes); an encoded or split copy (base64, one character per line) is not
recognised. Callers that clip text redact before they clip, so no cut leaves a secret's prefix.

Besides tool results, every `FlueError`'s message and details pass through `redact` when the
error is made (what is stored with a submission, shown in a cell and in `%flue history`), and
so do an MCP server's stderr, a provider's error body and a compaction summary.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ALLOW_ENV",
    "DENY_ENV",
    "redact",
    "redact_value",
    "register_env",
    "register_headers",
    "register_secret",
    "secret_values",
]

ALLOW_ENV = "FLUE_REDACT_ALLOW"
"""Comma-separated name patterns never redacted (wins over the name rule, not over the key)."""
DENY_ENV = "FLUE_REDACT_DENY"
"""Comma-separated name patterns always redacted, whatever their name looks like."""

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)
_MIN_BY_NAME = 8
_MIN_NAMED = 4
_MIN_REGISTERED = 16  # real provider keys are far longer; a test's "test-key" must not count

_registered: dict[str, str] = {}
_opted_in: list[tuple[str, str]] = []
_lock = threading.Lock()


def register_secret(name: str, value: str | None) -> None:
    """Redact `value` (shown as `[redacted:NAME]`) from every tool result from now on.

    Values shorter than 16 characters are ignored: no real key is that short, and redacting a
    placeholder such as `test` would rewrite ordinary text.
    """
    if value and len(value) >= _MIN_REGISTERED:
        with _lock:
            _registered[value] = name


def register_env(env: Mapping[str, str]) -> None:
    """Variables an author gave a sandbox's shell: judged by the same rules as `os.environ`."""
    with _lock:
        _opted_in.extend((k, v) for k, v in env.items() if (k, v) not in _opted_in)


_AUTH_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


def register_headers(headers: Mapping[str, str]) -> None:
    """HTTP headers an author gave a server: credentials in them are redacted from now on.

    Headers named like a secret (`X-Api-Key`) are judged by the name rule; `Authorization`
    counts too, both whole and its credential alone (`Bearer <token>` -> `<token>`).
    """
    env: dict[str, str] = {}
    for name, value in headers.items():
        if name.lower() in _AUTH_HEADERS:
            env[f"{name.upper()}_HEADER_SECRET"] = value
            _scheme, _, credential = value.partition(" ")
            if credential:
                env[f"{name.upper()}_HEADER_TOKEN"] = credential.strip()
        else:
            env[name.upper().replace("-", "_")] = value
    register_env(env)


def _patterns(env: Mapping[str, str], var: str) -> tuple[str, ...]:
    return tuple(p.strip().upper() for p in env.get(var, "").split(",") if p.strip())


@functools.lru_cache(maxsize=4096)
def _rule(name: str, allow: tuple[str, ...], deny: tuple[str, ...]) -> int:
    """The minimum value length at which variable `name` is a secret (0: never)."""
    upper = name.upper()
    if name in (ALLOW_ENV, DENY_ENV):
        return 0
    if any(fnmatch.fnmatchcase(upper, p) for p in deny):
        return _MIN_NAMED
    if _SECRET_NAME.search(name) and not any(fnmatch.fnmatchcase(upper, p) for p in allow):
        return _MIN_BY_NAME
    return 0


def _environ_items(env: Mapping[str, str]) -> list[tuple[str, str]]:
    # os.environ decodes every name and value on access (~40 us for a typical environment, at
    # every tool call): read its raw bytes and decode only the values that are secrets.
    data = getattr(env, "_data", None) if env is os.environ else None
    if not isinstance(data, dict):
        return list(env.items())
    allow, deny = _patterns(env, ALLOW_ENV), _patterns(env, DENY_ENV)
    out = []
    for raw_name, raw_value in data.items():
        name = os.fsdecode(raw_name)
        if _rule(name, allow, deny) and len(raw_value) >= _MIN_NAMED:
            out.append((name, os.fsdecode(raw_value)))
    return out


def secret_values(env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The (value, name) pairs to redact now, longest value first."""
    env = os.environ if env is None else env
    allow, deny = _patterns(env, ALLOW_ENV), _patterns(env, DENY_ENV)
    found: dict[str, str] = {}
    with _lock:
        items = [*_opted_in, *_environ_items(env)]
    for name, value in items:
        minimum = _rule(name, allow, deny)
        if minimum and len(value) >= minimum:
            found[value] = name
    with _lock:
        found.update(_registered)  # the provider key in use, whatever the allow-list says
    for value, name in list(found.items()):
        for copy in _escaped(value):
            found.setdefault(copy, name)
    return sorted(found.items(), key=lambda item: -len(item[0]))


@functools.lru_cache(maxsize=1024)
def _escaped(value: str) -> tuple[str, ...]:
    """The other spellings of `value` inside a Python or JSON string literal."""
    backslashed = value.replace("\\", "\\\\")
    copies = {
        repr(value)[1:-1],  # Python's own choice of quotes
        backslashed.replace("'", "\\'"),  # inside '...' when repr chose "..."
        backslashed.replace('"', '\\"'),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        value.encode("unicode_escape").decode("ascii"),
    }
    # One level deeper: a repr inside JSON (a tool printing a dict, stored as JSON), and back.
    copies |= {c for first in list(copies) for c in (json.dumps(first)[1:-1], repr(first)[1:-1])}
    copies.discard(value)
    return tuple(copies)


def redact(text: str, pairs: list[tuple[str, str]] | None = None) -> str:
    """`text` with every secret value replaced by `[redacted:NAME]`."""
    for value, name in secret_values() if pairs is None else pairs:
        if value in text:
            text = text.replace(value, f"[redacted:{name}]")
    return text


def redact_value(value: Any, pairs: list[tuple[str, str]] | None = None) -> Any:
    """`redact` applied to every string in a JSON-like value (a new value when one changed)."""
    pairs = secret_values() if pairs is None else pairs
    if not pairs:
        return value
    if isinstance(value, str):
        return redact(value, pairs)
    if isinstance(value, dict):
        return {k: redact_value(v, pairs) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [redact_value(v, pairs) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value
