"""The kernel `python` tool on a plain dict namespace: output, errors, variables, large results."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from flue_nb.notebook.kernel.python_tool import FlueResults, python_tool
from flue_nb.runtime.facts import NamespaceDiff
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput, execute_tool


@pytest.fixture
def ns() -> dict[str, Any]:
    return {"__name__": "__main__"}


@pytest.fixture
def run(ns: dict[str, Any]) -> Callable[[str], ToolOutput]:
    tool = python_tool(ns)
    return lambda code: _call(tool, code)


def _call(tool: Tool, code: str) -> ToolOutput:
    return asyncio.run(execute_tool(tool, {"code": code}, ToolContext(call_id="c1")))


def test_stdout_and_stderr_are_captured_in_order(run: Callable[[str], ToolOutput]) -> None:
    out = run("import sys\nprint('to out')\nprint('to err', file=sys.stderr)\nprint('out again')")
    assert not out.is_error
    assert out.content.startswith("to out\nto err\nout again")


def test_last_expression_value_is_shown_as_its_repr(run: Callable[[str], ToolOutput]) -> None:
    out = run("x = 20\nx + 1")
    assert "Out: 21" in out.content
    assert out.details is not None and out.details["value_type"] == "int"


def test_none_and_semicolon_hide_the_last_value(run: Callable[[str], ToolOutput]) -> None:
    assert "Out" not in run("None").content
    assert "Out" not in run("1 + 1;").content


def test_statements_run_in_the_namespace_and_persist(run: Callable[[str], ToolOutput], ns: dict[str, Any]) -> None:
    run("def double(v):\n    return 2 * v")
    assert "Out: 14" in run("double(7)").content
    assert ns["double"](2) == 4


def test_code_is_not_compiled_with_this_modules_future_flags(
    run: Callable[[str], ToolOutput],
) -> None:
    # `from __future__ import annotations` in python_tool.py must not turn annotations into strings.
    out = run("def f(a: int) -> int: ...\nf.__annotations__['a']")
    assert "Out: <class 'int'>" in out.content


def test_exception_becomes_an_error_result_showing_the_users_line(
    run: Callable[[str], ToolOutput],
) -> None:
    out = run("print('before')\ndef inner():\n    return 1 / 0\ninner()")
    assert out.is_error
    assert out.content.startswith("before\nTraceback (most recent call last):")
    assert "return 1 / 0" in out.content
    assert "ZeroDivisionError: division by zero" in out.content
    assert "python_tool.py" not in out.content and "flue_nb" not in out.content
    assert out.details is not None and out.details["error"] == "exception"


def test_system_exit_is_an_error_result_not_an_exit(run: Callable[[str], ToolOutput]) -> None:
    out = run("raise SystemExit(3)")
    assert out.is_error and "SystemExit: 3" in out.content


def test_syntax_error_is_reported_clearly_and_nothing_runs(
    run: Callable[[str], ToolOutput], ns: dict[str, Any]
) -> None:
    out = run("y = 1\nx = = 2")
    assert out.is_error
    assert "SyntaxError" in out.content and "x = = 2" in out.content and "line 2" in out.content
    assert "did not run" in out.content
    assert "y" not in ns
    assert out.details is not None and out.details["error"] == "syntax"


def test_no_output_says_so(run: Callable[[str], ToolOutput]) -> None:
    assert run("pass").content == "(no output)"


def test_created_variables_are_reported_with_type_and_size(
    run: Callable[[str], ToolOutput],
) -> None:
    out = run("a = [1, 2, 3]\nname = 'flue'\n_hidden = 1")
    assert "Variables: created `a` (list, len 3), `name` (str, len 4)" in out.content
    assert "_hidden" not in out.content
    assert out.namespace == NamespaceDiff(added=("a", "name"))
    assert out.details is not None and "variables" not in out.details  # the diff is the typed field


def test_rebinding_and_in_place_append_are_changes(run: Callable[[str], ToolOutput]) -> None:
    run("x = 1\nitems = []\nd = {'k': 1}\nsame = 5")
    out = run("x = 2\nitems.append(1)\nd['k'] = [0]\nsame = 5")
    assert out.namespace is not None
    assert out.namespace.changed == ("d", "items", "x")
    assert "changed `d` (dict, len 1), `items` (list, len 1), `x` (int)" in out.content


def test_in_place_element_replacement_in_a_small_list_is_a_change(
    run: Callable[[str], ToolOutput],
) -> None:
    run("xs = [object(), object()]")
    out = run("xs[0] = object()")
    assert out.namespace is not None and out.namespace.changed == ("xs",)


def test_shape_change_of_an_array_like_is_a_change(run: Callable[[str], ToolOutput], ns: dict[str, Any]) -> None:
    class Frame:
        """Stands in for a DataFrame: has a `shape`, and its data is never looked at."""

        def __init__(self) -> None:
            self.shape = (3, 2)

        def __hash__(self) -> int:
            raise AssertionError("data must never be hashed")

    ns["df"] = Frame()
    out = run("df.shape = (3, 3)")
    assert out.namespace is not None and out.namespace.changed == ("df",)
    assert "`df` (Frame, shape (3, 3))" in out.content


def test_deleted_variables_are_reported(run: Callable[[str], ToolOutput]) -> None:
    run("tmp = 1")
    out = run("del tmp")
    assert out.content == "Variables: deleted `tmp`"


def test_ipython_plumbing_and_untouched_names_are_not_reported(
    run: Callable[[str], ToolOutput], ns: dict[str, Any]
) -> None:
    ns.update(In=[], Out={}, exit=None, quit=None, get_ipython=None, keep=[1])
    out = run("In.append('x'); Out[1] = 2; exit = 1; keep")
    assert out.namespace == NamespaceDiff()
    assert "Variables" not in out.content


def test_variables_are_reported_even_when_the_code_fails(run: Callable[[str], ToolOutput]) -> None:
    out = run("partial = 1\nraise ValueError('late')")
    assert out.is_error and "created `partial` (int)" in out.content


def test_truncation_keeps_the_tail(run: Callable[[str], ToolOutput]) -> None:
    out = run("for i in range(5000):\n    print(f'line {i}')")
    assert out.details is not None and out.details["truncated"] is True
    assert "line 4999" in out.content
    assert "line 0\n" not in out.content and "line 2999\n" not in out.content
    assert "line 3000\n" in out.content


def test_large_output_is_kept_behind_a_handle_and_can_be_sliced(
    run: Callable[[str], ToolOutput], ns: dict[str, Any]
) -> None:
    out = run("for i in range(5000):\n    print(f'line {i}')")
    assert out.details is not None
    handle = out.details["handle"]
    assert handle == 1
    assert "`_flue.results[1]`" in out.content and "bytes" in out.content
    assert isinstance(ns["_flue"], FlueResults)
    sliced = run("print(_flue.results[1][:14])")
    assert sliced.content == "line 0\nline 1"
    assert sliced.namespace is not None and "_flue" not in sliced.namespace.added


def test_large_value_is_kept_with_the_object_itself(run: Callable[[str], ToolOutput], ns: dict[str, Any]) -> None:
    out = run("list(range(100_000))")
    assert out.details is not None and out.details["handle"] == 1 and out.details["truncated"]
    assert "`_flue.values[1]` (list, len 100000)" in out.content
    assert ns["_flue"].values[1] == list(range(100_000))
    assert ns["_flue"].results[1].startswith("Out: [0, 1, 2")
    assert "Preview" in out.content and "Out: [0, 1, 2, 3" in out.content
    assert "Out: 99999" in run("_flue.values[1][-1]").content


def test_handles_number_up_and_small_results_get_none(run: Callable[[str], ToolOutput]) -> None:
    assert (run("'x' * 10").details or {})["handle"] is None
    run("print('y' * 60_000)")
    second = run("print('z\\n' * 3000)")
    assert (second.details or {})["handle"] == 2


def test_namespace_can_be_a_function_resolved_at_each_call() -> None:
    spaces = [{"v": 1}, {"v": 2}]
    tool = python_tool(lambda: spaces[0])
    assert "Out: 1" in _call(tool, "v").content
    spaces.reverse()
    assert "Out: 2" in _call(tool, "v").content


def test_runner_is_the_seam_that_runs_the_code() -> None:
    seen: list[str] = []

    async def runner(fn: Callable[[], Any]) -> Any:
        seen.append("runner")
        return fn()

    out = _call(python_tool({}, runner=runner), "6 * 7")
    assert seen == ["runner"] and "Out: 42" in out.content


def test_input_schema_is_code_only(run: Callable[[str], ToolOutput]) -> None:
    tool = python_tool({})
    assert tool.name == "python"
    assert list(tool.spec().input_schema["properties"]) == ["code"]
    bad = asyncio.run(execute_tool(tool, {"code": "1", "timeout": 3}, ToolContext(call_id="c1")))
    assert bad.is_error and "timeout" in bad.content


def test_len_of_arbitrary_objects_is_never_taken(run: Callable[[str], ToolOutput], ns: dict[str, Any]) -> None:
    class Lazy:
        """Like a Django QuerySet: `len` would run a query."""

        def __len__(self) -> int:
            raise AssertionError("len must not be called")

    ns["qs"] = Lazy()
    out = run("alias = qs")
    assert not out.is_error
    assert "Variables: created `alias` (Lazy)" in out.content
