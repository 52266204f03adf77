"""What a person sees of a conversation: one fold of its events into typed parts, and its renderers.

`fold` folds the event stream into the parts of `parts`; `transcript` renders them as a cell's
text, `history` as `%flue history` and `%flue status`, `static` as a static copy, `figures` the
figures in it, `cards` how a tool's card is drawn; `chat/` is the chat widget."""

__all__ = ["cards", "chat", "figures", "fold", "history", "parts", "static", "transcript"]
