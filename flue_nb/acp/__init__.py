"""flue_nb and the Agent Client Protocol: `flue-nb acp` serves its conversations to ACP clients over
stdio (`agent`, in a running kernel: `kernel`), and `host(COMMAND)` brings an external ACP agent
into flue_nb's sessions and chat (`hosting`; `%flue chat --agent acp:COMMAND`). `jupyter_ai` is
flue_nb as a persona of jupyter-ai's chat (loaded by jupyter-ai through its entry point only).

Needs `pip install 'flue_nb[acp]'` (the `agent-client-protocol` package); nothing here is
imported by `import flue_nb`.
"""

from __future__ import annotations

from flue_nb.acp.hosting import host

__all__ = ["agent", "host", "hosting", "jupyter_ai", "kernel", "updates"]
