"""flue_nb as an Agent Client Protocol agent: `flue-nb acp` serves its conversations over stdio.

Needs `pip install 'flue_nb[acp]'` (the `agent-client-protocol` package); nothing here is
imported by `import flue_nb`.
"""

from __future__ import annotations

__all__ = ["agent", "kernel", "updates"]
