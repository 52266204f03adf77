"""The notebook as the agent sees it: the kernel's cell log, the document, and the notebook tools."""
