"""The live kernel as a sandbox: its working directory, and the `python` tool on its namespace."""
