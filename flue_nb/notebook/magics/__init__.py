"""The `%flue` entry: the magics (`flue`), one message run under a cell (`run`), the subcommands that
need no magic state (`commands`), and loading the extension (`extension`)."""

__all__ = ["commands", "extension", "flue", "run"]
