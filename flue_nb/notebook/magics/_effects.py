"""`%flue changes [-c ID] [SUBMISSION]`, `%flue undo [ITEM|all] [--force]`, `%flue rewind STEP
[--force]` (issue 34.2, 34.3): the text front end's review, undo and rewind. Their options may
stand before the subcommand or after it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from flue_nb.notebook.magics._line import _TOKEN, _VALUE_OPTIONS, FlueCellError

if TYPE_CHECKING:
    from flue_nb.runtime.session import Session

__all__ = ["EFFECT_COMMANDS", "effects_command", "install_targets", "recover_note", "split_args"]

EFFECT_COMMANDS = ("changes", "undo", "rewind")
_NUMBER = re.compile(r"-\d+(\.\d+)?")
_FORCE = ("--force", "-f")


def split_args(tail: str) -> tuple[list[str], str, bool]:
    """A subcommand's options wherever they stand (`%flue undo 2.1 -c X` is `%flue -c X undo
    2.1`), its argument (the other words), and whether `--force` was given."""
    argv: list[str] = []
    words: list[str] = []
    force = False
    expect_value = False
    for m in _TOKEN.finditer(tail):
        tok = m.group(0)
        if expect_value:
            argv.append(tok[1:-1] if tok[:1] in "'\"" and tok[-1:] == tok[:1] and len(tok) > 1 else tok)
            expect_value = False
        elif tok in _FORCE:
            force = True
        elif tok.startswith("-") and len(tok) > 1 and not _NUMBER.fullmatch(tok):
            argv.append(tok)
            expect_value = tok in _VALUE_OPTIONS
        else:
            words.append(tok)
    return argv, " ".join(words), force


def install_targets(shell: Any) -> None:
    """Point undo at this kernel's namespace and its notebook: the live document when there is
    one (collaboration, or the open tab), else the saved file."""
    from flue_nb.notebook.document.saved import notebook_path
    from flue_nb.notebook.document.undo_cells import DocumentCells
    from flue_nb.runtime.undo import use_cells, use_namespace

    use_namespace(lambda: shell.user_ns)
    use_cells(DocumentCells(notebook_path(shell.user_ns), shell.user_ns))


def recover_note(session: Session) -> None:
    """Finish an undo or rewind a crash cut off, and say so (at the next `%flue`)."""
    from flue_nb.runtime.undo import recover

    said = recover(session.store, session.conversation_id)
    if said:
        print(f"flue: {said}")


def effects_command(name: str, arg: str, force: bool, session: Session, shell: Any) -> None:
    """Run one of `changes`, `undo`, `rewind`."""
    from flue_nb.runtime.errors import FlueError

    install_targets(shell)
    recover_note(session)
    try:
        if name == "changes":
            items = session.changes(arg or None)
            if not items:
                print("flue: no recorded changes" + (f" in submission {arg}" if arg else ""))
                return
            print(f"flue: changes of submission {items[0].submission_id} (undo with `%flue undo STEP.ITEM|all`):")
            for c in items:
                print(f"  {c.describe()}")
            return
        if name == "undo":
            result = session.undo(arg or "all", force=force)
        else:
            if not arg:
                raise FlueCellError(
                    "flue: `%flue rewind STEP`: give the step number (as `%flue changes` lists it) or its tool call id"
                )
            step: int | str = int(arg) if arg.isdigit() else arg
            result = session.rewind(step, force=force)
    except (LookupError, FlueError) as exc:
        raise FlueCellError(f"flue: {exc}") from None
    print(f"flue: {result.text()}")
