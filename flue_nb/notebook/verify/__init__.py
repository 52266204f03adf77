"""Proving the notebook reruns: rerun the saved notebook in a fresh kernel with `%%flue` cells
replaying their stored answers (`rerun`, `replay`), sum namespaces up and compare them (`digest`),
find the agent's steps that changed state in no cell (`steps`), report (`report`, `live`), and put
those steps into the notebook as cells (`materialize`)."""

__all__ = ["digest", "live", "materialize", "replay", "report", "rerun", "steps"]
