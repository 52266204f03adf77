"""The user's places whose files run code later: shell and Python startup files, IPython's and
Jupyter's config dirs, the desktop's and systemd's autostart.

Two parts use them. The approval rules (`flue_nb.runtime.tools.runs_later`) ask before a write
there, even under `allow`. The shell sandbox mounts those inside the workspace read-only
(`places_in`): when Jupyter starts in ~ the workspace is ~, and a contained command could
otherwise put a file in IPython's startup dir that the next kernel runs uncontained.
"""

from __future__ import annotations

import os

__all__ = ["HOME_DIRS", "HOME_FILES", "config_dirs", "places_in"]

HOME_FILES = {
    ".bashrc": "bash runs it at every interactive shell",
    ".bash_profile": "bash runs it at every login shell",
    ".bash_login": "bash runs it at every login shell",
    ".bash_logout": "bash runs it when a login shell exits",
    ".profile": "login shells run it",
    ".zshrc": "zsh runs it at every interactive shell",
    ".zshenv": "zsh runs it at every shell start",
    ".zprofile": "zsh runs it at every login shell",
    ".zlogin": "zsh runs it at every login shell",
    ".pythonrc": "Python runs it at every interactive start ($PYTHONSTARTUP)",
    ".pythonrc.py": "Python runs it at every interactive start ($PYTHONSTARTUP)",
    ".envrc": "direnv runs it on entering the directory",
}
"""Files in ~ and what runs them."""

HOME_DIRS = {
    ".ipython": "IPython runs its startup files and config at every kernel start",
    ".jupyter": "Jupyter runs its config files at every server and kernel start",
    ".config/fish": "fish runs it at every shell start",
    ".config/autostart": "the desktop runs it at every login",
    ".config/systemd/user": "systemd runs it for the user",
}
"""Directories in ~ and what runs their files."""


def config_dirs() -> list[str]:
    """Jupyter's config path, `$IPYTHONDIR` and `$PYTHONSTARTUP` here, as given (unresolved)."""
    try:
        from jupyter_core.paths import jupyter_config_path

        dirs = list(jupyter_config_path())
    except Exception:  # noqa: BLE001 - no jupyter_core: the home-dir names still apply
        dirs = []
    return dirs + _named_by_env()


def _user_config_dirs() -> list[str]:
    """The user's own of those: Jupyter's config dir, `$IPYTHONDIR`, `$PYTHONSTARTUP`. (An
    environment's `etc/jupyter`, in a venv inside the workspace, stays writable: `pip install`
    writes there by design, as it writes site-packages.)"""
    try:
        from jupyter_core.paths import jupyter_config_dir

        dirs = [jupyter_config_dir()]
    except Exception:  # noqa: BLE001 - no jupyter_core: ~/.jupyter is named in HOME_DIRS anyway
        dirs = []
    return dirs + _named_by_env()


def _named_by_env() -> list[str]:
    return [os.environ[var] for var in ("IPYTHONDIR", "PYTHONSTARTUP") if os.environ.get(var)]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def places_in(workspace: str) -> list[str]:
    """The existing places of the user's that run code later and lie inside `workspace` (a real
    path), as real paths, outermost only: what the sandbox mounts read-only over it. One that
    holds the workspace itself is left out (mounted read-only it would take the workspace too)."""
    home = os.path.expanduser("~")
    named = [os.path.join(home, n) for n in (*HOME_FILES, *HOME_DIRS)] + _user_config_dirs()
    out: list[str] = []
    for place in named:
        if not os.path.lexists(place):
            continue
        real = os.path.realpath(place)
        if not os.path.exists(real) or not _under(real, workspace) or _under(workspace, real):
            continue
        if not any(_under(real, o) for o in out):
            out = [o for o in out if not _under(o, real)] + [real]
    return out
