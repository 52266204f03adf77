"""Each tool names the argument that sums a call up (`Tool.summary_arg`); views learn it from
the agent's tools (`Summaries`), not from a table of the process."""

from __future__ import annotations

from pydantic import BaseModel

from flue_nb.runtime.sandbox.local import local
from flue_nb.runtime.tools import bash_tool, read_tool
from flue_nb.runtime.tools.summary import Summaries
from flue_nb.runtime.tools.tool import define_tool, tool


def test_builtin_tools_name_their_summary_argument(tmp_path: object) -> None:
    box = local(str(tmp_path))
    assert bash_tool(box).summary_arg == "command"
    assert read_tool(box).summary_arg == "path"
    assert Summaries([bash_tool(box)]).arg("bash") == "command"


def test_a_user_tool_can_name_its_summary_argument() -> None:
    @tool(summary_arg="query")
    def lookup_rows(table: str, query: str) -> str:
        """Look rows up."""
        return table + query

    assert lookup_rows.summary_arg == "query"
    summaries = Summaries([lookup_rows])
    assert summaries.line("lookup_rows", {"table": "sales", "query": "x > 1"}) == "x > 1"


def test_a_tool_without_one_leaves_it_to_the_view() -> None:
    class In(BaseModel):
        x: str

    plain = define_tool("plain_tool_without_summary", "d", input=In, run=lambda a: a.x)
    assert plain.summary_arg is None
    assert Summaries([plain]).arg("plain_tool_without_summary") is None


def test_building_a_tool_changes_no_other_view() -> None:
    # The old process-wide table let any tool built anywhere decide every view's summary.
    @tool(summary_arg="query")
    def lookup(table: str, query: str) -> str:
        """Look up."""
        return table + query

    assert Summaries().line("lookup", {"table": "sales", "query": "x > 1"}) == "sales"
    assert Summaries([lookup]).line("lookup", {"table": "sales", "query": "x > 1"}) == "x > 1"
