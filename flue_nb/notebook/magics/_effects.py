"""`%flue changes [-c ID] [SUBMISSION]`, `%flue undo [ITEM|all] [--force]`, `%flue rewind STEP
[--force]` (issue 34.2, 34.3): the text front end's review, undo and rewind."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from flue_nb.notebook.magics._line import FlueCellError

if TYPE_CHECKING:
    from flue_nb.runtime.session import Session

__all__ = ["EFFECT_COMMANDS", "effects_command", "install_targets", "recover_note", "split_force"]

EFFECT_COMMANDS = ("changes", "undo", "rewind")
_FORCE = re.compile(r"(^|\s)(--force|-f)(?=\s|$)")


def split_force(tail: str) -> tuple[str, bool]:
    """The subcommand's arguments without `--force`, and whether it was given."""
    return _FORCE.sub(" ", tail), _FORCE.search(tail) is not None


def install_targets(shell: Any) -> None:
    """Point undo at this kernel's namespace and its saved notebook."""
    from flue_nb.notebook.document.saved import notebook_path
    from flue_nb.notebook.document.undo_cells import SavedCells
    from flue_nb.runtime.undo import use_cells, use_namespace

    use_namespace(lambda: shell.user_ns)
    use_cells(SavedCells(notebook_path(shell.user_ns)))


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
