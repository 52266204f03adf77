"""flue_nb: a tool-using agent inside your live Jupyter kernel, durable in SQLite."""
