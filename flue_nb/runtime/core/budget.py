"""What one submission may spend: dollars at list prices, or tokens where a model has no price.

A budget holds before every model call, the first included. The call's prompt is estimated
before it is sent; the answer's `max_tokens` is lowered to what the rest of the budget can pay
for, and the call is refused (`budget_exceeded`, saying why) only when that leaves fewer than
`MIN_ANSWER_TOKENS`. What a call may cost is reserved until it ends, so subagents calling at
once share the room instead of each seeing all of it. A call that is cut off or retried counts
what it sent (its prompt) and what had streamed; a response that reports no usage counts its
estimate. Spend is counted from the responses themselves, so a recovered submission starts from
what its crashed attempts already spent (their responses are in its window, its subagents' in
their `task` call's steps).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from flue_nb.runtime.agent.limits import Limits
from flue_nb.runtime.errors import BudgetExceededError
from flue_nb.runtime.messages import AssistantMessage, Usage
from flue_nb.runtime.providers import Spend, price_of
from flue_nb.runtime.providers.model import PRICES_AS_OF, Price

__all__ = ["MIN_ANSWER_TOKENS", "WARN_AT", "Budget", "Reservation"]

WARN_AT = 0.8
"""Share of a budget spent at which the cell and the chat say so."""

MIN_ANSWER_TOKENS = 1024
"""The fewest answer tokens a call is made with: below it, the call is refused instead."""


@dataclass(slots=True)
class Reservation:
    """What one model call may cost, held from before it is sent until it ends."""

    prompt_tokens: int
    """The prompt's estimate (what the call sends)."""
    max_tokens: int | None
    """The answer cap the budget leaves (None: the budget does not lower the model's own)."""
    price: Price | None
    usd: float = 0.0
    output_tokens: int = 0


@dataclass
class Budget:
    """What a submission has spent against its limits (one object shared with its subagents)."""

    limits: Limits
    spend: Spend = field(default_factory=Spend)
    input_tokens: int = 0
    output_tokens: int = 0
    reserved_usd: float = 0.0
    reserved_input: int = 0
    reserved_output: int = 0
    lost_calls: int = 0
    """Calls cut off or retried: counted at what they sent and what had streamed."""
    estimated_calls: int = 0
    """Responses that reported no usage: counted at their estimate."""
    on_lost: Callable[[dict[str, Any]], None] | None = None
    """Where a lost call's cost is written, so `status()` shows it (the submission's store)."""
    said: set[str] = field(default_factory=set)
    """The notes already given (each is said once per submission)."""

    # --- before a call -------------------------------------------------------------------------

    def reserve(self, who: str, *, prompt_tokens: int, price: Price | None, cap: int) -> Reservation:
        """Check the next call against every limit and hold what it may cost.

        `cap` is the answer cap the call would have without a budget. Raises
        `BudgetExceededError` when the prompt alone passes a limit, or when what is left pays for
        fewer than `MIN_ANSWER_TOKENS` of answer.
        """
        lim = self.limits
        out = cap
        why: str | None = None
        if lim.max_input_tokens is not None:
            sent = self.input_tokens + self.reserved_input
            if sent + prompt_tokens > lim.max_input_tokens:
                self._exceeded(
                    who,
                    f"sent {self.input_tokens:,} prompt tokens of its {lim.max_input_tokens:,}"
                    + (f" ({self.reserved_input:,} more in calls under way)" if self.reserved_input else "")
                    + f", and the next call would send about {prompt_tokens:,} more",
                    "max_input_tokens",
                )
        least = MIN_ANSWER_TOKENS
        if lim.max_output_tokens is not None:
            left = lim.max_output_tokens - self.output_tokens - self.reserved_output
            least = min(least, lim.max_output_tokens)
            if left < out:
                out = max(0, left)
                why = (
                    f"received {self.output_tokens:,} output tokens of its {lim.max_output_tokens:,}"
                    + (f" ({self.reserved_output:,} more held by calls under way)" if self.reserved_output else "")
                    + f", which leaves {out:,} for the next answer"
                )
        usd = 0.0
        if lim.max_cost_usd is not None and price is not None:
            spent = (self.spend.usd or 0.0) + self.reserved_usd
            prompt_usd = price.cost(Usage(prompt_tokens, 0))
            per_token = (price.cost(Usage(prompt_tokens, 1_000_000)) - prompt_usd) / 1_000_000
            room = lim.max_cost_usd - spent - prompt_usd
            affordable = max(0, math.floor(room / per_token)) if per_token > 0 else out
            if affordable < out:
                out = affordable
                under_way = f" (${self.reserved_usd:.4f} more held by calls under way)" if self.reserved_usd else ""
                why = (
                    f"spent ≈ ${self.spend.usd or 0.0:.4f} of its ${lim.max_cost_usd:.2f} budget{under_way} "
                    f"(list prices of {PRICES_AS_OF}); the next call's prompt (about {prompt_tokens:,} tokens) "
                    f"would cost ≈ ${prompt_usd:.4f}, which leaves room for {out:,} answer tokens"
                )
            usd = prompt_usd + per_token * out
        # Only a budget refuses: a model whose own answer cap is below the floor answers as usual.
        if why is not None and out < min(least, cap):
            key = "max_cost_usd" if why is not None and why.startswith("spent") else "max_output_tokens"
            self._exceeded(who, f"{why}, fewer than the {least:,} an answer needs", key)
        r = Reservation(prompt_tokens, out if out < cap else None, price, usd, out)
        self.reserved_usd += r.usd
        self.reserved_input += prompt_tokens
        self.reserved_output += out
        return r

    # --- after a call --------------------------------------------------------------------------

    def release(self, r: Reservation) -> None:
        """Give back what `r` held (its call ended; what it cost is counted separately)."""
        self.reserved_usd = max(0.0, self.reserved_usd - r.usd)
        self.reserved_input = max(0, self.reserved_input - r.prompt_tokens)
        self.reserved_output = max(0, self.reserved_output - r.output_tokens)
        r.usd, r.prompt_tokens, r.output_tokens = 0.0, 0, 0

    def settle(self, r: Reservation, response: AssistantMessage, *, answer_tokens: int) -> float | None:
        """Count a response made under `r`; `answer_tokens` estimates its answer (usage unreported).
        What it cost, in USD (None: no price known)."""
        prompt = r.prompt_tokens
        self.release(r)
        usage = response.usage
        if usage is None or usage.total == 0:
            # A server that reports nothing (no `include_usage`, a gateway) is counted at our
            # estimate: a budget blind to it would never stop.
            self.estimated_calls += 1
            usage = Usage(prompt, answer_tokens)
        return self._count(response.model, usage, r.price)

    def lost(self, r: Reservation, *, model: str | None, streamed_tokens: int, why: str) -> float | None:
        """Count a call that ended without a response: its prompt was sent and paid for. What it
        cost, in USD (None: no price known)."""
        prompt = r.prompt_tokens
        self.release(r)
        usage = Usage(prompt, streamed_tokens)
        self.lost_calls += 1
        usd = self._count(model, usage, r.price)
        if self.on_lost is not None:
            price = (price_of(model) if model else None) or r.price
            self.on_lost(
                {
                    "model": model,
                    "usd": round(price.cost(usage), 6) if price is not None else None,
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "why": why,
                }
            )
        return usd

    def add(self, response: AssistantMessage, price: Price | None = None) -> None:
        """Count one response made outside a reservation (a recovered submission's)."""
        if response.usage is not None:
            self._count(response.model, response.usage, price)

    def add_all(self, responses: Iterable[AssistantMessage]) -> None:
        """Count responses already made (a recovered submission's)."""
        for r in responses:
            self.add(r)

    def _count(self, model: str | None, usage: Usage, fallback: Price | None) -> float | None:
        # A response naming a model with no price (a gateway that renames models) is billed at
        # the price of the model the call was made with: a budget must not turn itself off.
        price = (price_of(model) if model else None) or fallback
        usd = None
        if price is None:
            self.spend.unpriced += 1
        else:
            usd = price.cost(usage)
            self.spend.usd = (self.spend.usd or 0.0) + usd
        self.input_tokens += usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        self.output_tokens += usage.output_tokens
        return usd

    def _exceeded(self, who: str, what: str, key: str) -> None:
        flag = {"max_cost_usd": "--max-cost USD", "max_input_tokens": "", "max_output_tokens": ""}[key]
        how = f"`%%flue {flag}` or " if flag else ""
        raise BudgetExceededError(
            f"budget_exceeded: {who} {what}; raise it with {how}`{key}=` (on @agent or prompt) if the work needs more",
            spent_usd=self.spend.usd,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            limit=key,
        )

    # --- what to say ---------------------------------------------------------------------------

    def notes(self) -> list[str]:
        """What the person should hear now (each note once): 80 % spent, a price it lacks,
        usage a server did not report."""
        candidates = (self._warning(), self._unpriced(), self._estimated())
        out = [n for n in candidates if n is not None and n[0] not in self.said]
        self.said.update(key for key, _ in out)
        return [text for _, text in out]

    def _warning(self) -> tuple[str, str] | None:
        lim, usd = self.limits, self.spend.usd
        parts = []
        if lim.max_cost_usd is not None and usd is not None and usd >= WARN_AT * lim.max_cost_usd:
            parts.append(f"≈ ${usd:.4f} of its ${lim.max_cost_usd:.2f} budget spent")
        if lim.max_input_tokens is not None and self.input_tokens >= WARN_AT * lim.max_input_tokens:
            parts.append(f"{self.input_tokens:,} of {lim.max_input_tokens:,} prompt tokens")
        if lim.max_output_tokens is not None and self.output_tokens >= WARN_AT * lim.max_output_tokens:
            parts.append(f"{self.output_tokens:,} of {lim.max_output_tokens:,} output tokens")
        return ("warn", ", ".join(parts)) if parts else None

    def _unpriced(self) -> tuple[str, str] | None:
        # A dollar budget with a model of unknown price cannot be checked: say so, once.
        lim = self.limits
        if lim.max_cost_usd is None or self.spend.unpriced == 0 or self.spend.usd is not None:
            return None
        tokens = lim.max_input_tokens is not None or lim.max_output_tokens is not None
        then = "its token limits apply" if tokens else "set max_input_tokens= / max_output_tokens= to bound it"
        return ("unpriced", f"the model has no known price, so max_cost_usd cannot be checked; {then}")

    def _estimated(self) -> tuple[str, str] | None:
        if not self.limits or self.estimated_calls == 0:
            return None
        return (
            "estimated",
            "the server reported no token usage, so the budget counts estimates (prompt and answer "
            "counted with cl100k; the real counts may differ)",
        )
