"""The child of the rewind crash test: rewinds a recorded run and stops (to be SIGKILLed) after
the first of its file restores, with the journal's `begun` record written.

    python effects_crash_child.py DB DIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from flue_nb.runtime.store.sqlite import SQLiteStore
from flue_nb.runtime.undo import rewind


def main() -> None:
    db, work = sys.argv[1], Path(sys.argv[2])
    store = SQLiteStore(db)

    def stop(n: int) -> None:
        if n == 1:  # one file restored, the other not yet
            (work / "marker").write_text("reached")
            time.sleep(120)

    rewind(store, "c", "s1", 1, crash_at=stop)


if __name__ == "__main__":
    main()
