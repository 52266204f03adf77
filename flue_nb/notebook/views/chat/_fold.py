"""The chat widget's fold: the one event fold (`views.fold.Fold`) read as the widget's JSON.

`history()` and `live()` are the synced traits' values (`chat.wire.BlockJSON`): settled and
joined blocks, then the queued and running ones, in admission order.
"""

from __future__ import annotations

from flue_nb.notebook.views.chat.wire import BlockJSON, block_json
from flue_nb.notebook.views.fold import Fold
from flue_nb.notebook.views.parts import RESULT_CHARS

__all__ = ["RESULT_CHARS", "ChatFold"]


class ChatFold(Fold):
    """Blocks (one per submission) built from events, read as the widget's JSON."""

    def history(self) -> list[BlockJSON]:
        """Settled (and joined) blocks, as plain data, in admission order."""
        return [block_json(b) for b in self.blocks.values() if b.settled]

    def live(self) -> list[BlockJSON]:
        """Blocks still queued or running, as plain data."""
        return [block_json(b) for b in self.blocks.values() if not b.settled]
