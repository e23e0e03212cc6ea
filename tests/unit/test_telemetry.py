"""awooop.telemetry: optional OpenTelemetry, the spans' context and the headers it gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from awooop import telemetry
from awooop.config import ConfigError, Settings
from tests.support import spans

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def recorded() -> Iterator[InMemorySpanExporter]:
    with spans.recording() as exporter:
        yield exporter


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this virtualenv (its own tracer provider)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AWOOOP_"))}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_without_opentelemetry_awooop_imports_and_makes_no_spans():
    # OpenTelemetry made unimportable, as when the otel extra is not installed
    done = python(
        """
        import json, sys
        sys.modules["opentelemetry"] = None
        import awooop.engine.notify, awooop.engine.runner, awooop.outbound.transport
        import awooop.tasks.app, awooop.web.app, awooop.workflows.actions
        from awooop import bootstrap, config, telemetry
        from awooop.config import Settings

        with telemetry.step("s", {"step": "s"}) as span:
            span.set(outcome="SUCCEEDED")
            inside = (span.traceparent, telemetry.outbound_headers())
        refused = []
        for tracing in ("otlp", "console"):
            try:
                bootstrap.check_startup(Settings(tracing=tracing))
            except config.ConfigError as exc:
                refused.append(str(exc))
        print(json.dumps({
            "installed": telemetry.INSTALLED,
            "started": telemetry.start(Settings(), "web"),
            "inside": inside,
            "refused": refused,
        }))
        """
    )

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["installed"] is False
    assert result["started"] is False
    assert result["inside"] == [None, {}]
    assert result["refused"] == [
        f"AWOOOP_TRACING={mode} needs OpenTelemetry, which is not installed: "
        "pip install 'awooop[otel]' (or AWOOOP_TRACING=off)"
        for mode in ("otlp", "console")
    ]


def test_tracing_is_off_unless_set():
    assert Settings.from_env({}, required=()).tracing == "off"


@pytest.mark.parametrize(
    ("raw", "mode"), [("otlp", "otlp"), ("Console", "console"), ("off", "off")]
)
def test_tracing_setting_takes_its_modes(raw, mode):
    assert Settings.from_env({"AWOOOP_TRACING": raw}, required=()).tracing == mode


def test_an_unknown_tracing_mode_is_refused_by_name():
    with pytest.raises(
        ConfigError, match="AWOOOP_TRACING='jaeger' is not one of off, otlp, console"
    ):
        Settings.from_env({"AWOOOP_TRACING": "jaeger"}, required=())


def test_with_tracing_off_spans_are_inert_and_no_header_goes_out():
    assert not telemetry.enabled()
    with (
        telemetry.segment("wf", CALLER, {"run_id": "r"}, 0) as segment,
        telemetry.step("s", {}) as step,
    ):
        step.set(outcome="FAILED")
        step.fail("boom")
        assert (segment.traceparent, step.traceparent) == (None, None)
        assert telemetry.outbound_headers() == {}


def test_a_step_span_gives_its_context_to_the_handler_and_to_outgoing_calls(recorded):
    with telemetry.segment("wf", CALLER, {"run_id": "r"}, 0), telemetry.step("s", {}) as step:
        inside = step.traceparent
        headers = telemetry.outbound_headers()

    (finished,) = spans.named(recorded, "step s")
    assert inside == spans.traceparent(finished)
    assert headers == {"traceparent": inside}
    assert telemetry.outbound_headers() == {}  # no span is current any more


def test_a_segment_continues_the_stored_traceparent_from_when_its_claim_was_sent(recorded):
    with telemetry.segment("wf", CALLER, {"run_id": "r", "missing": None}, 1_000) as span:
        span.set(outcome="completed", nothing=None)

    (segment,) = spans.named(recorded, "run wf")
    assert spans.trace_id(segment) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert spans.parent_id(segment) == "00f067aa0ba902b7"
    assert segment.start_time == 1_000
    assert dict(segment.attributes or {}) == {
        "awooop.run_id": "r",
        "awooop.outcome": "completed",
    }


def test_a_segment_of_a_run_without_traceparent_starts_a_trace_of_its_own(recorded):
    # a span current when the segment starts is never its parent
    with telemetry.step("outside", {}), telemetry.segment("wf", None, {}, 0):
        pass

    (segment,) = spans.named(recorded, "run wf")
    assert segment.parent is None


def test_an_unsampled_caller_keeps_the_runs_work_unsampled(recorded):
    unsampled = CALLER[:-2] + "00"

    with telemetry.admission("api", unsampled, {}) as admitted:
        stored = admitted.traceparent

    assert recorded.get_finished_spans() == ()
    assert stored is not None
    assert stored.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-") and stored.endswith("-00")


def test_a_process_started_with_console_tracing_prints_its_spans_as_awooop():
    done = python(
        """
        from awooop import telemetry
        from awooop.config import Settings

        settings = Settings(tracing="console")
        assert telemetry.start(settings, "worker") and telemetry.start(settings, "worker")
        with telemetry.segment("wf", None, {"run_id": "r"}, 0):
            pass
        telemetry.shutdown()
        """
    )

    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["name"] == "run wf"
    assert printed["resource"]["attributes"]["service.name"] == "awooop"
    assert printed["resource"]["attributes"]["awooop.process"] == "worker"


def test_otel_service_name_names_the_service():
    done = python(
        """
        from awooop import telemetry
        from awooop.config import Settings

        telemetry.start(Settings(tracing="console"), "web")
        with telemetry.admission("api", None, {}):
            pass
        telemetry.shutdown()
        """,
        OTEL_SERVICE_NAME="ops-automation",
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["resource"]["attributes"]["service.name"] == "ops-automation"
