"""The engine: the turn loop, conversations, compaction and token accounting (internal)."""
