"""What one submission may spend: dollars at list prices, or tokens where a model has no price.

A budget is checked before every model call, the way the turn limit is: a submission whose spend
(its own responses and its subagents') has reached its limit, or would pass it with one more
call like the last one, stops with `budget_exceeded` instead of making the call. Spend is counted
from the responses themselves, so a recovered submission starts from what its crashed attempts
already spent (their responses are in its window, its subagents' in their `task` call's steps).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from flue_nb.runtime.agent.limits import Limits
from flue_nb.runtime.errors import BudgetExceededError
from flue_nb.runtime.messages import AssistantMessage, Usage
from flue_nb.runtime.providers import Spend, price_of
from flue_nb.runtime.providers.model import PRICES_AS_OF

__all__ = ["WARN_AT", "Budget"]

WARN_AT = 0.8
"""Share of a budget spent at which the cell and the chat say so."""


@dataclass
class Budget:
    """What a submission has spent against its limits (one object shared with its subagents)."""

    limits: Limits
    spend: Spend = field(default_factory=Spend)
    input_tokens: int = 0
    output_tokens: int = 0
    last_call_usd: float = 0.0
    """The prompt side of the last priced call: the next call resends that prefix and more."""
    last_call_tokens: int = 0
    said: set[str] = field(default_factory=set)
    """The notes already given (each is said once per submission)."""

    def add(self, response: AssistantMessage) -> None:
        """Count one response (of this submission or of one of its subagents)."""
        usage = response.usage
        if usage is None:
            return
        self.spend.add(response.model, usage)
        prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        self.input_tokens += prompt
        self.output_tokens += usage.output_tokens
        price = price_of(response.model) if response.model else None
        if price is not None:
            self.last_call_usd = price.cost(
                Usage(usage.input_tokens, 0, usage.cache_read_tokens, usage.cache_write_tokens)
            )
        self.last_call_tokens = prompt

    def add_all(self, responses: Iterable[AssistantMessage]) -> None:
        """Count responses already made (a recovered submission's)."""
        for r in responses:
            self.add(r)

    def check(self, who: str) -> None:
        """Raise `BudgetExceededError` when the next model call would go past a limit."""
        lim = self.limits
        usd = self.spend.usd or 0.0
        if lim.max_cost_usd is not None and self.spend.usd is not None and usd + self.last_call_usd > lim.max_cost_usd:
            self._exceeded(
                who,
                f"spent ≈ ${usd:.4f} of its ${lim.max_cost_usd:.2f} budget (list prices of {PRICES_AS_OF}), and "
                f"another call would cost about ${self.last_call_usd:.4f} more",
                "max_cost_usd",
            )
        if lim.max_input_tokens is not None and self.input_tokens + self.last_call_tokens > lim.max_input_tokens:
            self._exceeded(
                who,
                f"sent {self.input_tokens:,} prompt tokens of its {lim.max_input_tokens:,}, and another call "
                f"would send about {self.last_call_tokens:,} more",
                "max_input_tokens",
            )
        if lim.max_output_tokens is not None and self.output_tokens >= lim.max_output_tokens:
            self._exceeded(
                who,
                f"received {self.output_tokens:,} output tokens of its {lim.max_output_tokens:,}",
                "max_output_tokens",
            )

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

    def notes(self) -> list[str]:
        """What the person should hear now (each note once): 80 % spent, or a price it lacks."""
        out = [n for n in (self._warning(), self._unpriced()) if n is not None and n[0] not in self.said]
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
