"""The `%flue` magics: reading a line, running one message under a cell, and the subcommands."""
