"""Benchmark: what tracing (`flue.instrument()`) adds to a turn of the loop (issue 25.5).

One conversation on an in-memory store runs submissions of two turns each (a tool call, then
an answer) with an offline model, in alternating blocks: untraced, then traced through the
OpenTelemetry SDK with a span processor whose exporter does nothing (what the tracer itself
costs, not an exporter's network). The figure is the median traced block over the median
untraced block, minus one: the share tracing adds to the loop's per-turn overhead.
Target: under 10 %.

    .venv/bin/python bench/tracing_cost.py
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import Result, load_line, median, print_table, verdict

TARGET = 0.10
BLOCKS = 12
PER_BLOCK = 25
"""Submissions per block (two turns each)."""


def measure(blocks: int = BLOCKS, per_block: int = PER_BLOCK) -> tuple[float, float]:
    """(untraced ms per turn, traced ms per turn), medians over the blocks."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    import flue_nb as flue
    from flue_nb.models import FunctionModel, ModelRequest, reply, tool_call
    from flue_nb.runtime import tracing
    from flue_nb.runtime.messages import ToolResultMessage

    class NoOpExporter(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(NoOpExporter()))
    meters = MeterProvider()

    @flue.tool
    def noop() -> str:
        """Do nothing."""
        return "ok"

    def answer(request: ModelRequest):  # type: ignore[no-untyped-def]
        if isinstance(request.messages[-1], ToolResultMessage):
            return reply("done", usage=(120, 10))
        return reply("", tool_call("noop"), usage=(100, 10))

    model = FunctionModel(answer)

    @flue.agent
    def bench_tracing():
        flue.use_model(model, compaction=False)
        flue.use_tool(noop)
        return "You are benchmarked."

    s = flue.init(bench_tracing, db=":memory:")
    for _ in range(per_block):  # warm up: imports, first-render caches
        s.prompt("hi")
    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(blocks * 2):
        traced = i % 2 == 1
        if traced:
            flue.instrument(tracer_provider=provider, meter_provider=meters)
        t0 = time.perf_counter()
        for _ in range(per_block):
            s.prompt("hi")
        times[traced].append((time.perf_counter() - t0) * 1000 / (2 * per_block))
        tracing._uninstrument()
    return median(times[False]), median(times[True])


def rows_for(plain: float, traced: float) -> list[Result]:
    share = traced / plain - 1
    return [
        Result("tracing", "ms per turn: untraced / traced", f"{plain:.3f} / {traced:.3f}", "", "info"),
        Result(
            "tracing", "added to the loop's per-turn cost", f"{share:+.1%}", f"< {TARGET:.0%}", verdict(share < TARGET)
        ),
    ]


def run(quick: bool = False) -> list[Result]:
    return rows_for(*measure(6 if quick else BLOCKS, 10 if quick else PER_BLOCK))


def main() -> None:
    print(load_line())
    print_table(rows_for(*measure()))


if __name__ == "__main__":
    main()
