"""OpenTelemetry spans of a run: admitted through the web app, executed in-process by the
runner, its outbound calls received by a local HTTP server."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from awooop import db as awooop_db
from awooop.engine import notify, runner
from awooop.outbound import messages
from awooop.store import outbox, projects
from tests.support import approvals as setup
from tests.support import db, spans, threaded_server, waiting
from tests.support import requests as channel_requests
from tests.support import workflows as wf
from tests.support.fake_provider import FakeProvider

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


class Automation(http.server.BaseHTTPRequestHandler):
    """The project's automation endpoint: records (path, headers by lowercase name), answers
    200 {}."""

    calls: list[tuple[str, dict[str, str]]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers["Content-Length"]))
        self.calls.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def automation(engine, project) -> Iterator[type[Automation]]:
    handler = type("Recorder", (Automation,), {"calls": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threaded_server.start(server, "automation")
    with engine.connect() as conn:
        projects.set_config(
            conn, project["project_id"], {"actions_url": f"http://127.0.0.1:{server.server_port}"}
        )
    db.allow_workflows(engine, project["project_id"], "test-traced")
    yield handler
    server.shutdown()
    server.server_close()


@pytest.fixture
def recorded() -> Iterator[InMemorySpanExporter]:
    with spans.recording() as exporter:
        yield exporter


def admit(client, project, mode: str = "ok", traceparent: str | None = CALLER, key="k-1"):
    path, headers, body = channel_requests.api(
        project, key=key, payload={"workflow": "test-traced", "input": {"mode": mode}}
    )
    if traceparent is not None:
        headers = {**headers, "traceparent": traceparent}
    return client.post(path, headers=headers, data=body)


def test_a_run_is_one_trace_from_the_callers_request_to_its_outbound_calls(
    client, engine, project, settings, automation, recorded
):
    # Given a caller's traceparent on the admission request
    response = admit(client, project)
    assert response.status_code == 202
    run_id = response.json["run_id"]

    # When a worker executes the run
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    # Then the admission span continues the caller's trace, and the run stores its context
    (admitted,) = spans.named(recorded, "admit ")
    assert admitted.name == "admit api" and admitted.kind is SpanKind.SERVER
    assert spans.trace_id(admitted) == CALLER_TRACE
    assert spans.parent_id(admitted) == CALLER_SPAN
    assert admitted.attributes["awooop.project_id"] == project["project_id"]
    assert admitted.attributes["awooop.channel"] == "api"
    assert admitted.attributes["awooop.run_id"] == run_id
    assert admitted.attributes["awooop.dedupe"] == "created"
    assert admitted.attributes["awooop.workflow"] == "test-traced"
    assert db.run(engine, run_id)["traceparent"] == spans.traceparent(admitted)
    # the segment is a child of the admission, in the caller's trace
    (segment,) = spans.named(recorded, "run ")
    assert segment.name == "run test-traced" and segment.kind is SpanKind.CONSUMER
    assert spans.trace_id(segment) == CALLER_TRACE
    assert spans.parent_id(segment) == spans.span_id(admitted)
    assert segment.attributes["awooop.run_id"] == run_id
    assert segment.attributes["awooop.outcome"] == "completed"
    assert segment.attributes["awooop.worker_id"] == db.run(engine, run_id)["worker_id"]
    # each step is a child of the segment, with its name, phase and outcome
    steps = spans.named(recorded, "step ")
    assert [
        (s.name, s.attributes["awooop.phase"], s.attributes["awooop.outcome"]) for s in steps
    ] == [
        ("step call", "forward", "SUCCEEDED"),
        ("step check", "forward", "SUCCEEDED"),
    ]
    assert {spans.parent_id(s) for s in steps} == {spans.span_id(segment)}
    assert steps[0].attributes["awooop.step"] == "call"
    assert steps[0].attributes["awooop.effect_id"] == f"{run_id}:call:forward"
    # the handler saw its step's context, and the outbound call carried it
    call_span = spans.traceparent(steps[0])
    assert wf.TRACEPARENTS[run_id][0] == ("call", "forward", call_span)
    ((path, headers),) = automation.calls
    assert path == "/forward" and headers["traceparent"] == call_span


def test_a_duplicate_admission_is_traced_as_one(client, engine, project, automation, recorded):
    first = admit(client, project)
    again = admit(
        client, project, traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    )

    assert (first.status_code, again.status_code) == (202, 200)
    created, duplicate = spans.named(recorded, "admit ")
    assert created.attributes["awooop.dedupe"] == "created"
    assert duplicate.attributes["awooop.dedupe"] == "duplicate"
    assert duplicate.attributes["awooop.run_id"] == first.json["run_id"]
    assert spans.trace_id(duplicate) == "0af7651916cd43dd8448eb211c80319c"
    # the run keeps the context it was admitted with
    assert db.run(engine, first.json["run_id"])["traceparent"] == spans.traceparent(created)


def test_a_compensation_is_traced_in_its_phase(
    client, engine, project, settings, automation, recorded
):
    run_id = admit(client, project, mode="refuse").json["run_id"]

    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED

    (segment,) = spans.named(recorded, "run ")
    assert segment.attributes["awooop.outcome"] == "failed"
    steps = spans.named(recorded, "step ")
    assert [
        (s.name, s.attributes["awooop.phase"], s.attributes["awooop.outcome"]) for s in steps
    ] == [
        ("step call", "forward", "SUCCEEDED"),
        ("step check", "forward", "REJECTED"),
        ("step call", "compensate", "SUCCEEDED"),
    ]
    assert {spans.parent_id(s) for s in steps} == {spans.span_id(segment)}
    # the undo call carries the compensation's context
    assert [(p, h["traceparent"]) for p, h in automation.calls] == [
        ("/forward", spans.traceparent(steps[0])),
        ("/compensate", spans.traceparent(steps[2])),
    ]


def test_each_segment_of_a_run_joins_the_trace_it_was_admitted_in(
    client, engine, project, settings, automation, recorded
):
    # Given a run whose "check" step fails once and is retried on its timer
    run_id = admit(client, project, mode="flaky").json["run_id"]
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED
    waiting.fire_when_due(engine, settings, uuid.UUID(run_id), "retry")

    # When the retry runs as a segment of its own
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    # Then both segments are children of the admission span
    (admitted,) = spans.named(recorded, "admit ")
    first, second = spans.named(recorded, "run ")
    assert [s.attributes["awooop.outcome"] for s in (first, second)] == [
        "retry_scheduled",
        "completed",
    ]
    epochs = [s.attributes["awooop.lease_epoch"] for s in (first, second)]
    assert epochs[0] < epochs[1]  # two claims
    assert {spans.parent_id(first), spans.parent_id(second)} == {spans.span_id(admitted)}
    assert {spans.trace_id(first), spans.trace_id(second)} == {CALLER_TRACE}
    failed = [
        s for s in spans.named(recorded, "step check") if s.status.status_code is StatusCode.ERROR
    ]
    (retried,) = [s for s in spans.named(recorded, "step check") if s not in failed]
    assert failed[0].attributes["awooop.outcome"] == "FAILED"
    assert "not yet" in (failed[0].status.description or "")
    assert spans.parent_id(failed[0]) == spans.span_id(first)
    assert spans.parent_id(retried) == spans.span_id(second)
    assert retried.attributes["awooop.step_attempt"] == 2


@pytest.mark.parametrize("header", [None, "00-xyz", "ff-" + CALLER[3:]])
def test_without_a_valid_caller_traceparent_the_admission_starts_a_trace(
    client, engine, project, settings, automation, recorded, header
):
    response = admit(client, project, traceparent=header)
    assert response.status_code == 202
    run_id = response.json["run_id"]
    runner.execute(engine, settings, run_id)

    (admitted,) = spans.named(recorded, "admit ")
    assert admitted.parent is None
    assert spans.trace_id(admitted) != CALLER_TRACE
    assert db.run(engine, run_id)["traceparent"] == spans.traceparent(admitted)
    (segment,) = spans.named(recorded, "run ")
    assert spans.parent_id(segment) == spans.span_id(admitted)


def test_a_refused_admission_is_traced_with_its_error_code(client, project, recorded):
    path, headers, body = channel_requests.api(project)
    headers = {**headers, "Authorization": "Bearer wrong", "traceparent": CALLER}

    assert client.post(path, headers=headers, data=body).status_code == 401

    (admitted,) = spans.named(recorded, "admit ")
    assert admitted.attributes["awooop.error_code"] == "E-AUTH-001"
    assert admitted.status.status_code is StatusCode.UNSET  # the caller's mistake
    assert spans.trace_id(admitted) == CALLER_TRACE


def test_with_tracing_off_nothing_changes(client, engine, project, settings, automation):
    run_id = admit(client, project).json["run_id"]

    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    # the run keeps the caller's context; handlers see none, and none goes out
    assert db.run(engine, run_id)["traceparent"] == CALLER
    assert [tp for _, _, tp in wf.TRACEPARENTS[run_id]] == [None, None]
    ((_, headers),) = automation.calls
    assert "traceparent" not in headers


def test_an_outbound_message_is_sent_in_its_runs_trace(
    client, engine, project, settings, automation, recorded
):
    # Given a run admitted in the caller's trace, and a webhook message of that run
    setup.configure(engine, settings, project["project_id"], workflow=None)  # a signing key
    run_id = admit(client, project).json["run_id"]
    (admitted,) = spans.named(recorded, "admit ")
    receiver = FakeProvider()
    message = messages.Message(
        "webhook", "run_outcome", {"url": f"{receiver.url}/hook", "body": {}}
    )
    with awooop_db.transaction(engine) as conn:
        (message_id,) = outbox.add(conn, project["project_id"], run_id, [message])

    # When it is sent
    try:
        assert notify.send(engine, settings, message_id) is notify.Sent.SENT
    finally:
        receiver.close()

    # Then the send is a child of the admission, and the provider got the send's context
    (sent,) = spans.named(recorded, "send ")
    assert sent.name == "send webhook" and sent.kind is SpanKind.CLIENT
    assert spans.parent_id(sent) == spans.span_id(admitted)
    assert sent.attributes["awooop.run_id"] == run_id
    assert sent.attributes["awooop.outcome"] == "sent"
    (call,) = receiver.calls
    headers = {k.lower(): v for k, v in call.headers.items()}
    assert headers["traceparent"] == spans.traceparent(sent)


class Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP collector: keeps each export request (path, content type, body)."""

    exports: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.exports.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_otlp_tracing_exports_to_the_endpoint_the_otel_variables_name():
    # Given a collector, and a process started with AWOOOP_TRACING=otlp and the SDK's own
    # endpoint and resource variables
    collector = type("Kept", (Collector,), {"exports": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), collector)
    threaded_server.start(server, "collector")
    code = (
        "from awooop import telemetry\n"
        "from awooop.config import Settings\n"
        "assert telemetry.start(Settings.from_env(required=()), 'worker')\n"
        "with telemetry.segment('wf', None, {'run_id': 'r-1'}, 0):\n"
        "    pass\n"
        "telemetry.shutdown()\n"  # exports what is buffered, as a pool process ending does
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        AWOOOP_TRACING="otlp",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{server.server_port}",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=test",
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
        )
    finally:
        server.shutdown()
        server.server_close()

    # Then the span reached the collector, from the awooop service
    assert done.returncode == 0, done.stderr
    ((path, content_type, body),) = collector.exports
    assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
    request = ExportTraceServiceRequest.FromString(body)
    (resource_spans,) = request.resource_spans
    resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert resource["service.name"] == "awooop"
    assert resource["deployment.environment"] == "test"
    (scope,) = resource_spans.scope_spans
    (span,) = scope.spans
    assert span.name == "run wf"
    assert {a.key: a.value.string_value for a in span.attributes} == {"awooop.run_id": "r-1"}


@pytest.mark.parametrize(
    "starting",
    [
        "from awooop.web.app import create_app\ncreate_app()",
        # what a Celery pool process runs after the fork
        "from awooop.tasks import app\napp._after_fork()",
    ],
    ids=["web", "worker"],
)
def test_a_process_sets_up_tracing_when_it_starts_with_tracing_on(starting):
    code = (
        "from awooop import telemetry\n"
        f"{starting}\n"
        "assert telemetry.enabled()\n"
        "with telemetry.admission('api', None, {}):\n"
        "    pass\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}

    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "AWOOOP_TRACING": "console"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == "admit api"
