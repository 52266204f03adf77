"""The live kernel as the agent's workplace: the sandbox, the `python` tool on the user's namespace
and what its code drew, the notebook's read and write tools, who answers an approval, the default
notebook assistant, and the sandboxed kernel's launcher (`contained`)."""

__all__ = [
    "approve",
    "assistant",
    "contained",
    "drawing",
    "notebook_tools",
    "python_tool",
    "read_tools",
    "sandbox",
    "write_tools",
]
