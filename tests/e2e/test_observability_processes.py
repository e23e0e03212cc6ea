"""Observability with real processes: exact metrics across gunicorn and Celery processes,
traceparent from ingress to worker logs, no secret, token or Authorization header in any log
or task message (channel credentials, approval tokens, outbound credentials), and Flower."""

from __future__ import annotations

import base64
import json
import secrets
import uuid

import pytest
import requests as http

from awooop.tasks import runs as run_tasks
from awooop.workflows import registry
from tests.support import approvals as approvals_setup
from tests.support import db, metrics
from tests.support import requests as channel_requests
from tests.support import runs as test_runs
from tests.support.fake_provider import FakeProvider
from tests.support.processes import Process, wait_until

pytestmark = pytest.mark.slow

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CREDENTIAL_HEADERS = (
    "authorization",
    "x-telegram-bot-api-secret-token",
    "x-gitea-signature",
    "x-line-signature",
)


def wait_for_status(engine, run_ids, status: str, timeout: float = 30) -> None:
    wait_until(
        lambda: all(db.run(engine, r)["status"] == status for r in run_ids),
        timeout,
        f"runs to be {status}",
    )


def json_lines(process: Process) -> list[dict]:
    """The JSON log lines of a process (all of them: tests/e2e/test_json_logs_processes.py)."""
    lines = []
    for line in process.log().splitlines():
        if line.startswith("{"):
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
    return lines


def test_metrics_after_a_known_sequence_of_events_read_exactly_what_happened(
    stack, engine, project
):
    stack.worker()
    _, base = stack.web()  # two gunicorn workers: the requests may land on either

    # Given three new Telegram updates and two duplicates of them
    statuses, run_ids = [], set()
    for update_id in (1, 2, 3, 1, 2):
        path, headers, body = channel_requests.telegram(project, update_id=update_id)
        response = http.post(base + path, headers=headers, data=body, timeout=10)
        statuses.append(response.status_code)
        run_ids.add(response.json()["run_id"])
    assert statuses == [202, 202, 202, 200, 200] and len(run_ids) == 3

    # When the worker runs them to completion
    wait_for_status(engine, run_ids, "COMPLETED")

    # Then /metrics, summing every web and worker process, reads exactly that
    def scrape() -> str | None:
        text = http.get(base + "/metrics", timeout=10).text
        done = metrics.sample(text, "awooop_run_segments_total", outcome="completed")
        return text if done == 3 else None

    text = str(wait_until(scrape, 20, "the worker's counters to reach /metrics"))
    samples = metrics.parse(text)

    def named(name: str) -> dict[frozenset, float]:
        return {labels: value for (n, labels), value in samples.items() if n == name}

    assert named("awooop_admissions_total") == {
        frozenset({("channel", "telegram"), ("result", "created")}): 3,
        frozenset({("channel", "telegram"), ("result", "duplicate")}): 2,
    }
    assert {dict(k)["status"]: v for k, v in named("awooop_runs").items()} == {
        "PENDING": 0,
        "RUNNING": 0,
        "WAITING_TOOL": 0,
        "WAITING_APPROVAL": 0,
        "RESUMED": 0,
    }
    assert named("awooop_runs_finished_total") == {frozenset({("status", "COMPLETED")}): 3}
    assert named("awooop_run_segments_total") == {frozenset({("outcome", "completed")}): 3}
    assert metrics.sample(text, "awooop_claim_latency_seconds_count") == 3
    steps = [s.name for s in registry.latest("demo-telegram").steps]
    assert {
        dict(k)["step"]: v
        for k, v in named("awooop_step_duration_seconds_count").items()
        if dict(k)["workflow"] == "demo-telegram"
    } == {step: 3 for step in steps}
    # (the worker creates these series at 0, so the first loss or recovery is visible)
    assert set(named("awooop_lease_losses_total").values()) == {0}
    assert set(named("awooop_reaper_recoveries_total").values()) == {0}
    assert (
        named("awooop_http_responses_total")[
            frozenset({("endpoint", "ingress.webhook"), ("code", "202")})
        ]
        == 3
    )
    assert http.get(base + "/healthz", timeout=10).status_code == 200
    assert http.get(base + "/readyz", timeout=10).json()["status"] == "ready"


def test_traceparent_from_ingress_is_stored_and_carried_into_the_worker_log(stack, engine, project):
    worker = stack.worker()
    _, base = stack.web()

    path, headers, body = channel_requests.api(project, key="traced")
    traced = http.post(
        base + path, headers={**headers, "traceparent": TRACEPARENT}, data=body, timeout=10
    ).json()["run_id"]
    path, headers, body = channel_requests.api(project, key="not-traced")
    untraced = http.post(
        base + path, headers={**headers, "traceparent": TRACEPARENT.upper()}, data=body, timeout=10
    ).json()["run_id"]
    wait_for_status(engine, [traced, untraced], "COMPLETED")

    assert db.run(engine, traced)["traceparent"] == TRACEPARENT
    assert db.run(engine, untraced)["traceparent"] is None  # invalid: ignored, run admitted

    def segment_logged(run_id: str) -> bool:  # its last line follows the COMPLETED commit
        lines = [line for line in json_lines(worker) if line.get("run_id") == run_id]
        return "run_completed" in {line.get("action") for line in lines}

    wait_until(lambda: segment_logged(traced) and segment_logged(untraced), 10, "the log lines")
    lines = json_lines(worker)
    traced_lines = [line for line in lines if line.get("run_id") == traced]
    assert all(line.get("traceparent") == TRACEPARENT for line in traced_lines)
    untraced_lines = [line for line in lines if line.get("run_id") == untraced]
    assert untraced_lines and all("traceparent" not in line for line in untraced_lines)


def test_no_secret_token_or_authorization_header_reaches_a_log_or_a_task_message(
    stack, engine, project, redis_client
):
    # Given the web process with its access log on and every awooop logger at DEBUG
    stack.env["AWOOOP_ACCESS_LOG"] = "1"
    stack.env["AWOOOP_LOG_LEVEL"] = "DEBUG"
    web, base = stack.web()
    pid = project["project_id"]
    wrong_token = "canary-wrong-token-" + secrets.token_hex(8)
    query_secret = "canary-query-" + secrets.token_hex(8)
    basic = base64.b64encode(f"alertmanager:{project['secrets']['alertmanager']}".encode()).decode()
    sent_headers: list[dict] = []

    def post(request: tuple[str, dict, bytes], **extra_headers: str) -> http.Response:
        path, headers, body = request
        headers = {**headers, **extra_headers}
        sent_headers.append(headers)
        return http.post(base + path, headers=headers, data=body, timeout=10)

    # When requests carrying every kind of credential arrive, good and bad
    created = []
    for channel in ("telegram", "alertmanager", "gitea", "line", "api"):
        response = post(channel_requests.valid(channel, project))
        assert response.status_code == 202, response.text
        payload = response.json()
        created.append(payload["runs"][0]["run_id"] if channel == "line" else payload["run_id"])
    path, headers, body = channel_requests.alertmanager(
        project, channel_requests.alertmanager_payload(status="resolved")
    )
    response = post((path, headers, body), Authorization=f"Basic {basic}")
    assert response.status_code == 202
    created.append(response.json()["run_id"])
    path, headers, body = channel_requests.api(project, key="wrong-token")
    assert post((path, headers, body), Authorization=f"Bearer {wrong_token}").status_code == 401
    path, headers, body = channel_requests.telegram(project, update_id=99)
    assert post((f"{path}?token={query_secret}", headers, body)).status_code == 202
    auth = {"Authorization": f"Bearer {project['api_token']}"}
    run_url = f"{base}/v1/projects/{pid}/runs/{created[0]}"
    assert http.get(run_url, headers=auth, timeout=10).status_code == 200
    assert http.get(f"{run_url}?api_token={query_secret}", timeout=10).status_code == 401
    # the runs API and the management endpoints, with the token and with a wrong one
    assert http.get(f"{base}/v1/projects/{pid}/runs", headers=auth, timeout=10).ok
    assert http.get(f"{run_url}/events", headers=auth, timeout=10).ok
    operation = {"operation_id": "canary-op", "reason": "not paused, so refused"}
    resume = http.post(f"{run_url}/resume", headers=auth, json=operation, timeout=10)
    assert resume.status_code == 409
    wrong = {"Authorization": f"Bearer {wrong_token}"}
    pause = http.post(f"{run_url}/pause", headers=wrong, json=operation, timeout=10)
    assert pause.status_code == 401

    # Then each task message carries one run id and nothing else
    messages = [json.loads(m) for m in redis_client.lrange("runs", 0, -1)]
    assert len(messages) == len(created) + 1
    for message in messages:
        args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        assert kwargs == {} and len(args) == 1 and uuid.UUID(args[0])
    # ...and, once workers and sweeps have run everything, no log line holds a credential
    stack.worker()
    stack.worker("maintenance", queues="maintenance")
    stack.beat()
    wait_for_status(engine, created, "COMPLETED")
    stack.stop()

    canaries = {
        "api token": project["api_token"],
        "wrong api token": wrong_token,
        "query string secret": query_secret,
        "alertmanager basic credentials": basic,
        **{f"{channel} secret": value for channel, value in project["secrets"].items()},
        **{
            f"{name} header": value.split(" ")[-1]
            for headers in sent_headers
            for name, value in headers.items()
            if name.lower() in CREDENTIAL_HEADERS
        },
    }
    logs = {p.name: p.log() for p in stack.processes}
    texts = {**logs, **{f"message {i}": json.dumps(m) for i, m in enumerate(messages)}}
    assert {
        "method": "POST",
        "path": f"/v1/projects/{pid}/webhooks/telegram",
        "status": 202,
    }.items() <= next(
        line for line in json_lines(web) if line.get("path", "").endswith("/webhooks/telegram")
    ).items()  # access log on
    assert any(created[0] in line for line in logs["worker"].splitlines())  # worker logged
    leaks = [
        (what, where)
        for what, secret in canaries.items()
        for where, text in texts.items()
        if secret in text
    ]
    assert leaks == []


def test_flower_refuses_to_start_without_a_credential(stack):
    flower, _ = stack.flower(basic_auth=None)

    wait_until(lambda: flower.popen.poll() is not None, 20, "flower to exit")

    assert flower.popen.returncode != 0
    assert "set FLOWER_BASIC_AUTH=user:password" in flower.log()


def test_flower_asks_for_its_credential_and_shows_task_events(stack, engine, project):
    credential = "ops:" + secrets.token_urlsafe(18)
    user, _, password = credential.partition(":")
    flower, base = stack.flower(basic_auth=credential)
    stack.worker()

    def answers() -> bool:
        try:
            return http.get(base + "/healthcheck", timeout=2).status_code == 200
        except http.ConnectionError:
            return False

    wait_until(answers, 30, "flower to listen")
    assert http.get(base + "/api/tasks", timeout=10).status_code == 401
    assert http.get(base + "/api/tasks", auth=(user, "wrong"), timeout=10).status_code == 401

    # Flower lists a task only from events it received: wait until its event receiver has
    # heard the worker (worker-online / heartbeat), or the task's "received" event (which
    # carries its name and args) may go by before Flower listens.
    def worker_heard() -> bool:
        workers = http.get(base + "/workers?json=1", auth=(user, password), timeout=10)
        return any(w.get("status") for w in workers.json().get("data", []))

    wait_until(worker_heard, 30, "flower to hear the worker's events")

    # Task events flow from the worker (worker_send_task_events): the run's task appears
    run_id = test_runs.admit(engine, project["project_id"])
    run_tasks.enqueue([run_id])
    wait_for_status(engine, [run_id], "COMPLETED")

    def listed() -> list[dict]:
        tasks = http.get(base + "/api/tasks", auth=(user, password), timeout=10).json()
        return [t for t in tasks.values() if t.get("state") == "SUCCESS"]

    [task] = wait_until(listed, 20, "flower to list the succeeded task")
    assert task["name"] == "awooop.runs.execute"
    assert task["args"] == repr((str(run_id),))  # the message carries the run id only
    # the task returned with the run's last write handed to the finisher (the run is
    # COMPLETED above: that write committed)
    assert "finishing" in task["result"]
    stack.stop()
    assert password not in flower.log()


def test_no_approval_token_or_outbound_credential_reaches_a_log_or_a_task_message(
    stack, engine, project, settings, redis_client
):
    # Given a project whose runs ask for approval through a webhook, and the web process with
    # its access log on and every awooop logger at DEBUG
    provider = FakeProvider()
    pid = project["project_id"]
    approvals_setup.configure(engine, settings, pid, config={"notify_url": f"{provider.url}/hook"})
    stack.env.update(
        {
            "AWOOOP_ACCESS_LOG": "1",
            "AWOOOP_LOG_LEVEL": "DEBUG",
            "AWOOOP_TELEGRAM_API_BASE": f"{provider.url}/telegram",
            "AWOOOP_LINE_API_BASE": f"{provider.url}/line",
        }
    )
    stack.worker("worker", queues="runs")
    web, base = stack.web()
    auth = {"Authorization": f"Bearer {project['api_token']}", "Content-Type": "application/json"}

    def decide(token: str) -> http.Response:
        return http.post(
            f"{base}/v1/projects/{pid}/approvals/{token}",
            headers=auth,
            data=json.dumps({"decision": "approve", "actor": "alice"}),
            timeout=10,
        )

    path, headers, body = channel_requests.api(project, key="needs-approval")
    run_id = http.post(base + path, headers=headers, data=body, timeout=10).json()["run_id"]
    wait_for_status(engine, [run_id], "WAITING_APPROVAL")

    # When the prompt is sent: its task message waits in the queue with an outbox id only
    # (sent just after the run's WAITING_APPROVAL commit)
    queued = wait_until(
        lambda: redis_client.lrange("notifications", 0, -1), 10, "the prompt's task message"
    )
    messages = [json.loads(m) for m in queued]
    for message in messages:
        args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        assert kwargs == {} and all(uuid.UUID(str(arg)) for arg in args)
    stack.worker("notifier", queues="notifications")
    wait_until(lambda: provider.to("/hook"), 30, "the approval prompt")
    prompt = next(c for c in provider.to("/hook") if c.json["type"] == "approval.requested")
    token = prompt.json["approval_token"]
    # ...and decisions arrive with the token in the URL path, an unknown one first
    unknown = secrets.token_urlsafe(32)
    assert decide(unknown).status_code == 404
    assert decide(token).status_code == 200
    wait_for_status(engine, [run_id], "COMPLETED")
    stack.stop()
    provider.close()

    # Then no log line holds the tokens, the outbound credentials or the webhook signature
    canaries = {
        "approval token": token,
        "unknown approval token": unknown,
        "api token": project["api_token"],
        "telegram bot token": approvals_setup.BOT_TOKEN,
        "line access token": approvals_setup.LINE_ACCESS_TOKEN,
        "gitea token": approvals_setup.GITEA_TOKEN,
        "webhook signing secret": approvals_setup.WEBHOOK_SECRET,
        "webhook signature": prompt.headers["webhook-signature"].partition(",")[2],
        "legacy webhook signature": prompt.headers["X-AwoooP-Signature"].partition("=")[2],
    }
    logs = {p.name: p.log() for p in stack.processes}
    decisions = [line for line in json_lines(web) if "/approvals/" in line.get("path", "")]
    assert [(line["path"], line["status"]) for line in decisions] == [
        (f"/v1/projects/{pid}/approvals/[redacted]", 404),
        (f"/v1/projects/{pid}/approvals/[redacted]", 200),
    ]
    texts = {**logs, **{f"message {i}": json.dumps(m) for i, m in enumerate(messages)}}
    leaks = [
        (what, where)
        for what, secret in canaries.items()
        for where, text in texts.items()
        if secret in text
    ]
    assert leaks == []
