"""`%flue` / `%%flue` in a real kernel: options, subcommands, streamed display, provenance."""

from __future__ import annotations

import time

import pytest
from kernel_helpers import Kernel

from flue_nb.notebook.document.identity import default_conversation_id
from flue_nb.notebook.magics.flue import split_line
from tests.anthropic_server import AnthropicServer, stream, text
from tests.openai_server import OpenAIServer, chat
from tests.openai_server import text as otext

pytestmark = pytest.mark.kernel

SETUP = """
from flue_nb.models import FunctionModel, ScriptedModel, reply, tool_call
import flue_nb as flue

def _last_user(req):
    return [m for m in req.messages if m.kind == "user"][-1].text

echo = FunctionModel(lambda req: reply("echo: " + _last_user(req)))

@flue.agent
def shouty():
    flue.use_model(FunctionModel(lambda req: reply(_last_user(req).upper())))
    return "Shout."
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyter")
    cwd = tmp_path_factory.mktemp("work")
    k = Kernel(root, cwd)
    k.ok(SETUP)
    k.ok("%config FlueMagics.db = 'flue.sqlite'")
    yield k
    k.shutdown()


def test_line_magic_sends_the_message_and_shows_the_answer(kernel):
    run = kernel.ok("%flue -c line -m echo hello there")
    assert "echo: hello there" in run.text()
    assert "[✓ completed]" in run.text()
    assert "echo: hello there" in run.text("text/markdown")


def test_cell_magic_body_is_the_message_and_cells_continue_one_conversation(kernel):
    kernel.ok("%%flue -c cells -m echo\nfirst message\nwith two lines")
    run = kernel.ok("%%flue -m echo\nsecond message")
    assert "echo: second message" in run.text()
    seen = kernel.ok("print([m.kind for m in echo.requests[-1].messages])").stdout
    assert seen.count("user") == 2, seen  # the second request carries the first exchange
    history = kernel.ok("%flue history").text()
    assert "user: first message\nwith two lines" in history
    assert history.index("first message") < history.index("second message")


def test_braces_are_not_interpolated_unless_asked(kernel):
    kernel.ok("n = 41")
    plain = kernel.ok("%flue -c interp -m echo what is {n+1} and $n?").text()
    assert "echo: what is {n+1} and $n?" in plain
    expanded = kernel.ok("%flue -c interp -m echo --interpolate what is {n+1}?").text()
    assert "echo: what is 42?" in expanded


def test_bad_option_is_a_usage_error_without_traceback(kernel):
    run = kernel.run("%flue --bogus hi")
    assert "unrecognized arguments: --bogus\nusage: %flue [-a NAME]" in run.all_text()
    assert "Traceback" not in run.all_text()
    run = kernel.run("%flue -a shouty -m echo hi")
    assert "UsageError" in run.all_text() and "Traceback" not in run.all_text()


def test_without_a_model_one_paragraph_says_how_to_configure_one(kernel):
    run = kernel.run("%flue -c nomodel hi")
    assert run.status == "error"
    text = run.all_text().strip()
    assert "Traceback" not in text
    assert "\n\n" not in text  # one paragraph
    for hint in ("FLUE_MODEL", "ANTHROPIC_API_KEY", "c.FlueMagics.model", "--agent"):
        assert hint in text


def test_the_first_minute_works_from_the_no_model_message_alone(kernel):
    """Issue 33.9: the message's first way (`%env ANTHROPIC_API_KEY=...`) needs no restart, and its
    `%config` way without a key fails once, in plain words, saying the `%env` line to run."""
    first = kernel.run("%flue -c minute hi").all_text().strip()
    ways = [ln for ln in first.splitlines() if ln.startswith("  • ")]
    assert ways[0].lstrip(" •").startswith("%env ANTHROPIC_API_KEY=")
    assert "restart" in ways[0]
    kernel.ok('%config FlueMagics.model = "anthropic/claude-sonnet-4-6"')
    try:
        run = kernel.run("%flue -c minute hi")
    finally:
        kernel.ok('%config FlueMagics.model = ""')
    assert run.status == "error"
    text = run.all_text().strip()
    assert "`" not in text  # plain text: a backtick would show as one
    assert "%env ANTHROPIC_API_KEY=" in text and "Traceback" not in text
    assert text.count("API key") == 1, text  # said once: not in the transcript and again as the error
    assert run.text().strip() == ""
    # The line it names, run in this kernel, is enough: the next cell goes to the model (whose
    # request this test kernel refuses: FLUE_ALLOW_MODEL_REQUESTS=0).
    kernel.ok("%env ANTHROPIC_API_KEY=sk-ant-test")
    try:
        then = kernel.run("%flue -c minute hi").all_text()
    finally:
        kernel.ok("%env ANTHROPIC_API_KEY=")
    from flue_nb.notebook.kernel.contained import ANTHROPIC_DEFAULT_URL

    # It went to the provider's host (refused here), no longer stopped for want of a key.
    assert ANTHROPIC_DEFAULT_URL.split("//")[1] in then and "API key" not in then, then


def test_a_named_claude_model_without_a_key_says_only_that_the_key_is_missing(kernel):
    run = kernel.run("%flue -c nokey -m anthropic/claude-sonnet-4-6 hi")
    assert run.status == "error"
    assert "no API key for anthropic/claude-sonnet-4-6" in run.error_text
    assert "no model is configured" not in run.all_text()  # a model was named: one true message


def test_tool_calls_show_one_line_each_and_provenance_goes_in_metadata(kernel):
    kernel.ok(
        "tm = ScriptedModel([reply('Checking.', tool_call('bash', command='echo hi'), "
        "tool_call('python', code='zz = 6 * 7')), reply('zz is 42.', usage=(10, 5))])"
    )
    run = kernel.ok("%flue -c tools -m tm compute zz")
    text = run.text()
    assert "· bash: echo hi ✓ → hi" in text and "· python: zz = 6 * 7 ✓" in text
    # The run's changes come last, before the outcome: `zz` was made by the python call (step 2).
    panel = "Δ 1 change: 1 variable\n  2.1 python: zz: created, int\n  undo: %flue undo 2.1 · %flue undo all"
    assert text.endswith(f"zz is 42.\n{panel} · %flue rewind 2 (to before a step)\n[✓ completed]"), text
    assert kernel.ok("print(zz)").stdout.strip() == "42"  # ran in the user's namespace
    (meta,) = [d["metadata"]["flue"] for d in run.displays.values() if "flue" in d["metadata"]]
    assert meta["conversation_id"] == "tools" and meta["submission_id"].startswith("sub_")
    assert meta["status"] == "completed" and meta["tokens"]["input"] == 10 and meta["tokens"]["output"] == 5
    assert [(t["name"], t["ok"]) for t in meta["tools"]] == [("bash", True), ("python", True)]
    assert all(t["duration_ms"] >= 0 for t in meta["tools"])
    assert "0x" not in text and "sub_" not in text  # stable text: nbval compares it


def test_streamed_output_updates_in_place_but_batched(kernel):
    kernel.ok("long = ScriptedModel([' '.join(f'w{i}' for i in range(300))], delay=0.005)")
    kernel.ok("%config FlueMagics.live = 'always'")  # as a person watching
    try:
        started = time.monotonic()
        run = kernel.ok("%flue -c stream -m long go")
        elapsed = time.monotonic() - started
    finally:
        kernel.ok("%config FlueMagics.live = 'auto'")
    (did,) = [d for d in run.displays if not d.startswith("_out")]
    shown = [m for m in run.messages if m["msg_type"] == "display_data"]
    assert len(shown) == 1, "one output: the live display ends as the final transcript"
    assert " ".join(f"w{i}" for i in range(300)) in run.displays[did]["data"]["text/plain"]
    assert run.displays[did]["data"]["text/plain"].endswith("[✓ completed]")
    # 300 deltas over ~1.5 s: at most ~10 updates a second plus the final ones, never one per delta.
    assert 2 <= run.updates[did] <= 10 * elapsed + 5, (run.updates, elapsed)


def test_a_headless_cell_has_one_output_the_final_transcript(kernel):
    run = kernel.ok("%flue -c headless -m echo hello there")
    shown = [m["content"]["data"]["text/plain"] for m in run.messages if m["msg_type"] == "display_data"]
    assert len(shown) == 1, shown  # no empty live display before the answer
    assert "echo: hello there" in shown[0] and shown[0].endswith("[✓ completed]")


def test_background_returns_at_once_and_keeps_updating(kernel):
    kernel.ok("bg = ScriptedModel([' '.join(f'b{i}' for i in range(40))], delay=0.1)")
    run = kernel.ok("%flue -c bg -m bg --background go")
    (did,) = [d for d in run.displays if not d.startswith("_out")]
    # The cell returned while its run goes on: its display is not finished yet (40 words take
    # 4 s), and later cells receive its updates.
    assert "b39" not in run.text() and not run.text().endswith("[✓ completed]"), run.text()
    deadline = time.monotonic() + 60
    updates = 0
    while not kernel.shown[did]["text/plain"].endswith("[✓ completed]") and time.monotonic() < deadline:
        updates += kernel.ok("import time; time.sleep(0.25)").updates.get(did, 0)
    assert updates >= 1
    assert "b39" in kernel.shown[did]["text/plain"]
    assert kernel.shown[did]["text/plain"].endswith("[✓ completed]"), kernel.shown[did]


def test_subcommands_status_use_abort_compact_help_chat(kernel):
    kernel.ok("%flue -c subs -m echo one")
    status = kernel.ok("%flue status").text()
    assert "conversation: subs" in status and "submissions: 1 completed" in status
    assert "use AGENT" in kernel.ok("%flue help").text()
    assert "nothing was running" in kernel.ok("%flue abort").stdout
    assert "flue: nothing to fold" in kernel.ok("%flue -m echo compact").stdout
    used = kernel.ok("%flue use shouty")
    assert "now talks to agent `shouty`" in used.stdout
    assert "QUIET PLEASE" in kernel.ok("%flue quiet please").text()
    kernel.ok("%flue use assistant")
    chat = kernel.ok("%flue chat --no-widget")
    assert "as text (--no-widget)" in chat.stdout and "user: quiet please" in chat.text()
    assert "UsageError" in kernel.run("%flue use nosuchagent").all_text()


def test_help_is_markdown_that_wraps_without_the_rst_marker(kernel):
    shown = kernel.ok("%flue help")
    md, plain = shown.text("text/markdown"), shown.text()
    assert "::" not in md and "::" not in plain and "```" not in md
    assert "- `-m SPEC, --model SPEC`:" in md and "anthropic/&lt;id>" in md
    assert max(len(line) for line in plain.splitlines()) <= 90


def test_bad_model_spec_and_use_with_two_names_are_usage_errors_at_once(kernel):
    # IPython prints a UsageError (no traceback) instead of running anything.
    bad = kernel.run("%flue -c spec -m not/a/model hello")
    assert "UsageError: unknown model 'not/a/model'" in bad.all_text(), bad.all_text()
    two = kernel.run("%flue -c spec use a b")
    assert "UsageError: `%flue use` takes one name" in two.all_text(), two.all_text()
    assert "use a b" not in kernel.ok("%flue -c spec history").all_text()  # nothing was sent
    escaped = kernel.ok("%flue -c spec -m echo -- use a b")
    assert "echo: use a b" in escaped.text()


def test_provider_colon_model_spelling_is_accepted(kernel):
    # jupyter-ai's spelling reaches the Messages API (a loopback one) as the model id.
    with AnthropicServer() as server:
        server.enqueue(stream(text("hi from loopback")))
        kernel.ok(f"import os\nos.environ.update(ANTHROPIC_API_KEY='test', ANTHROPIC_BASE_URL={server.url!r})")
        try:
            run = kernel.ok("%flue -c colon -m anthropic:claude-sonnet-4-6 hello")
        finally:
            kernel.ok("del os.environ['ANTHROPIC_API_KEY'], os.environ['ANTHROPIC_BASE_URL']")
    assert "hi from loopback" in run.text()
    assert server.requests[0].body["model"] == "claude-sonnet-4-6"


def test_openai_compatible_specs_reach_a_local_server_from_the_cell_option_and_the_config(kernel):
    # Ollama-style: OPENAI_BASE_URL names the server, no key; its window comes from /api/show.
    with OpenAIServer() as server:
        server.ollama["llama3.1:8b"] = {"parameters": "num_ctx 16384", "model_info": {"llama.context_length": 131072}}
        server.enqueue(chat(otext("hi from a local model"), model="llama3.1:8b"), chat(otext("configured")))
        kernel.ok(f"import os\nos.environ['OPENAI_BASE_URL'] = {server.base_url!r}")
        try:
            run = kernel.ok("%flue -c local -m openai:llama3.1:8b hello")
            kernel.ok("%config FlueMagics.model = 'openai/llama3.1:8b'")
            configured = kernel.ok("%flue -c local2 hello again")
        finally:
            kernel.ok("%config FlueMagics.model = ''")
            kernel.ok("del os.environ['OPENAI_BASE_URL']")
    assert "hi from a local model" in run.text() and "configured" in configured.text()
    assert [r.body["model"] for r in server.chat_requests] == ["llama3.1:8b", "llama3.1:8b"]
    meta = [d["metadata"]["flue"] for d in run.displays.values() if "flue" in d.get("metadata", {})][-1]
    assert meta["model"] == "openai/llama3.1:8b" and meta["response_models"] == ["127.0.0.1/llama3.1:8b"]


def test_an_exception_in_a_function_model_is_a_model_error_with_the_users_line(kernel):
    kernel.ok(
        "def broken_brain(req):\n    table = {}\n    return table['answer']\nbroken = FunctionModel(broken_brain)"
    )
    run = kernel.run("%flue -c broken -m broken hello")
    text = run.all_text()
    assert "internal error" not in text, text
    assert "FunctionModel's function `broken_brain` raised KeyError: 'answer'" in text
    assert "return table['answer']" in text
    history = kernel.ok("%flue -c broken -m broken history").text()
    assert "[failed: FunctionModel's function `broken_brain` raised KeyError" in history


def test_conversation_switch_and_new(kernel):
    kernel.ok("%flue -c alpha -m echo in alpha")
    kernel.ok("%flue --new -m echo in a new one")
    fresh = kernel.ok("%flue history").text()
    assert "in a new one" in fresh and "in alpha" not in fresh
    back = kernel.ok("%flue -c alpha history").text()
    assert "in alpha" in back and "in a new one" not in back


def test_message_that_starts_like_a_subcommand_is_a_message(kernel):
    run = kernel.ok("%flue -c words -m echo status of the data?")
    assert "echo: status of the data?" in run.text()


def test_split_line_keeps_the_message_verbatim():
    assert split_line("-c x --new what's {a} 'b'") == (["-c", "x", "--new"], "what's {a} 'b'")
    assert split_line("--db 'my db.sqlite' hi") == (["--db", "my db.sqlite"], "hi")
    assert split_line("-- -5 is negative") == ([], "-5 is negative")


def test_default_conversation_id_follows_the_notebook_path():
    a = default_conversation_id({"JPY_SESSION_NAME": "/home/u/work/My Analysis.ipynb"})
    assert a.startswith("My-Analysis-") and a == default_conversation_id(
        {"JPY_SESSION_NAME": "/home/u/work/My Analysis.ipynb"}
    )
    assert a != default_conversation_id({"JPY_SESSION_NAME": "/home/u/other/My Analysis.ipynb"})
    assert default_conversation_id({}) == "notebook"


def test_model_from_flue_model_env_and_approval_from_config(kernel):
    kernel.ok("import os; os.environ['FLUE_MODEL'] = 'echo'")
    try:
        assert "echo: from the environment" in kernel.ok("%flue -c env from the environment").text()
    finally:
        kernel.ok("del os.environ['FLUE_MODEL']")
    kernel.ok(
        "deny = ScriptedModel([reply('', tool_call('python', code='denied_var = 1')), reply('ok')])\n"
        "%config FlueMagics.approval = 'deny'"
    )
    try:
        text = kernel.ok("%flue -c approval -m deny try it").text()
    finally:
        kernel.ok("%config FlueMagics.approval = 'allow'")
    assert "· python: denied_var = 1 ✗" in text
    assert "NameError" in kernel.run("denied_var").all_text()  # the code never ran


def test_approval_per_cell_overrides_the_config(kernel):
    kernel.ok("per_cell = ScriptedModel([reply('', tool_call('python', code='cell_var = 1')), reply('ok')])")
    text = kernel.ok("%flue -c per-cell --approval deny -m per_cell try it").text()
    assert "· python: cell_var = 1 ✗" in text
    assert "NameError" in kernel.run("cell_var").all_text()
    assert "invalid choice" in kernel.run("%flue --approval sometimes hi").all_text()


def test_python_tool_runs_on_the_kernel_main_thread_while_the_cell_waits(kernel):
    kernel.ok(
        "import threading\n"
        "th = ScriptedModel([reply('', tool_call('python', "
        "code='tool_thread = threading.current_thread().name')), reply('ok')])"
    )
    kernel.ok("%flue -c thread -m th where do you run?")
    assert kernel.ok("print(tool_thread)").stdout.strip() == "MainThread"


def test_abort_stops_a_background_run_and_its_output_says_so(kernel):
    kernel.ok("slowbg = ScriptedModel([' '.join(f's{i}' for i in range(400))], delay=0.02)")
    started = kernel.ok("%flue -c abortbg -m slowbg --background go")
    (did,) = [d for d in started.displays if not d.startswith("_out")]
    kernel.ok("import time; time.sleep(0.5)")
    aborted = kernel.ok("%flue abort")
    assert "aborted 1 submission(s)" in aborted.stdout

    # The background thread's last update comes with whichever cell runs when it is sent, or
    # with the one that just finished: short cells collect what arrives until the display, with
    # every update applied in arrival order, shows the end (a loaded machine is slow).
    ended = "[■ aborted: the submission was aborted by the user]"
    deadline = time.monotonic() + 60
    while not kernel.shown[did]["text/plain"].endswith(ended) and time.monotonic() < deadline:
        kernel.ok("time.sleep(0.25)")
    assert kernel.shown[did]["text/plain"].endswith(ended), kernel.shown[did]
    assert "submissions: 1 aborted" in kernel.ok("%flue status").text()
    assert "[aborted: the submission was aborted by the user]" in kernel.ok("%flue history").text()


def test_a_users_own_kernel_agent_runs_python_on_the_main_thread_too(kernel):
    kernel.ok(
        "import threading\n"
        "own_model = ScriptedModel([reply('', tool_call('python', "
        "code='own_thread = threading.current_thread().name')), reply('done')])\n"
        "@flue.agent\n"
        "def own():\n"
        "    flue.use_model(own_model)\n"
        "    flue.use_sandbox(flue.kernel())\n"
    )
    assert "[✓ completed]" in kernel.ok("%flue -c own -a own where?").text()
    assert kernel.ok("print(own_thread)").stdout.strip() == "MainThread"


def test_without_a_model_history_and_status_read_the_store_and_recover_nothing(kernel):
    kernel.ok("%flue -c plain -m echo remember me")
    kernel.ok("%config FlueMagics.db = 'flue.sqlite'")  # same store, seen afresh below
    kernel.ok("get_ipython().magics_manager.registry['FlueMagics']._agents.clear()")
    history = kernel.ok("%flue -c plain history").text()
    assert "user: remember me" in history and "assistant: echo: remember me" in history
    status = kernel.ok("%flue -c plain status").text()
    # The agent the conversation last ran with, as the store recorded it (none is chosen here).
    assert "agent: assistant" in status and "submissions: 1 completed" in status
    assert "no model is configured" in kernel.run("%flue -c plain compact").error_text


def test_the_agent_is_sticky_per_conversation_and_survives_a_restart(tmp_path):
    k = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        k.ok(SETUP)
        k.ok("%config FlueMagics.model = 'echo'")
        assert "HELLO" in k.ok("%%flue -c sticky --agent shouty\nhello").text()
        assert "AGAIN" in k.ok("%%flue\nagain").text()  # no --agent: still shouty
        assert "echo: elsewhere" in k.ok("%flue -c other elsewhere").text()  # its own choice
        k.restart()
        k.ok(SETUP)
        k.ok("%config FlueMagics.model = 'echo'")
        assert "AFTER RESTART" in k.ok("%flue -c sticky after restart").text()
        k.ok("%flue -c sticky use assistant")
        assert "echo: plain" in k.ok("%flue -c sticky plain").text()
        k.restart()  # the agent is not defined in the new kernel: say so, send nothing
        k.ok("%config FlueMagics.model = 'echo'")
        k.ok("%flue -c other2 use assistant")
        k.ok(SETUP.replace("def shouty", "def shouty_unused"))
        k.ok("%flue -c sticky use shouty_unused")
        k.ok("del shouty_unused")
        missing = k.run("%flue -c sticky hello?").all_text()
        assert "UsageError: conversation `sticky` talks to agent `shouty_unused`" in missing
        assert "%flue use assistant" in missing
    finally:
        k.shutdown()
