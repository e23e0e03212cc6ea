"""Every label of the newer metrics has a fixed set of values: whatever a request, a run or a
stored row brings, what is not in the set is counted under one value of its own."""

from __future__ import annotations

import re
from pathlib import Path

from flask import Flask

from awooop import errors, metrics
from awooop.domain import saga
from awooop.engine import runner
from awooop.store import leases, reaper
from awooop.web import request_metrics
from tests.support.metrics import local

ROOT = Path(__file__).resolve().parents[2]


def test_a_registered_workflow_is_its_own_label_and_any_other_name_is_unregistered():
    assert metrics.workflow_label("chatops") == "chatops"
    assert metrics.workflow_label("alert-triage") == "alert-triage"
    assert metrics.workflow_label("no-such-workflow") == "unregistered"
    assert metrics.workflow_label("chatops/../" + "x" * 500) == "unregistered"
    assert metrics.workflow_label("") == "unregistered"


def test_a_failure_code_of_the_catalogue_is_its_own_label_and_any_other_is_other():
    assert metrics.failure_code_label("E-STEP-002") == "E-STEP-002"
    assert metrics.failure_code_label("E-LEASE-001") == "E-LEASE-001"
    assert metrics.failure_code_label("E-AUTH-001") == "other"  # an HTTP answer's code
    assert metrics.failure_code_label("E-MADE-UP-999") == "other"
    assert metrics.failure_code_label(None) == "other"


def test_every_failure_code_the_engine_writes_is_in_the_catalogue():
    written = {
        saga.STEP_REJECTED,
        saga.RETRIES_EXHAUSTED,
        saga.OUTCOME_UNKNOWN,
        saga.OUTPUT_NOT_JSON,
        saga.SIGNAL_TIMEOUT,
        saga.MANUAL_INTERVENTION,
        saga.CANCELLED,
        saga.DEADLINE,
        saga.CONFLICT,
        saga.APPROVAL_REJECTED,
        saga.APPROVAL_EXPIRED,
        leases.UNLOADABLE,
        leases.WORKFLOW_UNAVAILABLE,
        runner.WRITE_REFUSED,
        reaper.EXHAUSTED,
    }

    assert written - set(errors.RUN_FAILURE_CODES) == set()


def test_every_code_named_in_the_source_is_an_answer_or_a_run_failure_code():
    answers = {
        cls.code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.AwoooPError)
    } | {errors.DUPLICATE_EVENT_CODE}
    named = {
        code
        for path in (ROOT / "awooop").rglob("*.py")
        for code in re.findall(r"E-[A-Z]+-\d{3}", path.read_text())
    }

    assert named - answers - set(errors.RUN_FAILURE_CODES) == set()


def test_a_status_code_is_labelled_by_its_class_and_anything_else_is_other():
    assert [metrics.status_class(c) for c in (101, 200, 204, 302, 404, 429, 503, 599)] == [
        "1xx",
        "2xx",
        "2xx",
        "3xx",
        "4xx",
        "4xx",
        "5xx",
        "5xx",
    ]
    assert {metrics.status_class(c) for c in (0, 99, 600, 999)} == {"other"}


def test_an_outbound_channel_without_an_adapter_is_other():
    assert [metrics.channel_label(c) for c in ("telegram", "line", "gitea", "webhook")] == [
        "telegram",
        "line",
        "gitea",
        "webhook",
    ]
    assert metrics.channel_label("smtp") == "other"


def test_a_request_is_timed_under_its_route_template_never_its_path():
    app = Flask("labels")
    app.add_url_rule("/things/<thing_id>", "thing", lambda thing_id: ("", 204))
    request_metrics.install(app)
    client = app.test_client()
    route = "/things/<thing_id>"
    before = local("awooop_http_request_duration_seconds_count", route=route, status="2xx")
    unmatched = local("awooop_http_request_duration_seconds_count", route="unmatched", status="4xx")

    for n in range(3):
        assert client.get(f"/things/{n}-{'x' * 40}").status_code == 204
    assert client.get("/no/such/path/at/all").status_code == 404

    assert local("awooop_http_request_duration_seconds_count", route=route, status="2xx") == (
        before + 3
    )
    assert local("awooop_http_request_duration_seconds_count", route="unmatched", status="4xx") == (
        unmatched + 1
    )
    assert local("awooop_http_request_duration_seconds_count", route="/things/0", status="2xx") == 0


def test_a_finished_run_is_counted_under_bounded_labels():
    def failures(workflow: str, code: str) -> float:
        return local("awooop_run_failures_total", workflow=workflow, failure_code=code)

    def ended(workflow: str, status: str) -> float:
        return local("awooop_run_duration_seconds_count", workflow=workflow, status=status)

    before = {
        "failed": failures("unregistered", "other"),
        "ended": ended("unregistered", "FAILED"),
        "completed": ended("chatops", "COMPLETED"),
        "chatops_failed": failures("chatops", "E-STEP-002"),
    }

    metrics.run_finished("someone-elses-workflow", "FAILED", "E-INVENTED-001", 12.0)
    metrics.run_finished("chatops", "COMPLETED", None, 3.0)
    metrics.run_finished("chatops", "FAILED", "E-STEP-002", 4.0)

    assert failures("unregistered", "other") == before["failed"] + 1
    assert ended("unregistered", "FAILED") == before["ended"] + 1
    assert ended("chatops", "COMPLETED") == before["completed"] + 1
    assert failures("chatops", "E-STEP-002") == before["chatops_failed"] + 1
    assert failures("someone-elses-workflow", "E-INVENTED-001") == 0
