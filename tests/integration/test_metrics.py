"""``/metrics`` and the counters behind it, over a real PostgreSQL, in one process.

Counters of this process are global, so these tests compare before and after; exact totals
across real processes are checked in tests/e2e/test_observability_processes.py.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid

import pytest
from celery import Celery
from sqlalchemy import create_engine, text

from awooop import errors
from awooop import metrics as awooop_metrics
from awooop.config import Settings
from awooop.domain.workflow import Step, StepContext, Workflow
from awooop.engine import lease, runner, sweeps
from awooop.store import leases
from awooop.web.app import create_app
from awooop.workflows import registry
from tests.support import db, metrics, requests, tokens, waiting
from tests.support import runs as test_runs
from tests.support import workflows as wf
from tests.support.processes import free_port


def _unreachable_database(settings: Settings) -> Settings:
    return dataclasses.replace(
        settings, database_url=f"postgresql+psycopg2://postgres@127.0.0.1:{free_port()}/nowhere"
    )


def test_admissions_are_counted_by_channel_and_result(client, project):
    before = {
        result: metrics.local("awooop_admissions_total", channel="telegram", result=result)
        for result in ("created", "duplicate", "unauthenticated")
    }
    before_reused = metrics.local("awooop_admissions_total", channel="api", result="key_reused")

    for update_id in (1, 2, 3, 1, 2):  # three new events, two duplicates
        path, headers, body = requests.telegram(project, update_id=update_id)
        client.post(path, headers=headers, data=body)
    path, headers, body = requests.telegram(project, update_id=4)
    client.post(path, headers={**headers, "X-Telegram-Bot-Api-Secret-Token": "wrong"}, data=body)
    path, headers, body = requests.api(project, key="k", payload={"a": 1})
    client.post(path, headers=headers, data=body)
    path, headers, body = requests.api(project, key="k", payload={"a": 2})
    assert client.post(path, headers=headers, data=body).status_code == 422

    after = {
        result: metrics.local("awooop_admissions_total", channel="telegram", result=result)
        for result in before
    }
    assert {k: after[k] - before[k] for k in before} == {
        "created": 3,
        "duplicate": 2,
        "unauthenticated": 1,
    }
    reused = metrics.local("awooop_admissions_total", channel="api", result="key_reused")
    assert reused - before_reused == 1


def test_refused_admissions_are_counted_by_why(settings, engine, project, redis_client):
    # Limits apply to the next request (no cached project limits).
    client = create_app(dataclasses.replace(settings, auth_cache_seconds=0), engine).test_client()
    results = ("forbidden", "rate_limited", "over_quota")
    before = {r: metrics.local("awooop_admissions_total", channel="api", result=r) for r in results}
    viewer = tokens.add(engine, project["project_id"], "viewer")

    path, headers, body = requests.api(project, key="viewer")
    forbidden = client.post(path, headers={**headers, **tokens.bearer(viewer)}, data=body)
    tokens.set_limits(engine, project["project_id"], max_active_runs=0)
    path, headers, body = requests.api(project, key="quota")
    over_quota = client.post(path, headers=headers, data=body)
    tokens.set_limits(engine, project["project_id"], max_active_runs=None, ingress_per_minute=0)
    path, headers, body = requests.api(project, key="rate")
    rate_limited = client.post(path, headers=headers, data=body)

    assert (forbidden.status_code, over_quota.status_code, rate_limited.status_code) == (
        403,
        429,
        429,
    )
    after = {r: metrics.local("awooop_admissions_total", channel="api", result=r) for r in results}
    assert {r: after[r] - before[r] for r in results} == {r: 1 for r in results}


def test_metrics_serve_unfinished_runs_by_status_from_the_database(
    client, engine, project, settings
):
    completed_before = metrics.local("awooop_runs_finished_total", status="COMPLETED")
    for update_id in (1, 2, 3):
        path, headers, body = requests.telegram(project, update_id=update_id)
        client.post(path, headers=headers, data=body)
    # One of them runs to the end (the state machine allows no shortcut there).
    assert runner.execute(engine, settings, None) == runner.Outcome.COMPLETED

    response = client.get("/metrics")

    assert response.status_code == 200
    assert response.content_type.startswith("text/plain")
    body = response.get_data(as_text=True)
    assert metrics.sample(body, "awooop_metrics_database_up") == 1
    gauge = {
        dict(labels)["status"]: value
        for (name, labels), value in metrics.parse(body).items()
        if name == "awooop_runs"
    }
    assert gauge == {
        "PENDING": 2,
        "RUNNING": 0,
        "WAITING_TOOL": 0,
        "WAITING_APPROVAL": 0,
        "RESUMED": 0,
    }
    # The finished one is counted where it finished, not read back from every row kept.
    completed = metrics.local("awooop_runs_finished_total", status="COMPLETED")
    assert completed - completed_before == 1
    # Counted events are served too (this process's own, without a multiprocess directory).
    assert metrics.sample(body, "awooop_admissions_total", channel="telegram", result="created")


def test_outbox_backlog_counts_pending_and_parked_messages(client, engine, project):
    with engine.connect() as conn:
        conn.execute(
            text(
                "INSERT INTO awooop_outbox (project_id, channel, purpose, payload, status, "
                "created_at) SELECT :p, 'telegram', 'run_outcome', '{}', s, now() - age "
                "FROM (VALUES ('PENDING', interval '30 seconds'), ('PENDING', interval '0'), "
                "('PARKED', interval '0'), ('SENT', interval '90 seconds')) AS m(s, age)"
            ),
            {"p": project["project_id"]},
        )

    body = client.get("/metrics").get_data(as_text=True)

    assert metrics.sample(body, "awooop_outbox_backlog") == 2
    assert metrics.sample(body, "awooop_outbox_parked") == 1
    age = metrics.sample(body, "awooop_outbox_oldest_pending_age_seconds")
    assert age is not None and 30 <= age < 60


def test_metrics_still_answer_when_the_database_is_down(settings):
    client = create_app(_unreachable_database(settings)).test_client()

    response = client.get("/metrics")

    assert response.status_code == 200
    body = response.get_data(as_text=True)
    assert metrics.sample(body, "awooop_metrics_database_up") == 0
    assert "awooop_runs{" not in body


def test_an_executed_run_observes_its_claim_latency_and_each_step_duration(
    engine, project, settings
):
    def step_count(step: str) -> float:
        return metrics.local(
            "awooop_step_duration_seconds_count",
            workflow="noop-3",
            step=step,
            phase="forward",
            status="SUCCEEDED",
        )

    steps = [s.name for s in registry.latest("noop-3").steps]
    before_steps = {s: step_count(s) for s in steps}
    before_claims = metrics.local("awooop_claim_latency_seconds_count")
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")

    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    assert {s: step_count(s) - before_steps[s] for s in steps} == {s: 1 for s in steps}
    assert metrics.local("awooop_claim_latency_seconds_count") - before_claims == 1


def test_claim_latency_is_the_time_since_the_run_was_enqueued(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    with engine.connect() as conn:
        conn.execute(
            text(
                "UPDATE awooop_run_state SET enqueued_at = now() - interval '42 seconds' "
                "WHERE run_id = :r"
            ),
            {"r": run_id},
        )
        claim = leases.claim(conn, "w1", 30.0, run_id)

    assert claim is not None and 42 <= claim.waited_seconds < 50


def test_reaper_recoveries_are_counted_as_requeued_or_failed(engine, project):
    requeued_before = metrics.local("awooop_reaper_recoveries_total", outcome="requeued")
    failed_before = metrics.local("awooop_reaper_recoveries_total", outcome="failed")
    finished_before = metrics.local("awooop_runs_finished_total", status="FAILED")
    again = test_runs.admit(engine, project["project_id"])
    exhausted = test_runs.admit(engine, project["project_id"])
    with engine.connect() as conn:
        conn.execute(
            text("UPDATE awooop_run_state SET max_attempts = 1 WHERE run_id = :r"),
            {"r": exhausted},
        )
        leases.claim(conn, "w1", 0.1, again)
        leases.claim(conn, "w1", 0.1, exhausted)
    time.sleep(0.3)

    reaped = sweeps.reap_once(engine)

    assert sorted(r.to_status for r in reaped) == ["FAILED", "PENDING"]
    requeued = metrics.local("awooop_reaper_recoveries_total", outcome="requeued")
    failed = metrics.local("awooop_reaper_recoveries_total", outcome="failed")
    assert (requeued - requeued_before, failed - failed_before) == (1, 1)
    finished = metrics.local("awooop_runs_finished_total", status="FAILED")
    assert finished - finished_before == 1


def test_a_run_the_reaper_fails_counts_a_failure_and_a_duration_under_its_workflow(engine, project):
    def failures() -> float:
        labels = {"workflow": "noop-3", "failure_code": "E-LEASE-001"}
        return metrics.local("awooop_run_failures_total", **labels)

    def ended() -> tuple[float, float]:
        labels = {"workflow": "noop-3", "status": "FAILED"}
        return (
            metrics.local("awooop_run_duration_seconds_count", **labels),
            metrics.local("awooop_run_duration_seconds_sum", **labels),
        )

    failures_before, (count_before, sum_before) = failures(), ended()
    exhausted = test_runs.admit(engine, project["project_id"])
    with engine.connect() as conn:
        conn.execute(
            text(
                "UPDATE awooop_run_state SET max_attempts = 1,"
                " created_at = now() - interval '1 hour' WHERE run_id = :r"
            ),
            {"r": exhausted},
        )
        leases.claim(conn, "w1", 0.1, exhausted)
    time.sleep(0.3)

    assert [r.to_status for r in sweeps.reap_once(engine)] == ["FAILED"]

    count, total = ended()
    assert (failures() - failures_before, count - count_before) == (1, 1)
    assert 3600 <= total - sum_before < 3660


def test_waiting_approvals_show_in_the_gauges_and_an_expiry_is_observed_as_a_wait(
    client, engine, project, settings
):
    def expired() -> float:
        return metrics.local("awooop_approval_wait_seconds_count", decision="expired")

    before = expired()
    body = client.get("/metrics").get_data(as_text=True)
    assert metrics.sample(body, "awooop_approvals_waiting") == 0
    assert metrics.sample(body, "awooop_approval_soonest_expiry_seconds") is None
    run_id = test_runs.admit(engine, project["project_id"], "test-approval")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_APPROVAL

    body = client.get("/metrics").get_data(as_text=True)
    assert metrics.sample(body, "awooop_approvals_waiting") == 1
    soonest = metrics.sample(body, "awooop_approval_soonest_expiry_seconds")
    assert soonest is not None and 890 < soonest <= 900  # a 15-minute TTL
    with engine.connect() as conn:
        conn.execute(text("UPDATE awooop_timer SET due_at = now() WHERE kind = 'approval_expiry'"))
        conn.execute(
            text(
                "UPDATE awooop_approval SET expires_at = now(),"
                " created_at = now() - interval '15 minutes' WHERE run_id = :r"
            ),
            {"r": run_id},
        )

    fired = sweeps.fire_due_timers_once(engine, settings)

    assert [t.kind for t in fired] == ["approval_expiry"]
    assert expired() - before == 1
    body = client.get("/metrics").get_data(as_text=True)
    assert metrics.sample(body, "awooop_approvals_waiting") == 0


def test_retention_passes_are_counted_as_caught_up_or_behind(engine, project, settings):
    def passes(result: str) -> float:
        return metrics.local("awooop_retention_passes_total", result=result)

    before = {r: passes(r) for r in ("caught_up", "behind")}
    finished = [test_runs.admit(engine, project["project_id"]) for _ in range(3)]
    for run_id in finished:
        assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    with engine.connect() as conn:
        conn.execute(
            text(
                "UPDATE awooop_run_state SET created_at = now() - interval '40 days',"
                " finished_at = now() - interval '40 days' WHERE run_id = ANY(:r)"
            ),
            {"r": finished},
        )
    # batches of 1 and a pass that stops starting batches at once: rows are left due
    sweeps.retention_once(
        engine,
        dataclasses.replace(settings, retention_batch_size=1, sweep_pass_seconds=0.0),
    )
    sweeps.retention_once(engine, settings)

    assert {r: passes(r) - before[r] for r in before} == {"caught_up": 1, "behind": 1}
    assert [r for r in finished if db.count(engine, "awooop_run_state", "run_id = :r", r=r)] == []


def test_a_manual_close_counts_a_cancelled_run_and_a_refused_one_nothing(engine, project, settings):
    enabled = dataclasses.replace(settings, manual_close_enabled=1)
    run_id = test_runs.admit(engine, project["project_id"], "test-halt")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.ESCALATED
    before = metrics.local("awooop_runs_finished_total", status="CANCELLED")

    test_runs.operate(engine, enabled, project, "manual_close", run_id)
    with pytest.raises(errors.OperationRefused):  # closed already
        test_runs.operate(engine, enabled, project, "manual_close", run_id)

    assert metrics.local("awooop_runs_finished_total", status="CANCELLED") - before == 1


def test_lease_renewals_count_renewed_and_lost_and_a_loss_is_counted_once(engine, project):
    counters = [
        ("awooop_lease_renewals_total", {"outcome": "renewed"}),
        ("awooop_lease_renewals_total", {"outcome": "lost"}),
        ("awooop_lease_losses_total", {"detected_by": "renewal"}),
    ]
    before = [metrics.local(name, **labels) for name, labels in counters]
    run_id = test_runs.admit(engine, project["project_id"])
    with engine.connect() as conn:
        claim = leases.claim(conn, "w1", 0.1, run_id)
    assert claim is not None
    held = lease.Lease(engine, claim, ttl=0.1, interval=1.0)

    assert held.renew_now()  # renewed
    time.sleep(0.3)
    sweeps.reap_once(engine)
    assert not held.renew_now()  # lost: reaped
    assert not held.renew_now()  # already lost: not asked again, not counted again

    after = [metrics.local(name, **labels) for name, labels in counters]
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1]


def _take_the_lease_away(ctx: StepContext) -> dict:
    """While the step runs, the run is taken from this worker (as a step timeout would)."""
    url = ctx.input["event"]["database_url"]
    other = create_engine(url)
    with other.begin() as conn:
        conn.execute(
            text(
                "UPDATE awooop_run_state SET lease_epoch = lease_epoch + 1, status = 'PENDING' "
                "WHERE run_id = :r"
            ),
            {"r": ctx.run_id},
        )
    other.dispose()
    return {}


registry.register(Workflow("test-lease-taken", 1, [Step("taken", _take_the_lease_away)]))


def test_a_fenced_write_that_matches_no_row_counts_a_lease_loss(
    engine, project, settings, database_url
):
    before = metrics.local("awooop_lease_losses_total", detected_by="write")
    run_id = test_runs.admit(
        engine, project["project_id"], "test-lease-taken", {"database_url": database_url}
    )

    assert runner.execute(engine, settings, run_id) == runner.Outcome.LEASE_LOST

    assert metrics.local("awooop_lease_losses_total", detected_by="write") - before == 1


def test_timer_lateness_is_observed_by_timer_kind(engine, project, settings):
    before = metrics.local("awooop_timer_lateness_seconds_count", kind="retry")
    run_id = test_runs.admit(engine, project["project_id"], "test-flaky", {"fail_times": 1})
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED
    time.sleep(0.3)  # the first retry is due after 0.2 s

    fired = sweeps.fire_due_timers_once(engine, settings)

    assert [t.kind for t in fired] == ["retry"]
    assert metrics.local("awooop_timer_lateness_seconds_count", kind="retry") - before == 1
    assert metrics.local("awooop_timer_lateness_seconds_sum", kind="retry") >= 0


def test_http_answers_are_counted_by_endpoint_and_status_code(client, project, settings):
    def count(endpoint: str, code: str) -> float:
        return metrics.local("awooop_http_responses_total", endpoint=endpoint, code=code)

    answers = [
        ("ingress.create_run", "202"),
        ("ingress.create_run", "401"),
        ("unmatched", "404"),
        ("ingress.create_run", "503"),
    ]
    before = {answer: count(*answer) for answer in answers}

    path, headers, body = requests.api(project, key="counted")
    assert client.post(path, headers=headers, data=body).status_code == 202
    wrong = {**headers, "Authorization": "Bearer wrong"}
    assert client.post(path, headers=wrong, data=body).status_code == 401
    assert client.get("/nowhere").status_code == 404
    down = create_app(_unreachable_database(settings)).test_client()
    assert down.post(path, headers=headers, data=body).status_code == 503

    assert {answer: count(*answer) - before[answer] for answer in answers} == {
        answer: 1 for answer in answers
    }


def test_the_intervention_gauge_counts_runs_waiting_for_a_person(client, engine, project, settings):
    halted = test_runs.admit(engine, project["project_id"], "test-halt")
    runner.execute(engine, settings, halted)
    test_runs.admit(engine, project["project_id"])  # pending: not waiting for a person

    body = client.get("/metrics").get_data(as_text=True)

    assert metrics.sample(body, "awooop_interventions") == 1
    assert metrics.sample(body, "awooop_runs", status="WAITING_APPROVAL") == 1


def test_a_running_run_without_journal_progress_shows_in_the_oldest_progress_age(
    client, engine, project, settings
):
    gauge = "awooop_running_oldest_progress_age_seconds"
    assert metrics.sample(client.get("/metrics").get_data(as_text=True), gauge) == 0
    # Renewals every 0.3 s: a lease kept alive is not progress.
    settings = dataclasses.replace(settings, lease_ttl_seconds=3.0, heartbeat_interval_seconds=0.3)
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    run_id = test_runs.admit(engine, project["project_id"], "test-gated", {"gate": gate})
    outcome: list[runner.Outcome] = []
    stuck = threading.Thread(
        target=lambda: outcome.append(runner.execute(engine, settings, run_id))
    )
    stuck.start()
    try:
        age = waiting.until(
            lambda: (
                value
                if (value := metrics.sample(client.get("/metrics").get_data(as_text=True), gauge))
                and value >= 1.5
                else None
            ),
            what="the stuck run's progress age to pass 1.5 s",
        )
        row = db.run(engine, run_id)
        with engine.connect() as conn:
            renewed_ago = conn.execute(
                text("SELECT extract(epoch FROM now() - :at)::float8"), {"at": row["heartbeat_at"]}
            ).scalar_one()
    finally:
        wf.GATES[gate].set()
        stuck.join(timeout=30)

    assert age >= 1.5
    assert row["status"] == "RUNNING"
    assert renewed_ago < 1.0  # the lease was renewed meanwhile; the age went on growing
    assert outcome == [runner.Outcome.COMPLETED]
    assert metrics.sample(client.get("/metrics").get_data(as_text=True), gauge) == 0


def test_the_database_collector_describes_every_family_it_collects(engine):
    collector = awooop_metrics.DatabaseCollector(engine, 2.0)

    collected = {(family.name, family.type) for family in collector.collect()}
    described = {(family.name, family.type) for family in collector.describe()}

    assert ("awooop_interventions", "gauge") in collected
    assert collected == described


def test_sweep_task_runs_are_counted_by_sweep_and_outcome():
    import awooop.tasks.app  # noqa: F401 - connects the counting signal receivers

    app = Celery("sweep-outcomes", set_as_current=False)

    @app.task(name="awooop.sweeps.test_quiet")
    def quiet() -> int:
        return 0

    @app.task(name="awooop.sweeps.test_broken")
    def broken() -> int:
        raise RuntimeError("the sweep's statement failed")

    @app.task(name="awooop.runs.test_not_a_sweep")
    def not_a_sweep() -> int:
        return 0

    def count(sweep: str, outcome: str) -> float:
        return metrics.local("awooop_sweep_passes_total", sweep=sweep, outcome=outcome)

    quiet.apply()
    quiet.apply()
    broken.apply()
    not_a_sweep.apply()

    assert (count("test_quiet", "succeeded"), count("test_quiet", "failed")) == (2, 0)
    assert (count("test_broken", "succeeded"), count("test_broken", "failed")) == (0, 1)
    assert count("awooop.runs.test_not_a_sweep", "succeeded") == 0
    assert count("test_not_a_sweep", "succeeded") == 0
