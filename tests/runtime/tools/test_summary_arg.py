"""Each tool names the argument that sums a call up (`Tool.summary_arg`), for the views."""

from __future__ import annotations

from flue_nb.runtime.sandbox.local import local
from flue_nb.runtime.tools import bash_tool, read_tool
from flue_nb.runtime.tools.tool import define_tool, summary_arg_of, tool


def test_builtin_tools_name_their_summary_argument(tmp_path: object) -> None:
    box = local(str(tmp_path))
    assert bash_tool(box).summary_arg == "command"
    assert read_tool(box).summary_arg == "path"
    assert summary_arg_of("bash") == "command"


def test_a_user_tool_can_name_its_summary_argument() -> None:
    @tool(summary_arg="query")
    def lookup_rows(table: str, query: str) -> str:
        """Look rows up."""
        return table + query

    assert lookup_rows.summary_arg == "query"
    assert summary_arg_of("lookup_rows") == "query"


def test_a_tool_without_one_leaves_it_to_the_view() -> None:
    from pydantic import BaseModel

    class In(BaseModel):
        x: str

    plain = define_tool("plain_tool_without_summary", "d", input=In, run=lambda a: a.x)
    assert plain.summary_arg is None
    assert summary_arg_of("plain_tool_without_summary") is None
