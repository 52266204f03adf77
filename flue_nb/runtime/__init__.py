"""The runtime core: everything that runs an agent, with no IPython in sight.

Layout (one folder per concern):

- `errors`, `events`, `messages`, `session` — the public surface (re-exported by `flue_nb`).
- `agent/` — `@agent`, the hooks an agent function calls, skills, the system prompt.
- `core/` — the engine: turn loop, conversations and their coordinator thread, compaction,
  token accounting. Internal: nothing outside `flue_nb.runtime` imports it except through
  `session`.
- `providers/` — the `Model` protocol, the Anthropic provider, the offline models, record/replay.
- `sandbox/` — the `Sandbox` protocol and the local (host) sandbox.
- `store/` — the `Store` protocol and the SQLite store.
- `tools/` — `Tool`, the six sandbox tools, the framework tools, the approval policy.

Modules whose names start with `_` are private to their package.
"""
