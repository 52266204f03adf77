"""The runtime core: everything that runs an agent, with no IPython in sight.

Layout (one folder per concern):

- `errors`, `events`, `messages`, `session` — the public surface (re-exported by `flue_nb`).
- `coordinator` — the runtime's own thread and event loop (the kernel's loop is already busy);
  `warm` — a head start for the first message of a process.
- `agent/` — `@agent`, the hooks an agent function calls, skills, the system prompt.
- `core/` — the engine: turn loop, conversations, compaction, token accounting, recovery,
  events rebuilt from the store. Internal: nothing outside `flue_nb.runtime` imports it.
- `providers/` — the `Model` protocol, the Anthropic provider, the offline models, record/replay.
- `sandbox/` — the `Sandbox` protocol and the local (host) sandbox.
- `store/` — the `Store` protocol, the SQLite store, the PostgreSQL store, `url` (which store a
  `db=` setting names, and masking its password).
- `tools/` — `Tool`, the six sandbox tools, `truncate`, the framework tools, the approval policy,
  MCP servers.

- `text` — the one policy for text that is not valid UTF-8 (escaped where it enters);
  `redact` — known secrets out of every text that leaves (redacted before any cut);
  `facts` — how a tool call's approval was decided and what it changed in the namespace.

Modules whose names start with `_` are private to their package. A test
(tests/test_public_api.py) checks that the notebook layer imports nothing from `core/` or from a
private runtime module.
"""

__all__ = [
    "agent",
    "coordinator",
    "errors",
    "events",
    "facts",
    "images",
    "materializer",
    "messages",
    "providers",
    "redact",
    "sandbox",
    "session",
    "store",
    "text",
    "tools",
    "tracing",
    "warm",
]
