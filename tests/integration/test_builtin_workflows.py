"""The built-in alert-triage and chatops workflows against a local automation endpoint."""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator

import pytest

from awooop.engine import runner
from awooop.store import projects
from tests.support import approvals as setup
from tests.support import db, threaded_server
from tests.support import requests as channel_requests
from tests.support.fake_provider import FakeProvider


class Automation(http.server.BaseHTTPRequestHandler):
    """Records (path, Idempotency-Key, body); answers from ``responses`` by path."""

    calls: list[tuple[str, str, dict]] = []
    responses: dict[str, tuple[int, dict]] = {}

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append((self.path, self.headers["Idempotency-Key"], body))
        status, answer = self.responses.get(self.path, (200, {}))
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def provider(engine, project, settings) -> Iterator[FakeProvider]:
    """Where approval prompts go: the project's webhook, on a local fake provider."""
    fake = FakeProvider()
    setup.configure(
        engine, settings, project["project_id"], None, {"notify_url": f"{fake.url}/hook"}
    )
    yield fake
    fake.close()


def approve(client, engine, settings, project, provider, run_id) -> None:
    """Send the run's prompt (to the webhook) and approve it through the API."""
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_APPROVAL
    setup.drain(engine, setup.provider_settings(settings, provider.url))
    (prompt,) = [c.json for c in provider.to("/hook") if c.json["run_id"] == str(run_id)]
    assert prompt["type"] == "approval.requested"
    response = setup.decide_by_api(client, project, prompt["approval_token"])
    assert response.status_code == 200, response.json


@pytest.fixture
def automation(engine, project, provider) -> Iterator[type[Automation]]:
    handler = type("Recorder", (Automation,), {"calls": [], "responses": {}})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threaded_server.start(server, "automation")
    with engine.connect() as conn:
        projects.set_config(
            conn,
            project["project_id"],
            {"actions_url": f"http://127.0.0.1:{server.server_address[1]}"},
        )
        projects.set_routes(
            conn,
            project["project_id"],
            {"alertmanager": "alert-triage", "telegram": "chatops", "line": "chatops"},
        )
    yield handler
    server.shutdown()
    server.server_close()


def critical_alert(project):
    alert = {
        **channel_requests.alert(),
        "labels": {"alertname": "DiskFull", "instance": "db-1", "severity": "critical"},
    }
    return channel_requests.alertmanager(
        project, channel_requests.alertmanager_payload(alerts=[alert])
    )


def admit(client, request) -> str:
    path, headers, body = request
    response = client.post(path, headers=headers, data=body)
    assert response.status_code == 202, response.json
    body = response.json
    return body["runs"][0]["run_id"] if "runs" in body else body["run_id"]


def deliver_diagnostics(client, project, run_id) -> None:
    response = client.post(
        f"/v1/projects/{project['project_id']}/runs/{run_id}/tool-results",
        headers={
            "Authorization": f"Bearer {project['api_token']}",
            "Content-Type": "application/json",
        },
        data=json.dumps(
            {
                "event_id": "diag-1",
                "step": "diagnose",
                "status": "succeeded",
                "output": {"disk": "97%"},
            }
        ),
    )
    assert response.status_code == 202


def test_alert_triage_diagnoses_asks_remediates_and_reports(
    client, engine, project, settings, automation, provider
):
    automation.responses["/remediate"] = (200, {"change": "chg-7"})
    automation.responses["/verify"] = (200, {"healthy": True})
    run_id = admit(client, critical_alert(project))

    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    deliver_diagnostics(client, project, run_id)
    approve(client, engine, settings, project, provider, run_id)
    assert [c[0] for c in automation.calls] == ["/diagnostics"]  # nothing before approval
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    paths = [(path, key) for path, key, _ in automation.calls]
    assert paths == [
        ("/diagnostics", f"{run_id}:diagnose:forward"),
        ("/remediate", f"{run_id}:remediate:forward"),
        ("/verify", f"{run_id}:verify:forward"),
    ]
    assert automation.calls[1][2]["diagnostics"] == {"disk": "97%"}
    assert db.run(engine, run_id)["output"]["reply"] == (
        "[awooop] firing critical DiskFull on db-1: remediated"
    )


def test_alert_triage_without_a_critical_alert_asks_nobody(
    client, engine, project, settings, automation, provider
):
    run_id = admit(client, channel_requests.alertmanager(project))  # no severity label

    runner.execute(engine, settings, run_id)
    deliver_diagnostics(client, project, run_id)

    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    outputs = {e["step"]: e.get("output") for e in db.run(engine, run_id)["saga_steps"]}
    assert outputs["approve"] == {"needed": False}
    assert [c[0] for c in automation.calls] == ["/diagnostics"]
    assert db.count(engine, "awooop_approval") == 0


def test_alert_triage_rolls_back_a_remediation_that_did_not_help(
    client, engine, project, settings, automation, provider
):
    automation.responses["/remediate"] = (200, {"change": "chg-8"})
    automation.responses["/verify"] = (200, {"healthy": False})
    run_id = admit(client, critical_alert(project))
    runner.execute(engine, settings, run_id)
    deliver_diagnostics(client, project, run_id)
    approve(client, engine, settings, project, provider, run_id)

    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED

    rollback = [c for c in automation.calls if c[0] == "/rollback"]
    assert [(key, body["change"]) for _, key, body in rollback] == [
        (f"{run_id}:remediate:compensate", "chg-8")
    ]
    assert db.run(engine, run_id)["saga_status"] == "COMPENSATED"


def test_chatops_restart_command_asks_then_calls_the_endpoint_and_replies(
    client, engine, project, settings, automation, provider
):
    run_id = admit(client, channel_requests.telegram(project, text="/restart nginx"))

    approve(client, engine, settings, project, provider, run_id)
    assert automation.calls == []
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    assert [(p, k, b["service"]) for p, k, b in automation.calls] == [
        ("/restart", f"{run_id}:act:forward", "nginx")
    ]
    assert db.run(engine, run_id)["output"] == {"reply": "[awooop] restarted nginx"}


def test_chatops_unknown_command_is_rejected_without_calling_anything(
    client, engine, project, settings, automation
):
    run_id = admit(client, channel_requests.telegram(project, text="/reboot-everything now"))

    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED

    assert automation.calls == []
    assert "not a command this bot knows" in db.run(engine, run_id)["failure_reason"]


def test_chatops_endpoint_refusal_is_a_rejection(
    client, engine, project, settings, automation, provider
):
    automation.responses["/restart"] = (403, {"error": "not allowed"})
    run_id = admit(
        client,
        channel_requests.line(project, [channel_requests.line_event("e-9", text="/restart api")]),
    )
    approve(client, engine, settings, project, provider, run_id)

    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED

    assert "refused (403)" in db.run(engine, run_id)["failure_reason"]
