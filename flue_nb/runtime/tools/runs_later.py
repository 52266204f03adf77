"""Places that run code later: a write there is an effect that outlives the call, so the approval
rules ask about it even under `allow` (issue 36.1).

`write_runs_later(path)` judges a path `write` or `edit` is about to change (resolved, symlinks
followed); `command_runs_later(command)` is the best effort for `bash`: it looks for those places
named in the command's text; `code_runs_later` does the same for the `python` tool's code, and
also looks for the names Python code finds those places by (`startup_dir`, `get_ipython_dir`,
`getsitepackages`, ...). Each tool names its check (`Tool.runs_later`: `path_runs_later`,
`shell_runs_later`, `code_runs_later`); the approval rules call it. What the text checks cannot
see: a path built at run time (`$HOME/.bash""rc`, a variable, `$(...)`, base64, strings the code
joins), a relative path after a `cd`, a program or script that writes the file itself (`python -c
...`, `sed -i` through a symlink, `git config core.hooksPath`), and `pip install`, which puts code
in `site-packages` by design. Under the shell sandbox (`sandbox=
"auto"`) those writes fail anyway: everything outside the workspace is read-only, and so are the
user's places of these inside it (`flue_nb.runtime.sandbox.autorun`, which names them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from flue_nb.runtime.sandbox.autorun import HOME_DIRS, HOME_FILES, config_dirs

__all__ = [
    "code_runs_later",
    "command_runs_later",
    "path_runs_later",
    "shell_runs_later",
    "write_runs_later",
]

_ANYWHERE = (
    (re.compile(r"(^|/)(site|dist)-packages(/|$)"), "Python imports code from site-packages"),
    (re.compile(r"\.pth$"), "Python runs the code in .pth files at every start"),
    (re.compile(r"(^|/)(site|user)customize\.py$"), "Python runs it at every start"),
    (re.compile(r"(^|/)\.git/hooks(/|$)"), "git runs its hooks at commits, checkouts and pushes"),
    (re.compile(r"(^|/)\.git/config$"), "git runs programs it names (core.hooksPath, core.fsmonitor, aliases)"),
    (re.compile(r"^/etc/(cron|crontab|anacrontab|profile|bash\.bashrc|environment)"), "the system runs it"),
    (re.compile(r"^/var/spool/cron(/|$)"), "cron runs it on a schedule"),
)


@lru_cache(maxsize=1)
def _jupyter_dirs() -> tuple[str, ...]:
    """Jupyter's config and IPython's profile dirs here (`jupyter_config_path`, `$IPYTHONDIR`), resolved."""
    return tuple(os.path.realpath(d) for d in config_dirs())


@lru_cache(maxsize=1)
def _jupyter_dirs_as_named() -> tuple[str, ...]:
    """Those dirs as a command may spell them: as given and resolved, longest first (a command
    naming `$IPYTHONDIR`'s own path, which need not contain `.ipython`, is asked about too)."""
    named = {d.rstrip(os.sep) for d in (*config_dirs(), *_jupyter_dirs())}
    return tuple(sorted((d for d in named if d), key=len, reverse=True))


def write_runs_later(path: str, cwd: str | None = None) -> str | None:
    """Why a write to `path` (relative to `cwd`) would run code later, or None."""
    full = os.path.realpath(os.path.join(cwd or os.getcwd(), os.path.expanduser(path)))
    home = os.path.realpath(os.path.expanduser("~"))
    rel = os.path.relpath(full, home) if full.startswith(home + os.sep) else None
    if rel is not None:
        if rel in HOME_FILES:
            return f"~/{rel}: {HOME_FILES[rel]}"
        for d, why in HOME_DIRS.items():
            if rel == d or rel.startswith(d + os.sep):
                return f"~/{rel}: {why}"
    for d in _jupyter_dirs():
        if full == d or full.startswith(d + os.sep):
            return f"{full}: IPython or Jupyter runs code from {d} at every start"
    if re.search(r"(^|/)etc/(jupyter|ipython)(/|$)", full):
        return f"{full}: Jupyter runs its config files at every start"
    for pattern, why in _ANYWHERE:
        if pattern.search(full):
            return f"{full}: {why}"
    return None


_MENTIONS = (
    (
        re.compile(r"\.ipython\b|\bipython_config\b|\bipython_kernel_config\b|\bprofile_\w+/startup\b"),
        "IPython's config or startup dir",
    ),
    (re.compile(r"\.jupyter\b|\bjupyter_\w*config\b|\betc/jupyter\b"), "Jupyter's config dir"),
    (
        # Not after a name, `)` or `]`: `~/.profile` is the file, `torch.profiler.profile(...)` is not.
        re.compile(
            r"(?<![\w)\]])\.(bashrc|bash_profile|bash_login|bash_logout|profile|zshrc|zshenv|zprofile|zlogin|envrc)\b"
        ),
        "a shell's startup file",
    ),
    (re.compile(r"\bPYTHONSTARTUP\b|\.pythonrc\b"), "Python's startup file"),
    (re.compile(r"(site|dist)-packages|\.pth\b|\b(site|user)customize\b"), "Python's site-packages"),
    (re.compile(r"\.git/hooks|\bcore\.hooksPath\b|\bcore\.fsmonitor\b|\.git/config\b"), "git hooks"),
    (
        re.compile(r"\bcrontab\b|/etc/cron|/var/spool/cron|\bsystemctl\s+--user\b|\.config/(autostart|systemd)"),
        "a scheduler",
    ),
)


# The names Python code reaches those places by, without spelling their paths.
_PYTHON_MENTIONS = (
    (
        re.compile(r"\b(startup_dir|profile_dir|get_ipython_dir|get_ipython_package_dir|locate_profile)\b"),
        "IPython's config or startup dir",
    ),
    # A startup dir joined from parts: `os.path.join(d, "profile_default", "startup", ...)`.
    (re.compile(r"\bprofile_\w+\b[\s\S]*?\bstartup\b"), "IPython's startup dir"),
    (re.compile(r"\b(jupyter_config_dir|jupyter_config_path)\b"), "Jupyter's config dir"),
    (re.compile(r"\b(getsitepackages|getusersitepackages|USER_SITE|purelib|platlib)\b"), "Python's site-packages"),
)


def command_runs_later(command: str, *, kind: str = "command") -> str | None:
    """Why a shell command (or code: `kind`) seems to touch a place that runs code later, or None
    (by its text only: see the module's note for what this misses)."""
    for pattern, what in _MENTIONS:
        m = pattern.search(command)
        if m:
            return f"the {kind} names {what} (`{m.group(0)}`), where a change runs code later"
    for d in _jupyter_dirs_as_named():
        if d in command:
            return f"the {kind} names `{d}`, where IPython or Jupyter runs code from at every start"
    return None


def path_runs_later(data: Mapping[str, Any], cwd: str | None) -> str | None:
    """`Tool.runs_later` of a tool whose `path` it writes (`write`, `edit`)."""
    path = data.get("path")
    return write_runs_later(path, cwd) if isinstance(path, str) and path else None


def shell_runs_later(data: Mapping[str, Any], cwd: str | None) -> str | None:
    """`Tool.runs_later` of a tool that runs its `command` in a shell (`bash`)."""
    command = data.get("command")
    return command_runs_later(command) if isinstance(command, str) and command else None


def code_runs_later(data: Mapping[str, Any], cwd: str | None) -> str | None:
    """`Tool.runs_later` of a tool that runs its `code` as Python (`python`): the places by their
    paths, as for a command, or by the names Python code finds them with."""
    code = data.get("code")
    if not isinstance(code, str) or not code:
        return None
    for pattern, what in _PYTHON_MENTIONS:
        m = pattern.search(code)
        if m:
            return f"the code names {what} (`{m.group(0)}`), where a change runs code later"
    return command_runs_later(code, kind="code")
