"""Recording AwoooP's spans in memory (the otel extra's SDK), and reading them back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from awooop import telemetry


@contextlib.contextmanager
def recording() -> Iterator[InMemorySpanExporter]:
    """AwoooP makes spans into the exporter while the block runs (as ``AWOOOP_TRACING`` does
    into its exporter), none after."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.use(provider)
    try:
        yield exporter
    finally:
        telemetry.use(None)
        provider.shutdown()


def traceparent(span: ReadableSpan) -> str:
    """The span's context as the W3C header names it."""
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def trace_id(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"{context.trace_id:032x}"


def parent_id(span: ReadableSpan) -> str | None:
    return None if span.parent is None else f"{span.parent.span_id:016x}"


def span_id(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"{context.span_id:016x}"


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    """The finished spans whose name starts with ``prefix``, in the order they started."""
    found = [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]
    return sorted(found, key=lambda s: s.start_time or 0)
