"""Every view of a conversation says the same thing, in real kernels (issue 19.2, 19.3, 19.6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kernel_helpers import Kernel

pytest.importorskip("anywidget", reason="the chat widget needs the `widget` extra")

pytestmark = pytest.mark.kernel

SETUP = """\
import json, time
import flue_nb as flue
from flue_nb.models import ScriptedModel, reply, tool_call
from flue_nb.notebook.views.chat.widget import open_widgets
%config FlueMagics.db = 'flue.sqlite'
other = ScriptedModel(["the default assistant answers"] * 5)
%config FlueMagics.model = 'other'
hm = ScriptedModel([reply("helper answers", usage=(1500, 40))] * 5)

@flue.agent
def helper():
    flue.use_model(hm)
    return "Be brief."

def settled(w, n):
    for _ in range(300):
        subs = [b for b in w.history if b["kind"] == "submission"]
        if len(subs) >= n and subs[n - 1]["outcome"]:
            return subs[n - 1]
        time.sleep(0.05)
    raise AssertionError(f"no settled block {n}: {w.history} {w.live}")

def answer(block):
    return [p["text"] for p in block["parts"] if p["kind"] == "text"][-1]
"""


def test_subcommands_never_switch_the_agent_of_a_chat_19_2(tmp_path: Path) -> None:
    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(SETUP)
        kernel.ok("%flue chat --agent helper -c a1")
        kernel.ok("w = open_widgets()[-1]")
        for command in ("%flue status", "%flue abort", "%flue history", "%flue compact"):
            kernel.ok(command)
        kernel.ok("w.send_message('who answers?')")
        first = json.loads(kernel.ok("print(json.dumps([answer(settled(w, 1)), w.status]))").stdout)
        # A new cell (no --agent) continues with the chosen agent, and so does the chat.
        cell = kernel.ok("%%flue --no-widget\nand now?")
        kernel.ok("w.send_message('still you?')")
        second = json.loads(kernel.ok("print(json.dumps([answer(settled(w, 3)), w.status]))").stdout)
        # Only an explicit choice switches, and the chat's title follows it before any reply.
        kernel.ok("%flue use assistant")
        switched = json.loads(kernel.ok("time.sleep(0.2); print(json.dumps(w.status))").stdout)
        kernel.ok("w.send_message('and you?')")
        third = json.loads(kernel.ok("print(json.dumps([answer(settled(w, 4)), w.status]))").stdout)
    finally:
        kernel.shutdown()
    assert first[0] == "helper answers" and first[1]["agent"] == "helper", first
    assert "helper answers" in cell.text()
    assert second[0] == "helper answers" and second[1]["agent"] == "helper", second
    assert switched["agent"] == "assistant" and "other" in switched["model"], switched
    assert third[0] == "the default assistant answers" and third[1]["agent"] == "assistant", third


def test_a_frontend_shutdown_aborts_the_kernels_chat_run_durably_19_6(tmp_path: Path) -> None:
    """Shut Down / Restart from the frontend aborts the chat's run; it is not re-run on reopen."""
    from flue_nb.runtime.session import open_conversation

    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(SETUP + "\nslow = ScriptedModel([' '.join(f'w{i}' for i in range(3000))], delay=0.01)")
        kernel.ok("%flue chat -c sd -m slow")
        kernel.ok("w = open_widgets()[-1]; w.send_message('a long answer')")
        kernel.ok("for _ in range(200):\n    if w.live and w.live[0]['parts']: break\n    time.sleep(0.05)")
        kernel.kc.shutdown()  # the frontend's Shut Down Kernel (and half of Restart)
        kernel.km.provisioner.process.wait(30)
    finally:
        kernel.shutdown()
    [sub] = open_conversation("sd", db=str(tmp_path / "flue.sqlite")).submissions()
    assert sub.abort_requested or (sub.outcome is not None and sub.outcome.value == "aborted"), sub


ASKER = """
asker = ScriptedModel([reply("", tool_call("bash", "k1", command="echo ran > ran.txt")), reply("Done.")] * 3)
%config FlueMagics.model = 'asker'
"""

CARD = """\
def find(node, call_id):
    # a subagent's card is nested in its task's card: look through everything the chat draws
    if isinstance(node, dict):
        if node.get("kind") == "tool" and node.get("call_id") == call_id:
            return node
        node = list(node.values())
    if isinstance(node, list):
        for item in node:
            if (found := find(item, call_id)) is not None:
                return found
    return None
def card(w, call_id):
    return find(w.history + w.live, call_id)
def wait_card(w, call_id, status):
    for _ in range(200):
        c = card(w, call_id)
        if c and c["status"] == status:
            return c
        time.sleep(0.05)
    raise AssertionError(f"card {call_id} never {status}: {card(w, call_id)}")
"""


DELEGATING = """
# kernel.ok runs it with SETUP: the parent delegates, its subagent's `bash` call is asked
child_model = ScriptedModel([reply("", tool_call("bash", "sub1", command="echo sub > sub.txt")), reply("sub done")] * 3)
boss_model = ScriptedModel([reply("", tool_call("task", "t1", prompt="write it", agent="writer")), reply("Done.")] * 3)

@flue.agent
def writer_fn():
    return "Write files."

writer = flue.define_subagent("writer", "Writes files.", agent=writer_fn, model=child_model)

@flue.agent
def boss():
    flue.use_model(boss_model)
    flue.use_sandbox(flue.kernel(approval="ask"))
    flue.use_subagent(writer)
"""


def test_an_approval_is_offered_in_every_chat_and_the_first_answer_wins_19_3(tmp_path: Path) -> None:

    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(SETUP + ASKER + CARD)
        kernel.ok("%flue chat -c ap --approval ask")
        kernel.ok("%flue chat -c ap --approval ask")
        kernel.ok("w1, w2 = open_widgets()[-2:]")
        kernel.ok("w1.send_message('write the file')")
        asked = json.loads(kernel.ok("print(json.dumps([wait_card(w1, 'k1', 'awaiting_approval'), "
                                     "wait_card(w2, 'k1', 'awaiting_approval')]))").stdout)  # fmt: skip
        kernel.ok("assert w2.answer('k1', True)")  # the click in the second chat, where the person typed
        done = json.loads(kernel.ok("print(json.dumps([wait_card(w1, 'k1', 'ok'), wait_card(w2, 'k1', 'ok')]))").stdout)
    finally:
        kernel.shutdown()
    assert all(c["ask"] and c.get("asked_at") for c in asked), asked
    assert all(c["approval"]["approved"] and not c.get("ask") for c in done), done
    assert (tmp_path / "ran.txt").read_text() == "ran\n"


def test_always_allow_in_a_chat_keeps_a_grant_status_shows_and_the_same_call_runs_unasked(tmp_path: Path) -> None:
    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(SETUP + ASKER + CARD)
        kernel.ok("%flue chat -c aw --approval ask")
        kernel.ok("w = open_widgets()[-1]; w.send_message('write the file')")
        asked = json.loads(kernel.ok("print(json.dumps(wait_card(w, 'k1', 'awaiting_approval')))").stdout)
        # The card's "Always allow" button: what the browser sends when it is clicked.
        kernel.ok("w._on_browser_msg(w, {'type': 'approve', 'call_id': 'k1', 'approved': True, 'always': True}, [])")
        first = json.loads(kernel.ok("print(json.dumps(settled(w, 1)))").stdout)
        status = kernel.ok("%flue -c aw status").text()
        kernel.ok("w.send_message('write it again')")
        second = json.loads(kernel.ok("print(json.dumps(settled(w, 2)))").stdout)
    finally:
        kernel.shutdown()
    assert asked["always"] == "echo ran > ran.txt", asked  # the grant the button offers
    [tool1] = [p for p in first["parts"] if p["kind"] == "tool"]
    assert tool1["approval"]["reason"] == "approved" and tool1["always"] is None
    assert "always allowed here: bash 'echo ran > ran.txt'" in status
    # The same call again: allowed by the grant, never put to anyone.
    [tool2] = [p for p in second["parts"] if p["kind"] == "tool"]
    assert tool2["status"] == "ok" and tool2["approval"]["reason"] == "allowed", tool2
    assert tool2["approval"]["rule"] == "allowed for this conversation: bash 'echo ran > ran.txt'"


def test_approval_timeout_falls_back_to_the_headless_policy_19_7(tmp_path: Path) -> None:
    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(SETUP + ASKER + CARD + "%config FlueMagics.approval_timeout = 0.5")
        kernel.ok("%flue chat -c to --approval ask")
        kernel.ok("w = open_widgets()[-1]; w.send_message('write the file')")
        out = json.loads(kernel.ok("print(json.dumps(wait_card(w, 'k1', 'failed')))").stdout)
    finally:
        kernel.shutdown()
    assert "nobody answered within 0.5 s" in out["result"]["text"], out
    assert out["approval"]["fallback"] == "deny" and not out.get("ask")
    assert not (tmp_path / "ran.txt").exists()


def test_the_kernels_interrupt_stops_a_chat_run_while_no_cell_runs_19_6(tmp_path: Path) -> None:
    import time

    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(SETUP + "\nslow = ScriptedModel([' '.join(f'w{i}' for i in range(3000))], delay=0.01)")
        kernel.ok("%flue chat -c ir -m slow")
        kernel.ok("w = open_widgets()[-1]; w.send_message('a long answer')")
        kernel.ok("for _ in range(200):\n    if w.live and w.live[0]['parts']: break\n    time.sleep(0.05)")
        time.sleep(0.3)  # the kernel is idle now: no cell runs, the chat's answer streams
        kernel.interrupt()
        block = json.loads(kernel.ok("print(json.dumps(settled(w, 1)))", timeout=30).stdout)
        after = kernel.ok("print('the kernel still works')")  # the interrupt did not break it
    finally:
        kernel.shutdown()
    assert block["outcome"] == "aborted", block
    text = " ".join(p["text"] for p in block["parts"] if p["kind"] == "text")
    assert 0 < len(text.split()) < 3000  # stopped part-way
    assert "still works" in after.stdout


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_one_conversation_in_two_kernels_both_chats_show_the_same_19_3(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """Kernel B's message, run and answer appear in kernel A's chat, which ends idle with no queue
    and a gauge counting B's tokens; on PostgreSQL kernel A's chat was woken by the server's
    notifications, on SQLite by its poll."""
    db = request.getfixturevalue("pg_url") if backend == "postgres" else "flue.sqlite"
    a = Kernel(tmp_path / "ja", tmp_path)
    b = Kernel(tmp_path / "jb", tmp_path)
    try:
        for k in (a, b):
            k.ok(SETUP + f"\n%config FlueMagics.db = {db!r}")
            k.ok("%flue chat --agent helper -c both")
            k.ok("w = open_widgets()[-1]")
        b.ok("w.send_message('from kernel B')")
        b.ok("settled(w, 1)")
        seen = json.loads(
            a.ok(
                "for _ in range(100):\n"
                "    if w.history and w.history[-1]['outcome'] and not w.status['queued']: break\n"
                "    time.sleep(0.1)\n"
                "print(json.dumps([w.history, w.status]))"
            ).stdout
        )
        woken = json.loads(
            a.ok(
                "store = w.session.store\n"
                "print(json.dumps([type(w.follower._watch).__name__, getattr(getattr(store, '_listener', None), 'notified', 0)]))"
            ).stdout
        )
    finally:
        a.shutdown()
        b.shutdown()
    if backend == "postgres":
        assert woken[0] == "NotifyWatch" and woken[1] > 0, woken
    else:
        assert woken == ["PollWatch", 0], woken
    history, status = seen
    [block] = [blk for blk in history if blk["kind"] == "submission"]
    assert block["text"] == "from kernel B" and block["outcome"] == "completed", block
    assert [p["text"] for p in block["parts"] if p["kind"] == "text"] == ["helper answers"]
    assert status["queued"] == 0 and status["running"] is False, status
    assert status["usage"]["input"] == 1500 and status["usage"]["output"] == 40, status
    assert status["used_tokens"] == 1540, status


def test_two_kernels_taking_turns_both_chats_show_both_turns_and_count_the_same_window(tmp_path: Path) -> None:
    """A answers first, then B at once: B's chat shows A's turn too (sent before B's chat looked
    at the store again, it was left out for good), and A's gauge counts the window as B left it
    (its own run's window lacked B's turn: with a model that reports no usage A showed less)."""
    a = Kernel(tmp_path / "ja", tmp_path)
    b = Kernel(tmp_path / "jb", tmp_path)
    try:
        for k in (a, b):
            k.ok(SETUP)
            k.ok("%flue chat -c turns")
            k.ok("w = open_widgets()[-1]")
        a.ok("w.send_message('from kernel A')")
        a.ok("settled(w, 1)")
        b.ok("w.send_message('from kernel B, a longer message than the first ' * 20)")
        shown = "[b['text'][:13] for b in w.history if b['kind'] == 'submission']"
        b.ok("settled(w, 2)")
        used_b, turns_b = json.loads(b.ok(f"print(json.dumps([w.status['used_tokens'], {shown}]))").stdout)
        used_a, turns_a = json.loads(
            a.ok(
                "settled(w, 2)\n"
                "for _ in range(100):\n"
                "    if not w.status['running'] and w.status['used_tokens'] == "
                f"{used_b!r}: break\n"
                "    time.sleep(0.1)\n"
                f"print(json.dumps([w.status['used_tokens'], {shown}]))"
            ).stdout
        )
    finally:
        a.shutdown()
        b.shutdown()
    assert turns_b == turns_a == ["from kernel A", "from kernel B"], (turns_a, turns_b)
    assert isinstance(used_b, int) and used_b > 100, used_b
    assert used_a == used_b


def _two_kernels(
    tmp_path: Path,
    db: str,
    *,
    chat_in_a: bool = True,
    setup: str = ASKER + CARD,
    chat: str = "%flue chat -c shared --approval ask",
) -> tuple[Kernel, Kernel]:
    """Notebooks a.ipynb and b.ipynb (as jupyter_server names their kernels), one store, a chat
    of the conversation `shared` in each (in B only, without `chat_in_a`)."""
    kernels = []
    for name in ("a", "b"):
        k = Kernel(tmp_path / f"j{name}", tmp_path, JPY_SESSION_NAME=str(tmp_path / f"{name}.ipynb"))
        k.ok(SETUP + setup + f"\n%config FlueMagics.db = {db!r}")
        if chat_in_a or name == "b":
            k.ok(chat)
            k.ok("w = open_widgets()[-1]")
        kernels.append(k)
    return kernels[0], kernels[1]


@pytest.mark.parametrize("asker", ["run", "subagent"])
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_approval_asked_in_kernel_a_is_answered_in_kernel_bs_chat_19_3(
    tmp_path: Path, backend: str, asker: str, request: pytest.FixtureRequest
) -> None:
    """Kernel A's run waits (its own call, or its subagent's inside the `task` card); kernel B's
    chat offers Approve; B's click lets A's run finish, and both cards say it was approved in b.ipynb."""
    db = request.getfixturevalue("pg_url") if backend == "postgres" else "flue.sqlite"
    if asker == "run":
        a, b = _two_kernels(tmp_path, db)
        call, command, written = "k1", "echo ran > ran.txt", "ran"
    else:
        a, b = _two_kernels(tmp_path, db, setup=CARD + DELEGATING, chat="%flue chat --agent boss -c shared")
        call, command, written = "sub1", "echo sub > sub.txt", "sub"
    try:
        a.ok("w.send_message('write the file')")
        a_asks = json.loads(a.ok(f"print(json.dumps(wait_card(w, {call!r}, 'awaiting_approval')))").stdout)
        b_asks = json.loads(b.ok(f"print(json.dumps(wait_card(w, {call!r}, 'awaiting_approval')))").stdout)
        b.ok(f"assert w.answer({call!r}, True)")  # the person clicks Approve in notebook B
        a_done = json.loads(a.ok(f"print(json.dumps([wait_card(w, {call!r}, 'ok'), settled(w, 1)]))").stdout)
        b_done = json.loads(b.ok(f"print(json.dumps(wait_card(w, {call!r}, 'ok')))").stdout)
        b_pid = b.ok("import os; print(os.getpid())").stdout.strip()
    finally:
        a.shutdown()
        b.shutdown()
    assert a_asks["ask"] == f"bash: {command}", a_asks
    assert b_asks["ask"].startswith(f"bash: {command} (asked in a.ipynb (kernel "), b_asks
    assert (tmp_path / f"{written}.txt").read_text() == f"{written}\n"
    a_card, block = a_done
    assert block["outcome"] == "completed", block
    assert [p["text"] for p in block["parts"] if p["kind"] == "text"][-1] == "Done.", block
    for card in (a_card, b_done):
        assert card["approval"]["approved"] is True, card
        assert card["approval"]["by"].startswith(f"b.ipynb (kernel {b_pid} "), card


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_approval_of_a_killed_kernel_ends_in_the_other_chat_and_a_click_does_nothing_19_3(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    db = request.getfixturevalue("pg_url") if backend == "postgres" else "flue.sqlite"
    a, b = _two_kernels(tmp_path, db)
    try:
        a.ok("w.send_message('write the file')")
        b.ok("wait_card(w, 'k1', 'awaiting_approval')")
        a.km.provisioner.process.kill()  # kernel A dies while its call waits for an answer
        a.km.provisioner.process.wait(10)
        ended = json.loads(
            b.ok(
                "for _ in range(300):\n"
                "    c = card(w, 'k1')\n"
                "    if (c.get('approval') or {}).get('reason') == 'ended': break\n"
                "    time.sleep(0.05)\n"
                "print(json.dumps(c))"
            ).stdout
        )
        clicked = b.ok("print(w.answer('k1', True))").stdout.strip()
        answers = json.loads(
            b.ok(
                "rs = w.session.store.records(w.session.conversation_id, kinds=['event'])\n"
                "print(json.dumps([r.data['approval_answer'] for r in rs if 'approval_answer' in r.data]))"
            ).stdout
        )
    finally:
        a.shutdown()
        b.shutdown()
    assert ended["approval"] == {"reason": "ended", "detail": "the kernel that asked stopped before an answer"}, ended
    assert ended["status"] != "awaiting_approval" and not ended.get("ask"), ended
    assert clicked == "False" and answers == [], answers  # nothing to click into effect
    assert not (tmp_path / "ran.txt").exists()


def test_a_cell_prompting_on_stdin_in_kernel_a_is_answered_from_kernel_bs_chat_19_3(tmp_path: Path) -> None:
    """The first answer wins over an open stdin prompt too: the prompt is taken down, the cell ends."""
    a, b = _two_kernels(tmp_path, "flue.sqlite", chat_in_a=False)
    try:
        a.ok('%config FlueMagics.widget = "always"')  # the cell's own view points to the prompt
        msg_id = a.kc.execute("%%flue -c shared --approval ask\nwrite the file", allow_stdin=True)
        prompt = a.kc.get_stdin_msg(timeout=60)
        b.ok("wait_card(w, 'k1', 'awaiting_approval')")
        b.ok("assert w.answer('k1', True)")
        run = a.collect(msg_id, timeout=60)  # no input_reply is ever sent: the answer came from B
        after = a.ok("print('the kernel still works')")
    finally:
        a.shutdown()
        b.shutdown()
    assert prompt["content"]["prompt"] == "flue: allow bash: echo ran > ran.txt? [y/N] "
    assert run.status == "ok", run.all_text()
    assert (tmp_path / "ran.txt").read_text() == "ran\n"
    assert "Done." in run.text() and "still works" in after.stdout


def test_a_chat_opened_while_a_call_waits_offers_it_and_its_answer_counts_19_3(tmp_path: Path) -> None:
    """The approver asked the chats open when the question was put; a chat opened later draws the
    recorded request and answers it through the store, which the approver waits on too."""
    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        kernel.ok(SETUP + ASKER + CARD)
        kernel.ok("%flue chat -c late --approval ask")
        kernel.ok("w1 = open_widgets()[-1]; w1.send_message('write the file')")
        kernel.ok("wait_card(w1, 'k1', 'awaiting_approval')")
        kernel.ok("%flue chat -c late --approval ask")
        kernel.ok("[w2] = [w for w in open_widgets() if w is not w1]")
        late = json.loads(kernel.ok("print(json.dumps(wait_card(w2, 'k1', 'awaiting_approval')))").stdout)
        kernel.ok("assert w2.answer('k1', True)")
        done = json.loads(kernel.ok("print(json.dumps(wait_card(w1, 'k1', 'ok')))").stdout)
    finally:
        kernel.shutdown()
    assert late["ask"].startswith("bash: echo ran > ran.txt"), late
    assert done["approval"]["approved"] is True and done["approval"]["by"].startswith("kernel "), done
    assert (tmp_path / "ran.txt").read_text() == "ran\n"
