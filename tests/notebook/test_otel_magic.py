"""`c.FlueMagics.otel`: a cell's run is traced, its span names the notebook, and the cell's
`metadata["flue"]` keeps the trace id so a saved notebook links to its trace (issue 25.2)."""

from __future__ import annotations

import pytest
from kernel_helpers import Kernel

pytestmark = pytest.mark.kernel
pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is in the test extra")

SETUP = """
import flue_nb as flue
import flue_nb.runtime.tracing
from flue_nb.models import ScriptedModel
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
model = ScriptedModel(["traced answer"])

@flue.agent
def traced():
    flue.use_model(model)
"""

SPAN = """
flue_nb.runtime.tracing.flush()  # what the tracer holds reaches the SDK (it hands spans over in batches)
(root,) = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent traced"]
print(format(root.context.trace_id, "032x"), root.attributes["flue.notebook.path"])
"""


def test_otel_setting_traces_the_cell_and_its_metadata_names_the_trace(tmp_path):
    notebook = str(tmp_path / "analysis.ipynb")
    kernel = Kernel(tmp_path / "jupyter", tmp_path, JPY_SESSION_NAME=notebook)
    try:
        kernel.ok(SETUP)
        kernel.ok("%config FlueMagics.otel = True")
        run = kernel.run("%%flue -a traced\nhello", timeout=60)
        span = kernel.ok(SPAN).stdout.split()
    finally:
        kernel.shutdown()
    assert "traced answer" in run.all_text(), run.all_text()
    metas = [d["metadata"]["flue"] for d in run.displays.values() if "flue" in (d.get("metadata") or {})]
    assert metas and metas[-1]["trace_id"] == span[0]
    assert span[1] == notebook
