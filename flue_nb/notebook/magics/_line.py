"""Reading a `%flue` line: leading options vs the message.

Also the input transform that lets a question end in `?` (IPython would read that as a help
request before the magic ever sees the line).
"""

from __future__ import annotations

import re

__all__ = [
    "SUBCOMMANDS",
    "TAKES_ARGUMENT",
    "FlueCellError",
    "protect_line_magic",
    "split_line",
]

SUBCOMMANDS = ("abort", "allow", "chat", "compact", "help", "history", "mcp", "revoke", "status", "use")
TAKES_ARGUMENT = ("use", "allow", "revoke")
"""Subcommands that are the subcommand whatever follows (`%flue -- use ...` sends a message)."""
_VALUE_OPTIONS = {
    "-a",
    "--agent",
    "-c",
    "--conversation",
    "-m",
    "--model",
    "--db",
    "--approval",
    "--attach",
    "--max-turns",
    "--max-cost",
}
_TOKEN = re.compile(r'"[^"]*"|\'[^\']*\'|\S+')


class FlueCellError(Exception):
    """A cell's submission failed, was aborted, or could not start; shown without a traceback."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows these lines instead of a traceback; the cell still counts as failed,
        # so "run all", nbclient and `flue-nb run` stop loudly.
        return [str(self)]


def split_line(line: str) -> tuple[list[str], str]:
    """Split a magic line into its leading options (argv) and the message after them, verbatim."""
    argv: list[str] = []
    expect_value = False
    rest = ""
    for m in _TOKEN.finditer(line):
        tok = m.group(0)
        if expect_value:
            argv.append(tok[1:-1] if tok[:1] in "'\"" and tok[-1:] == tok[:1] and len(tok) > 1 else tok)
            expect_value = False
        elif tok == "--":
            rest = line[m.end() :]
            break
        elif tok.startswith("-") and len(tok) > 1:
            argv.append(tok)
            expect_value = tok in _VALUE_OPTIONS
        else:
            rest = line[m.start() :]
            break
    return argv, rest.strip()


_LINE = re.compile(r"%flue(?:\s(.*))?")


def protect_line_magic(lines: list[str]) -> list[str]:
    """Turn `%flue MESSAGE` lines into explicit magic calls before IPython reads a trailing `?`.

    IPython treats a line ending in `?` as a help request (`%flue what is in data.csv?` would
    look up `data.csv`); a question is the commonest message there is. `%flue?` stays help.
    """
    out = []
    for line in lines:
        body = line.rstrip("\n")
        stripped = body.lstrip()
        m = _LINE.fullmatch(stripped)
        if m is None or re.fullmatch(r"%flue\s*\?{1,2}", stripped.strip()):
            out.append(line)
            continue
        indent = body[: len(body) - len(stripped)]
        out.append(f"{indent}get_ipython().run_line_magic('flue', {(m.group(1) or '').strip()!r})\n")
    return out
