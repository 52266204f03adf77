"""Benchmark: what tracing (`flue.instrument()`) adds to a turn of the loop (issue 25.5).

One conversation on an in-memory store runs submissions of two turns each (a tool call, then
an answer) with an offline model, in alternating blocks (ABBA): untraced, and traced through the
OpenTelemetry SDK with a span processor whose exporter does nothing (what the tracer itself
costs, not an exporter's network). Two figures: the median traced block over the median
untraced block, minus one (the whole effect, but within the noise of a shared machine), and the
CPU time spent by the tracer per turn over the loop's per-turn CPU time (the target's figure).
The tracer's time is its CPU time on both threads it uses: on the loop's thread an event only
joins a queue (timed per event, less what the stopwatch itself costs, measured beforehand); the
tracer's own thread hands the queue to the SDK in batches (and the end of each traced block hands
over the rest, inside the block). Block times are the process's CPU time (all
its threads). None of it is the wall clock: on a shared machine that mostly measures the other
processes. Target: under 10 %.

One more row shows where the tracer's time goes: the events of the traced blocks replayed
through a fresh tracer in one batch (the same spans and metric points), and replayed through one
whose tracer and meter are OpenTelemetry's no-op ones (flue_nb's own handling alone). The rest is
the SDK's: span creation, attribute checks, metric records.

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


def _session():  # type: ignore[no-untyped-def]
    """A session whose every submission is two turns: a tool call, then an answer (offline)."""
    import flue_nb as flue
    from flue_nb.models import FunctionModel, ModelRequest, reply, tool_call
    from flue_nb.runtime.messages import ToolResultMessage

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

    return flue.init(bench_tracing, db=":memory:")


def _replay(seen: list[object], tracer: object, meter: object, turns: int) -> float:
    """Median ms per turn of handing these events to a fresh tracer and flushing it, 5 runs."""
    from flue_nb.runtime.tracing._spans import SpanObserver

    runs = []
    for _ in range(5):
        fresh = SpanObserver(tracer, meter, delay=3600)  # only the flush below hands over
        t = time.thread_time()
        for event in seen:
            fresh(event)  # type: ignore[arg-type]
        fresh.flush()
        runs.append((time.thread_time() - t) * 1000 / turns)
    return median(runs)


def _stopwatch_cost(calls: int = 20_000) -> float:
    """Seconds the per-event stopwatch itself adds to the tracer's time (two `thread_time()`
    calls around a callback that does nothing); the least of 5 runs, so at most that is taken off."""
    inside = [0.0]

    def nothing(event: object) -> None:
        pass

    def timed(event: object) -> None:
        t = time.thread_time()
        nothing(event)
        inside[0] += time.thread_time() - t

    runs = []
    for _ in range(5):
        inside[0] = 0.0
        for _ in range(calls):
            timed(None)
        runs.append(inside[0] / calls)
    return min(runs)


def measure(blocks: int = BLOCKS, per_block: int = PER_BLOCK) -> tuple[float, float, float, float, float]:
    """Medians, ms per turn: untraced, traced, inside the tracer, replayed warm, flue_nb's own part."""
    from opentelemetry.metrics import NoOpMeter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.trace import NoOpTracer

    from flue_nb.runtime.events import observe_all
    from flue_nb.runtime.tracing._spans import SpanObserver

    class NoOpExporter(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(NoOpExporter()))
    meters = MeterProvider()
    s = _session()
    for _ in range(per_block):  # warm up: imports, first-render caches
        s.prompt("hi")
    # What flue.instrument() registers, wrapped to also clock the tracer's own CPU time: on the
    # loop's thread (an event joins the queue) and on the tracer's thread (the SDK's work).
    observer = SpanObserver(provider.get_tracer("bench"), meters.get_meter("bench"))
    inside = [0.0]
    seen: list[object] = []
    stopwatch = _stopwatch_cost()

    def tracer_thread_cpu() -> float:
        thread = observer._thread  # the bench reads it: its CPU time is the tracer's
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident)) if thread and thread.ident else 0.0

    def timed(event):  # type: ignore[no-untyped-def]
        t = time.thread_time()
        observer(event)
        inside[0] += time.thread_time() - t - stopwatch
        seen.append(event)

    times: dict[bool, list[float]] = {False: [], True: []}
    own: list[float] = []
    for i in range(blocks * 2):
        # ABBA order: the conversation grows, so a later block is a little slower; this cancels it.
        traced = i % 4 in (1, 2)
        stop = observe_all(timed) if traced else (lambda: None)
        inside[0] = 0.0
        before = tracer_thread_cpu()
        t0 = time.process_time()
        for _ in range(per_block):
            s.prompt("hi")
        if traced:  # what still waits is handed over here, inside the block's time
            t = time.thread_time()
            observer.flush()
            inside[0] += time.thread_time() - t
        times[traced].append((time.process_time() - t0) * 1000 / (2 * per_block))
        stop()
        if traced:
            inside[0] += tracer_thread_cpu() - before
            own.append(inside[0] * 1000 / (2 * per_block))
    turns = 2 * per_block * len(own)

    warm = _replay(seen, provider.get_tracer("bench"), meters.get_meter("bench"), turns)
    ours = _replay(seen, NoOpTracer(), NoOpMeter("bench"), turns)
    return median(times[False]), median(times[True]), median(own), warm, ours


def rows_for(plain: float, traced: float, own: float, warm: float, ours: float) -> list[Result]:
    share = traced / plain - 1
    direct = own / plain
    return [
        Result("tracing", "CPU ms per turn: untraced / traced", f"{plain:.3f} / {traced:.3f}", "", "info"),
        Result("tracing", "traced / untraced blocks, minus one (noisy)", f"{share:+.1%}", "", "info"),
        Result(
            "tracing",
            "tracer CPU per turn (both its threads) / loop's per-turn CPU",
            f"{own:.3f} ms = {direct:.1%}",
            f"< {TARGET:.0%}",
            verdict(direct < TARGET),
        ),
        Result(
            "tracing",
            "the same events replayed in one batch: tracer / flue_nb's own part",
            f"{warm:.3f} / {ours:.3f} ms = {warm / plain:.1%} / {ours / plain:.1%}",
            "",
            "info",
        ),
    ]


def run(quick: bool = False) -> list[Result]:
    return rows_for(*measure(6 if quick else BLOCKS, 10 if quick else PER_BLOCK))


def main() -> None:
    print(load_line())
    print_table(rows_for(*measure()))


if __name__ == "__main__":
    main()
