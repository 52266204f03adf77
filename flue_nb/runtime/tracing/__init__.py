"""`flue.instrument()`: OpenTelemetry traces and metrics of every agent run in this process.

Only the OpenTelemetry API is imported, and only when tracing is asked for (`instrument()`,
`FLUE_OTEL=1`, `c.FlueMagics.otel = True`); the user's SDK and exporter receive the spans.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable
from typing import Any

from flue_nb.runtime.errors import ConfigError
from flue_nb.runtime.events import observe_all

__all__ = ["OTEL_ENV", "flush", "instrument", "instrument_from_env", "instrumented", "tag_submission", "trace_id"]

OTEL_ENV = "FLUE_OTEL"
"""Set to `1` and the first session of the process turns tracing on (global providers)."""

_active: tuple[Any, Callable[[], None]] | None = None


def instrument(*, tracer_provider: Any = None, meter_provider: Any = None, content: bool = False) -> None:
    """Trace every agent run of this process with OpenTelemetry (GenAI conventions).

    Args:
        tracer_provider: Where spans go; default the global one (`trace.set_tracer_provider`).
        meter_provider: Where the duration and token metrics go; default the global one.
        content: Also record prompts, answers, tool arguments and results (redacted like tool
            results, at most 8,000 characters per attribute). Off by default.

    Spans and metric points reach the providers in batches, within 0.2 s of what they record
    (`flush()` hands over the rest at once; so does the process's exit). Calling it again replaces
    the earlier settings.
    """
    global _active
    try:
        from opentelemetry import metrics, trace
    except ImportError as exc:
        raise ConfigError(
            "flue.instrument() needs the OpenTelemetry API: pip install 'flue_nb[otel]' "
            "(and an SDK with an exporter, e.g. opentelemetry-sdk opentelemetry-exporter-otlp)"
        ) from exc
    from flue_nb import __version__
    from flue_nb.runtime.tracing._spans import SpanObserver

    tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("flue_nb", __version__)
    meter = (meter_provider or metrics.get_meter_provider()).get_meter("flue_nb", __version__)
    observer = SpanObserver(tracer, meter, content=bool(content))
    if _active is not None:
        _active[1]()
        _active[0].close()
    else:
        atexit.register(flush)  # registered after the user's providers, so it runs before theirs shut down
    _active = (observer, observe_all(observer))


def instrument_from_env() -> None:
    """Turn tracing on once when `FLUE_OTEL=1` (a session calls this when it is made)."""
    if _active is None and os.environ.get(OTEL_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        instrument()


def instrumented() -> bool:
    """True when this process traces its runs."""
    return _active is not None


def trace_id(submission_id: str) -> str | None:
    """The hex trace id of a submission's `invoke_agent` span (None when not traced)."""
    return _active[0].trace_id(submission_id) if _active is not None else None


def flush() -> None:
    """Hand every span and metric point still waiting to the providers now (then `force_flush` them to export)."""
    if _active is not None:
        _active[0].flush()


def tag_submission(submission_id: str, attributes: dict[str, Any]) -> None:
    """Add attributes to a submission's `invoke_agent` span (the notebook path, the cell id)."""
    if _active is not None:
        _active[0].tag(submission_id, attributes)


def _uninstrument() -> None:
    """Stop tracing (tests)."""
    global _active
    if _active is not None:
        _active[1]()
        _active[0].close()
        _active = None
