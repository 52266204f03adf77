"""The `%flue` entry: the magics (`flue`), one message run under a cell (`run`), the subcommands that
need no magic state (`commands`), loading the extension (`extension`), and the kernel's side of an
attached `flue-nb acp` (`attach`)."""

__all__ = ["attach", "commands", "extension", "flue", "run"]
