"""Budgets (issue 32.1) attacked through the real SDKs and loopback servers that bill what they
served: a run must not end above its limit by more than the README's margin, and `status()` must
show what it cost.

The margin the README states: "the only overshoot is the gap between flue_nb's prompt estimate
(cl100k) and the provider's count for the part of the prompt the provider has not yet reported".
The billing server counts each request's prompt itself, 15 % above cl100k (Claude's tokenizer
counts more than cl100k for English), and bills it with what it answered. flue_nb's estimate of
each call's prompt is read where the budget takes it (`Budget.reserve`), so the allowed overshoot
of a run is what the server billed above those estimates, at the input price; the answer side
has no margin (a budget lowers `max_tokens` to what it can pay for, and the server honours it).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from _adv import Counts, agent, attempt, no_sleep

from tests.anthropic_server import AnthropicServer, StreamReply, stream, text, tool_use, usage

SONNET = "claude-sonnet-4-6"  # $3 / $15 per million tokens
GAP = 1.15
"""The billing server's prompt count over cl100k's."""
WORDS = "word " * 100_000
"""About 100,000 prompt tokens: $0.30 of Sonnet's input."""


@dataclass
class Answer:
    """What the billing server sends for one request."""

    blocks: list[dict[str, Any]]
    report: bool = True
    """False: usage all zeros, as a gateway that reports none."""
    cut: bool = False
    """Hang up after the first text delta, before the answer ends (billed what was sent)."""
    model: str = SONNET
    delay: float = 0.0


@dataclass
class Bill:
    """What the server billed, in tokens, and its cost at Sonnet's list price."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def usd(self) -> float:
        from flue_nb.runtime.messages import Usage
        from flue_nb.runtime.providers import price_of

        price = price_of(SONNET)
        assert price is not None
        return price.cost(Usage(self.input_tokens, self.output_tokens))


class BillingServer(AnthropicServer):
    """A loopback Messages API whose answer to each request is `respond(body)`, and which bills
    what it served: its own count of the prompt, and the answer's tokens."""

    def __init__(self, respond: Callable[[dict[str, Any]], Answer]) -> None:
        super().__init__()
        self.respond = respond
        self.bill = Bill()
        self.local = threading.local()

    def next_reply(self) -> StreamReply:  # type: ignore[override]
        from flue_nb.runtime.core.tokens import count_text

        body: dict[str, Any] = self.local.body
        answer = self.respond(body)
        prompt = json.dumps([body.get("system"), body.get("messages"), body.get("tools")])
        billed_in = int(count_text(prompt) * GAP)
        sent = [b.get("text") or b.get("raw") or "" for b in answer.blocks]
        if answer.cut:
            sent = [sent[0][: len(sent[0]) // 2]] if sent else []
        # A server stops an answer at `max_tokens`: it never bills more.
        billed_out = min(sum(count_text(s) for s in sent), int(body.get("max_tokens") or 1 << 30))
        with self.bill.lock:
            self.bill.requests += 1
            self.bill.input_tokens += billed_in
            self.bill.output_tokens += billed_out
        reported = usage(input=billed_in, output=billed_out) if answer.report else usage()
        return stream(
            *answer.blocks,
            usage=reported,
            model=answer.model,
            delay=answer.delay,
            cut_after=4 if answer.cut else None,
            cut_mode="chunk",
            stop_reason="tool_use" if any(b["type"] == "tool_use" for b in answer.blocks) else "end_turn",
        )


class _Handler(AnthropicServer.handler):  # type: ignore[name-defined,misc]
    def record(self, method: str) -> dict[str, Any]:
        body: dict[str, Any] = super().record(method)
        self.fake.local.body = body  # this request's thread answers it: `next_reply` reads it here
        return body


BillingServer.handler = _Handler


@contextlib.contextmanager
def _estimates() -> Iterator[list[int]]:
    """The prompt estimate of every call the budget let through, in order."""
    from flue_nb.runtime.core.budget import Budget

    seen: list[int] = []
    reserve = Budget.reserve

    def spy(self: Budget, who: str, **kw: Any) -> Any:
        held = reserve(self, who, **kw)
        seen.append(kw["prompt_tokens"])
        return held

    Budget.reserve = spy  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        Budget.reserve = reserve  # type: ignore[method-assign]


_IDS = itertools.count(1)


def _words(n: int) -> str:
    return "word " * max(0, n)


def _noop() -> Any:
    import flue_nb as flue

    @flue.tool
    def noop() -> str:
        """Do nothing."""
        return "ok"

    return noop


def _answering(out: int, **kw: Any) -> Callable[[dict[str, Any]], Answer]:
    """Answers of `out` tokens (or what `max_tokens` allows) and a `noop` call, so the run goes on."""
    ids = itertools.count(1)

    def respond(body: dict[str, Any]) -> Answer:
        n = min(out, int(body.get("max_tokens") or out))
        return Answer([text(_words(n - 2)), tool_use(f"toolu_{next(ids)}", "noop", {})], **kw)

    return respond


def _delegating(body: dict[str, Any]) -> Answer:
    """The parent (asked "go") sends eight `task` calls at once, then ends; each child (asked
    "work N") answers with 8,000 tokens and a `noop` call until the budget stops it."""
    messages = body.get("messages") or []
    first = messages[0].get("content") if messages else ""
    asked = first if isinstance(first, str) else " ".join(p.get("text", "") for p in first if isinstance(p, dict))
    if asked.startswith("work"):
        n = min(8_000, int(body.get("max_tokens") or 8_000))
        return Answer([text(_words(n - 2)), tool_use(f"toolu_kid_{next(_IDS)}", "noop", {})], delay=0.05)
    if len(messages) > 1:
        return Answer([text("done")])
    return Answer([tool_use(f"toolu_task_{i}", "task", {"prompt": f"work {i}", "agent": "kid"}) for i in range(8)])


def _run_dollars(
    c: Counts, name: str, respond: Callable[[dict[str, Any]], Answer], limit: float, prompt: str, **options: Any
) -> None:
    """One submission under a dollar budget against a billing server: overspent if the server
    billed more than the limit plus the estimate gap, or `status()` shows no cost."""
    import flue_nb as flue
    from flue_nb.runtime.providers.anthropic import AnthropicModel

    c.scenarios += 1
    subagent = options.pop("subagent", None)
    with BillingServer(respond) as server, _estimates() as estimates:
        model = AnthropicModel(SONNET, api_key="test", base_url=server.url)
        tools = [_noop()]
        if subagent is not None:
            child = AnthropicModel(SONNET, api_key="test", base_url=server.url, **subagent)
            kid = flue.define_subagent("kid", "Does the work", agent=agent("kid", child, tools=tools))
            parent = _with_subagent(model, kid, max_cost_usd=limit)
            s = flue.init(parent, db=":memory:", settings=no_sleep())
        else:
            a = agent(f"budget_{c.scenarios}", model, tools=tools, max_cost_usd=limit, **options)
            s = flue.init(a, db=":memory:", settings=no_sleep())
        if not attempt(c, name, s, lambda: s.prompt(prompt, timeout=120), 150):
            return
        bill = server.bill
        margin = max(0, bill.input_tokens - sum(estimates)) * 3e-6
        cost = s.status().cost_usd
        kids = {m.group() for r in server.requests if (m := re.search(r"'work \d+'", str(r.body["messages"][:1])))}
        c.notes.append(
            f"{name}: billed ${bill.usd:.4f} ({bill.requests} requests"
            + (f", {len(kids)} of 8 subagents called" if subagent is not None else "")
            + f") of ${limit:.2f}, estimate gap ${margin:.4f}; status() ${cost if cost is None else round(cost, 4)}"
        )
        if bill.usd > limit + margin + 1e-9:
            c.add("overspent", f"{name}: ${bill.usd:.4f} billed on ${limit:.2f} (margin ${margin:.4f})")
        if cost is None and bill.requests:
            c.add("overspent", f"{name}: status() shows cost None after ${bill.usd:.4f} billed")


def _with_subagent(model: Any, kid: Any, **options: Any) -> Any:
    import flue_nb as flue

    @flue.agent(name="budget_parent", **options)
    def parent() -> str:
        flue.use_model(model)
        flue.use_subagent(kid)
        return "adversarial"

    return parent


def _run_tokens(c: Counts) -> None:
    """A server that reports no usage under `max_input_tokens=10,000` (OpenAI-compatible)."""
    import flue_nb as flue
    from flue_nb.runtime.core.tokens import count_text
    from flue_nb.runtime.providers.openai import OpenAIModel
    from tests.openai_server import OpenAIServer, chat, tool_call
    from tests.openai_server import text as chat_text

    name = "no usage reported (OpenAI-compatible, max_input_tokens=10,000)"
    c.scenarios += 1
    limit = 10_000
    with OpenAIServer() as server, _estimates() as estimates:
        for i in range(40):
            server.enqueue(chat(chat_text("x " * 500), tool_call(f"call_{i}", "noop", {}), usage=None))
        model = OpenAIModel("local-model", base_url=server.base_url, api_key="k", context_window=200_000)
        s = flue.init(
            agent("budget_tokens", model, tools=[_noop()], max_input_tokens=limit, max_turns=40),
            db=":memory:",
            settings=no_sleep(),
        )
        if not attempt(c, name, s, lambda: s.prompt("y " * 2_000, timeout=120), 150):
            return
        billed = sum(
            int(count_text(json.dumps([r.body.get("messages"), r.body.get("tools")])) * GAP)
            for r in server.chat_requests
        )
        margin = max(0, billed - sum(estimates))
        c.notes.append(
            f"{name}: billed {billed:,} prompt tokens ({len(server.chat_requests)} requests) of {limit:,}, "
            f"estimate gap {margin:,}; status() {s.status().unreported_responses} responses not reported"
        )
        if billed > limit + margin:
            c.add("overspent", f"{name}: {billed:,} prompt tokens billed on {limit:,} (margin {margin:,})")


def _run_output_tokens(c: Counts) -> None:
    """Answers as long as allowed under `max_output_tokens=40,000`: no margin on the answer side."""
    import flue_nb as flue
    from flue_nb.runtime.providers.anthropic import AnthropicModel

    name = "output tokens (max_output_tokens=40,000, 32k-token answers)"
    c.scenarios += 1
    with BillingServer(_answering(32_000)) as server:
        model = AnthropicModel(SONNET, api_key="test", base_url=server.url)
        a = agent("budget_output", model, tools=[_noop()], max_output_tokens=40_000, max_turns=50)
        s = flue.init(a, db=":memory:", settings=no_sleep())
        if not attempt(c, name, s, lambda: s.prompt("go", timeout=120), 150):
            return
        out = server.bill.output_tokens
        c.notes.append(f"{name}: billed {out:,} output tokens ({server.bill.requests} requests) of 40,000")
        if out > 40_000:
            c.add("overspent", f"{name}: {out:,} output tokens billed on 40,000")


def budgets(quick: bool) -> Counts:
    """Issue 32.1's measured overshoots, each re-run against a billing server."""
    c = Counts("budgets (dollars and tokens, billed by the server)", ("hangs", "tracebacks", "lost", "overspent"))
    _run_dollars(c, "first call ($0.05, 100k-token prompt)", _answering(1_000), 0.05, WORDS)
    _run_dollars(c, "output-heavy ($1.00, 32k-token answers)", _answering(32_000), 1.0, "go", max_turns=50)
    _run_dollars(c, "8 parallel subagents ($0.50)", _delegating, 0.5, "go", subagent={})
    # $0.50 leaves room for one subagent's call at a time (each may answer 32k tokens, $0.48);
    # $5.00 lets all eight reserve at once and run side by side until the rest is too little.
    _run_dollars(c, "8 parallel subagents ($5.00)", _delegating, 5.0, "go", subagent={})
    _run_dollars(
        c,
        "cut off mid-answer, retried ($0.50, 100k-token prompt)",
        lambda body: Answer([text("Half an answer, then the line drops")], cut=True),
        0.5,
        WORDS,
    )
    _run_dollars(
        c,
        "answers name an unpriced model ($0.20)",
        _answering(5_000, model="gateway/sonnet-latest"),
        0.2,
        "go",
        max_turns=40,
    )
    _run_dollars(
        c,
        "no usage reported ($0.20, 20k-token prompt)",
        _answering(500, report=False),
        0.2,
        "y " * 20_000,
        max_turns=40,
    )
    _run_tokens(c)
    _run_output_tokens(c)
    return c
