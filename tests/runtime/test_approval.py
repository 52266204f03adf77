"""The approval policy wrapper: allow, deny, ask (with and without someone to ask)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import replace

import pytest
from pydantic import BaseModel

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.facts import ApprovalFacts
from flue_nb.runtime.tools.approval import ApprovalRequest, request_summary, with_approval
from flue_nb.runtime.tools.grants import Grant
from flue_nb.runtime.tools.runs_later import code_runs_later, shell_runs_later
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput, define_tool, execute_tool


class _Cmd(BaseModel):
    command: str


def _bash_like(calls: list[str]) -> Tool:
    async def run(args: _Cmd) -> str:
        calls.append(args.command)
        return f"ran {args.command}"

    # As the real `bash` tool (runtime/tools/bash.py): its `runs_later` check reads the command.
    return replace(define_tool("bash", "Run a command.", input=_Cmd, run=run), runs_later=shell_runs_later)


class _Approver:
    """Answers every request with `answer` and remembers what it was asked."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.requests: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> bool:
        self.requests.append(request)
        return self.answer


def _call(tool: Tool, raw: object) -> ToolOutput:
    return asyncio.run(execute_tool(tool, raw, ToolContext(call_id="c1")))


def test_allow_runs_the_tool_unchanged() -> None:
    calls: list[str] = []
    inner = replace(_bash_like(calls), name="shell", runs_later=None)  # a tool of one's own, no check
    wrapped = with_approval(inner, policy="allow")
    assert wrapped is inner
    out = _call(wrapped, {"command": "ls"})
    assert not out.is_error and out.content == "ran ls" and calls == ["ls"]


def test_allow_runs_bash_without_facts_but_asks_about_startup_files() -> None:
    # `bash` is wrapped even under allow: a command naming a place that runs code later is asked about.
    calls: list[str] = []
    approver = _Approver(False)
    wrapped = with_approval(_bash_like(calls), policy="allow", approver=approver)
    out = _call(wrapped, {"command": "ls"})
    assert not out.is_error and out.approval is None and calls == ["ls"]
    out = _call(wrapped, {"command": "echo 'import os' > ~/.ipython/profile_default/startup/00-x.py"})
    assert out.is_error and calls == ["ls"]
    assert out.approval is not None and out.approval.rule is not None and "runs code later" in out.approval.rule
    assert "IPython" in approver.requests[0].question and approver.requests[0].grant is None


@pytest.mark.parametrize(
    "command",
    [
        "echo owned > {ipythondir}/profile_default/startup/00-x.py",  # $IPYTHONDIR's own path
        "cd {ipythondir} && echo owned > profile_default/startup/00-x.py",
        "cp x.py profile_work/startup/",  # any profile's startup dir, wherever it is
    ],
)
def test_a_command_naming_ipythondirs_path_or_a_profiles_startup_dir_is_asked_about(
    tmp_path, monkeypatch, command
) -> None:
    # Found by hand: with IPYTHONDIR set to a path without `.ipython` in it, `bash` wrote a
    # startup file (code every later kernel runs) under `allow` with nobody asked.
    from flue_nb.runtime.tools import runs_later

    ipythondir = tmp_path / "ipy"
    monkeypatch.setenv("IPYTHONDIR", str(ipythondir))
    runs_later._jupyter_dirs.cache_clear()  # the dirs are read once per process
    runs_later._jupyter_dirs_as_named.cache_clear()
    try:
        calls: list[str] = []
        wrapped = with_approval(_bash_like(calls), policy="allow", approver=_Approver(False))
        out = _call(wrapped, {"command": command.format(ipythondir=ipythondir)})
        assert out.is_error and calls == []
        assert out.approval is not None and "runs code later" in (out.approval.rule or "")
        assert runs_later.command_runs_later(f"ls {tmp_path / 'data'}") is None
    finally:
        runs_later._jupyter_dirs.cache_clear()
        runs_later._jupyter_dirs_as_named.cache_clear()


class _Code(BaseModel):
    code: str


@pytest.mark.parametrize(
    "code",
    [
        "open('/root/.ipython/profile_default/startup/00-x.py', 'w').write('import os')",
        "import os\nstartup = get_ipython().profile_dir.startup_dir\nopen(os.path.join(startup, 'x.py'), 'w')",
        "from IPython.paths import get_ipython_dir\np = get_ipython_dir()",
        "import site\nopen(site.getsitepackages()[0] + '/evil.pth', 'w')",
        "import subprocess\nsubprocess.run('echo x >> ~/.bashrc', shell=True)",
        "import os\nd = os.environ['IPY' + 'THONDIR']\nopen(os.path.join(d, 'profile_default', 'startup', 'y.py'), 'w')",
    ],
)
def test_python_code_that_reaches_a_place_that_runs_code_later_is_asked_about_under_allow(code) -> None:
    # Found in review: `write` and `bash` were asked about a startup file under `allow`, the
    # `python` tool ran `open(startup_dir + "/x.py", "w")` with nobody asked.
    calls: list[str] = []

    async def run(args: _Code) -> str:
        calls.append(args.code)
        return "ran"

    python = replace(define_tool("python", "Run code.", input=_Code, run=run), runs_later=code_runs_later)
    approver = _Approver(False)
    wrapped = with_approval(python, policy="allow", approver=approver)
    out = _call(wrapped, {"code": "x = 1 + 1"})
    assert not out.is_error and out.approval is None and calls == ["x = 1 + 1"]
    out = _call(wrapped, {"code": code})
    assert out.is_error and calls == ["x = 1 + 1"], out.content
    assert out.approval is not None and "runs code later" in (out.approval.rule or "")
    assert "the code names" in approver.requests[0].summary and approver.requests[0].grant is None


def test_the_tools_that_write_name_their_runs_later_check() -> None:
    from flue_nb.notebook.kernel.python_tool import python_tool
    from flue_nb.runtime.sandbox.local import LocalSandbox
    from flue_nb.runtime.tools import PathLocks, bash_tool, edit_tool, write_tool

    box = LocalSandbox(".")
    startup = "/root/.ipython/profile_default/startup/x.py"
    checks = {
        "bash": (bash_tool(box), {"command": f"echo x > {startup}"}),
        "write": (write_tool(box, PathLocks()), {"path": startup, "content": "x"}),
        "edit": (edit_tool(box, PathLocks()), {"path": startup, "old_text": "a", "new_text": "b"}),
        "python": (python_tool({}), {"code": f"open({startup!r}, 'w')"}),
    }
    for name, (tool, data) in checks.items():
        assert tool.runs_later is not None and tool.runs_later(data, None), name
        assert tool.runs_later({k: "" for k in data}, None) is None, name


def test_deny_refuses_and_says_how_the_user_can_change_it() -> None:
    calls: list[str] = []
    out = _call(with_approval(_bash_like(calls), policy="deny"), {"command": "rm -rf /"})
    assert out.is_error
    assert calls == []
    assert "policy denies" in out.content and "`bash`" in out.content
    assert "`approval`" in out.content
    assert out.approval is not None and out.approval.approved is False and out.approval.reason == "policy"


def test_ask_with_approver_yes_runs_the_tool_and_the_request_describes_the_call() -> None:
    calls: list[str] = []
    approver = _Approver(True)
    out = _call(with_approval(_bash_like(calls), policy="ask", approver=approver), {"command": "make test"})
    assert not out.is_error and out.content == "ran make test" and calls == ["make test"]
    [request] = approver.requests
    assert request == ApprovalRequest(
        "bash", "c1", {"command": "make test"}, "bash: make test", rule="default: ask", grant=Grant("bash", "make test")
    )
    assert out.approval == ApprovalFacts("approved", True, "ask", rule="default: ask")


def test_ask_with_approver_no_refuses_without_running() -> None:
    calls: list[str] = []
    out = _call(with_approval(_bash_like(calls), policy="ask", approver=_Approver(False)), {"command": "ls"})
    assert out.is_error and calls == []
    assert "declined" in out.content


def test_ask_headless_falls_back_to_deny_and_says_so() -> None:
    calls: list[str] = []
    out = _call(with_approval(_bash_like(calls), policy="ask"), {"command": "ls"})
    assert out.is_error and calls == []
    assert "no one to ask in a headless run" in out.content
    assert "fallback policy is deny" in out.content


def test_ask_headless_with_allow_fallback_runs_and_says_so() -> None:
    calls: list[str] = []
    out = _call(with_approval(_bash_like(calls), policy="ask", fallback="allow"), {"command": "ls"})
    assert not out.is_error and calls == ["ls"]
    assert out.content.startswith("ran ls")
    assert "fallback policy is allow" in out.content


def test_invalid_input_is_an_error_result_without_asking() -> None:
    approver = _Approver(True)
    out = _call(with_approval(_bash_like([]), policy="ask", approver=approver), {"cmd": "ls"})
    assert out.is_error and "command" in out.content
    assert approver.requests == []


def test_what_the_inner_tool_raises_still_becomes_an_error_result() -> None:
    def boom(args: _Cmd) -> str:
        raise RuntimeError("disk full")

    inner = define_tool("bash", "Run a command.", input=_Cmd, run=boom)
    out = _call(with_approval(inner, policy="ask", approver=_Approver(True)), {"command": "ls"})
    assert out.is_error and "disk full" in out.content


def test_wrapper_keeps_name_description_and_schema() -> None:
    inner = _bash_like([])
    wrapped = with_approval(inner, policy="deny")
    assert wrapped.spec() == inner.spec()


def test_unknown_policy_or_fallback_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="'allow', 'ask' or 'deny'"):
        with_approval(_bash_like([]), policy="maybe")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="fallback"):
        with_approval(_bash_like([]), policy="ask", fallback="ask")  # type: ignore[arg-type]


def _named(name: str, summary_arg: str | None = None, **fields: type) -> Tool:
    from pydantic import create_model

    model = create_model(f"{name}_in", **{k: (v, ...) for k, v in fields.items()})  # type: ignore[call-overload]
    return define_tool(name, "d", input=model, run=lambda a: "", summary_arg=summary_arg)


def test_summary_shows_code_first_line_and_how_many_more() -> None:
    python = _named("python", "code", code=str)
    assert request_summary(python, {"code": "import os\nos.listdir()\n"}) == "python: import os (+1 more lines)"
    # The argument the tool names as its summary (or its first text argument), as cards show it;
    # a call without a text argument is its arguments as JSON.
    write = _named("write", "path", path=str, content=str)
    assert request_summary(write, {"path": "a.txt", "content": "x"}) == "write: a.txt"
    assert request_summary(_named("count", n=int), {"n": 3}) == 'count: {"n": 3}'


def test_a_tool_words_its_own_question() -> None:
    # `Tool.question`: the runtime names no tool; the tool says how the person is asked.
    inner = _named("deploy", target=str)
    worded = replace(inner, question=lambda data: f"ship to {data['target']}\nand restart")
    assert request_summary(inner, {"target": "prod"}) == "deploy: prod"
    assert request_summary(worded, {"target": "prod"}) == "deploy: ship to prod (+1 more lines)"

    # Its fuller wording (`question_detail`) is what the person is asked; the line is recorded.
    async def detail(data: object) -> str:
        return "deploy: the whole plan"

    approver = _Approver(True)
    _call(with_approval(replace(worded, question_detail=detail), policy="ask", approver=approver), {"target": "prod"})
    [request] = approver.requests
    assert request.summary == "deploy: ship to prod (+1 more lines)" and request.question == "deploy: the whole plan"


def test_importing_approval_does_not_load_ipython() -> None:
    code = "import sys, flue_nb.runtime.tools.approval; print('IPython' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("how", ["approved", "fallback"])
def test_an_approved_call_keeps_everything_the_tool_returned_besides_its_text(how: str) -> None:
    # Issue 33.1: a figure drawn by an approved `python` call was lost (the text still said it was drawn).
    from flue_nb.runtime.facts import NamespaceDiff
    from flue_nb.runtime.images import image_from_bytes

    figure = image_from_bytes(_PNG_1x1, label="figure 1")
    names = NamespaceDiff(added=("df",))

    async def run(args: _Cmd) -> ToolOutput:
        return ToolOutput("[1 image(s) drawn]", details={"k": 1}, images=[figure], namespace=names)

    inner = define_tool("python", "Run code.", input=_Cmd, run=run)
    if how == "approved":
        wrapped = with_approval(inner, policy="ask", approver=_Approver(True))
    else:
        wrapped = with_approval(inner, policy="ask", fallback="allow")
    out = _call(wrapped, {"command": "plot"})
    assert not out.is_error and out.images == [figure]
    assert out.namespace == names and out.details == {"k": 1}
    assert out.approval is not None and out.approval.approved is True


_PNG_1x1 = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde"
    b"\x00\x00\x00\x0cIDATx\x9cc\xf8\xcf\xc0\x00\x00\x03\x01\x01\x00\xc9\xfe\x92\xef\x00\x00\x00\x00IEND\xaeB`\x82"
)
