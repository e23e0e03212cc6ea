"""OpenTelemetry spans, when the ``otel`` extra is installed and ``AWOOOP_TRACING`` is on.

This module is the only one that imports OpenTelemetry. Without the extra, or with
``AWOOOP_TRACING=off`` (the default), every function here does nothing and every span
handle is inert: AwoooP behaves as if this module did not exist.

With it, a process sets up a tracer provider when it starts (:func:`start`: the web app
factory, each Celery pool process) that exports over OTLP/HTTP (``otlp``) or prints spans
(``console``); the SDK's own ``OTEL_*`` variables apply (endpoint, headers, sampler, service
name, batching). The spans:

- ``admit {channel}`` (server): one admission request, continuing the caller's
  ``traceparent`` when it is valid. The run stores this span's context as its
  ``traceparent``, so the run's work joins the caller's trace under it.
- ``run {workflow}`` (consumer): one segment a worker drives, claim to last commit, parented
  on the run's stored ``traceparent`` — whichever worker claims it, however much later.
- ``step {step}`` (internal): one attempt of a step in a phase, inside its segment.
  Its context is ``ctx.traceparent`` and goes out as the ``traceparent`` header of the
  runtime's HTTP calls (:mod:`awooop.workflows.actions`, :mod:`awooop.outbound.transport`).
- ``send {channel}`` (client): one outbox send, parented on its run's ``traceparent``.

The header is W3C Trace Context whatever ``OTEL_PROPAGATORS`` says: that is what callers
send and what the run stores.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    INSTALLED = True
except ImportError:  # the otel extra is not installed
    INSTALLED = False

from awooop.config import ConfigError, Settings
from awooop.config_checks import TRACING_MODES

# AWOOOP_TRACING's values.
OFF, OTLP, CONSOLE = TRACING_MODES
INSTALL_HINT = "pip install 'awooop[otel]'"
# Span attribute names' prefix.
PREFIX = "awooop."

# Attribute values: str, bool, int, float, a list of one of those, or None (left out).
Attributes = Mapping[str, Any]

_tracer: Any = None  # an opentelemetry Tracer while tracing is on in this process
_provider: Any = None  # the provider start() made (shut down by shutdown())
_started_in: int | None = None  # the pid that ran start()


def check(settings: Settings) -> None:
    """Refuse ``AWOOOP_TRACING`` other than off when the extra is not installed."""
    if settings.tracing != OFF and not INSTALLED:
        raise ConfigError(
            f"AWOOOP_TRACING={settings.tracing} needs OpenTelemetry, which is not installed: "
            f"{INSTALL_HINT} (or AWOOOP_TRACING=off)"
        )


def start(settings: Settings, process: str) -> bool:
    """Set up this process's tracer provider as ``settings.tracing`` says; True when spans
    are now made. Once per process: a later call (another app in the same process) keeps
    the first provider."""
    global _provider, _started_in
    check(settings)
    if settings.tracing == OFF or _started_in == os.getpid():
        return enabled()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    resource = Resource.create({"awooop.process": process})
    # OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES may name the service; else it is awooop.
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "awooop"}))
    provider = TracerProvider(resource=resource)
    if settings.tracing == OTLP:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    # Global too, so a user's own instrumentation in this process joins the same traces.
    trace.set_tracer_provider(provider)
    use(provider)
    _provider, _started_in = provider, os.getpid()
    return True


def use(provider: Any) -> None:
    """Make spans with ``provider`` (an SDK ``TracerProvider``) from now on; None: stop.
    :func:`start` calls it; tests give their own provider (an in-memory exporter's)."""
    global _tracer
    _tracer = None if provider is None else provider.get_tracer("awooop")


def shutdown() -> None:
    """Export what is still buffered and stop (a pool process ending)."""
    global _provider
    if _provider is not None:
        _provider.shutdown()
        _provider = None
    use(None)


def enabled() -> bool:
    return _tracer is not None


class Span:
    """The span being made, or an inert handle when tracing is off."""

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def set(self, **attributes: Any) -> None:
        """Set ``awooop.<name>`` attributes (None values are left out)."""
        if self._span is not None:
            for name, value in attributes.items():
                if value is not None:
                    self._span.set_attribute(PREFIX + name, value)

    def fail(self, description: str) -> None:
        """Mark the span as an error."""
        if self._span is not None:
            self._span.set_status(trace.Status(trace.StatusCode.ERROR, description[:500]))

    @property
    def traceparent(self) -> str | None:
        """This span's context as a W3C ``traceparent``; None when tracing is off."""
        if self._span is None:
            return None
        return _traceparent_of(trace.set_span_in_context(self._span))


_INERT = Span()


def _traceparent_of(ctx: Any) -> str | None:
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=ctx)
    return carrier.get("traceparent")


def _parent(traceparent: str | None) -> Any:
    """The context to start a span under: the remote span ``traceparent`` names (a new trace
    when it is None or invalid), never the current one."""
    if not traceparent:
        return otel_context.Context()
    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


@contextlib.contextmanager
def _span(
    name: str,
    kind: str,
    parent: Any,
    attributes: Attributes,
    start_time: int | None = None,
    error_on_exception: bool = True,
) -> Iterator[Span]:
    attrs = {PREFIX + k: v for k, v in attributes.items() if v is not None}
    with _tracer.start_as_current_span(
        name,
        context=parent,
        kind=getattr(trace.SpanKind, kind),
        attributes=attrs,
        start_time=start_time,
        record_exception=True,
        set_status_on_exception=error_on_exception,
    ) as span:
        yield Span(span)


@contextlib.contextmanager
def admission(channel: str, traceparent: str | None, attributes: Attributes) -> Iterator[Span]:
    """The span of one admission request, under the caller's ``traceparent`` (the header as
    it came: invalid is a new trace)."""
    if _tracer is None:
        yield _INERT
        return
    # A client's mistake (a 4xx answer) is not the span's error: the caller says what is.
    parent = _parent(traceparent)
    with _span(f"admit {channel}", "SERVER", parent, attributes, None, False) as span:
        yield span


@contextlib.contextmanager
def segment(
    workflow: str, traceparent: str | None, attributes: Attributes, start_time: int
) -> Iterator[Span]:
    """The span of one run segment, under the run's stored ``traceparent``; it started at
    ``start_time`` (ns since the epoch: when the claim was sent)."""
    if _tracer is None:
        yield _INERT
        return
    with _span(f"run {workflow}", "CONSUMER", _parent(traceparent), attributes, start_time) as s:
        yield s


@contextlib.contextmanager
def step(name: str, attributes: Attributes) -> Iterator[Span]:
    """The span of one step attempt, a child of the current span (its segment's)."""
    if _tracer is None:
        yield _INERT
        return
    with _span(f"step {name}", "INTERNAL", otel_context.get_current(), attributes) as span:
        yield span


@contextlib.contextmanager
def send(channel: str, traceparent: str | None, attributes: Attributes) -> Iterator[Span]:
    """The span of one outbound message send, under its run's ``traceparent``."""
    if _tracer is None:
        yield _INERT
        return
    with _span(f"send {channel}", "CLIENT", _parent(traceparent), attributes) as span:
        yield span


def outbound_headers() -> dict[str, str]:
    """``{"traceparent": ...}`` of the current span for an outgoing HTTP request; empty when
    tracing is off or no span is current."""
    if _tracer is None or not trace.get_current_span().get_span_context().is_valid:
        return {}
    current = _traceparent_of(otel_context.get_current())
    return {"traceparent": current} if current else {}
