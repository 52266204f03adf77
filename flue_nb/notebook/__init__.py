"""The notebook layer: flue_nb inside a live Jupyter kernel.

One subpackage per idea, imports running one way (tests/test_public_api.py keeps both):

- `magics/` — the `%flue` entry: the line and cell magics, one cell's run, loading the extension.
- `serve/` — the live kernel as an MCP server for outside agents.
- `views/` — what a person sees of a conversation: one fold into typed parts, its renderers
  (text, history, static copies, figures, cards) and `views/chat/`, the chat widget.
- `kernel/` — the live kernel as the agent's workplace: the sandbox, the `python` tool, drawn
  figures, the notebook read and write tools, the notebook approver, the default assistant.
- `document/` — the notebook as a document: the protocol, the saved file, Colab's, the live one,
  the runner, the notebook's identity.
- `celllog/` — what the kernel ran: every cell, recorded as it runs.

`magics` and `serve` may import `views`, `views` may import `kernel`, and `kernel` may import
`document` and `celllog`; nothing imports up (deferred imports included), and no module imports a
private module or name (`_x`) of another subpackage.
"""

__all__ = ["celllog", "document", "kernel", "magics", "serve", "views"]
