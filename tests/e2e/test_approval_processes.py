"""Approvals with real web, worker, maintenance and beat processes: the prompt sent by the
notifications queue, expiry by the beat-driven timer sweep, and a waiting run that survives
reaper passes and a SIGKILLed worker; `awooop approvals` listing and deciding one."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
import requests

from tests.support import approvals as setup
from tests.support import db
from tests.support import requests as req
from tests.support.fake_provider import FakeProvider
from tests.support.processes import awooop_command, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider()
    yield fake
    fake.close()


def start(stack, provider):
    stack.env.update(
        {
            "AWOOOP_TELEGRAM_API_BASE": f"{provider.url}/telegram",
            "AWOOOP_OUTBOX_INTERVAL_SECONDS": "0.5",
            "AWOOOP_OUTBOX_BASE_DELAY_SECONDS": "0.2",
        }
    )
    worker = stack.worker("worker-1", queues="runs,notifications")
    stack.worker("maintenance", queues="maintenance")
    stack.beat()
    _, base = stack.web()
    return worker, base


def admit(base: str, project: dict) -> uuid.UUID:
    path, headers, body = req.api(project, key=uuid.uuid4().hex, payload={"service": "db-1"})
    response = requests.post(base + path, headers=headers, data=body, timeout=10)
    assert response.status_code == 202, response.text
    return uuid.UUID(response.json()["run_id"])


def decide(base: str, project: dict, token: str, decision: str = "approve") -> requests.Response:
    return requests.post(
        f"{base}/v1/projects/{project['project_id']}/approvals/{token}",
        headers={
            "Authorization": f"Bearer {project['api_token']}",
            "Content-Type": "application/json",
        },
        data=json.dumps({"decision": decision, "actor": "alice"}),
        timeout=10,
    )


def prompt_token(provider: FakeProvider, run_id: uuid.UUID) -> str:
    def prompted() -> bool:
        return any(c.json.get("run_id") == str(run_id) for c in provider.to("/hook"))

    wait_until(prompted, 30, "the approval prompt to reach the webhook")
    return next(
        c.json["approval_token"]
        for c in provider.to("/hook")
        if c.json.get("run_id") == str(run_id) and c.json["type"] == "approval.requested"
    )


def wait_for(engine, run_id, status: str, timeout: float = 40) -> dict:
    wait_until(
        lambda: db.run(engine, run_id)["status"] == status, timeout, f"run {run_id} to be {status}"
    )
    return db.run(engine, run_id)


def test_an_unanswered_approval_expires_and_the_run_fails_after_compensating(
    stack, engine, project, settings, provider
):
    setup.configure(
        engine,
        settings,
        project["project_id"],
        workflow="test-approval-short",  # a 1-second TTL
        config={"notify_url": f"{provider.url}/hook"},
    )
    _, base = start(stack, provider)

    run_id = admit(base, project)
    token = prompt_token(provider, run_id)

    # Nobody answers: the beat-driven timer sweep expires it, a worker compensates
    run = wait_for(engine, run_id, "FAILED")
    assert (run["failure_code"], run["saga_status"]) == ("E-APPROVAL-002", "COMPENSATED")
    undone = [e["step"] for e in run["saga_steps"] if e["phase"] == "compensate"]
    assert undone == ["prepare"]
    (approval,) = db.rows(engine, "SELECT status FROM awooop_approval")
    assert approval["status"] == "EXPIRED"

    # A decision after expiry changes nothing
    late = decide(base, project, token)
    assert (late.status_code, late.json()["error"]["code"]) == (410, "E-APPROVAL-002")
    assert db.run(engine, run_id)["version"] == run["version"]
    # The webhook was told how the run ended
    wait_until(
        lambda: any(c.json.get("type") == "run.finished" for c in provider.to("/hook")),
        20,
        "the outcome message",
    )


def test_a_waiting_run_survives_reapers_and_a_killed_worker_then_completes(
    stack, engine, project, settings, provider
):
    setup.configure(
        engine, settings, project["project_id"], config={"notify_url": f"{provider.url}/hook"}
    )
    worker, base = start(stack, provider)
    run_id = admit(base, project)
    token = prompt_token(provider, run_id)
    waiting = wait_for(engine, run_id, "WAITING_APPROVAL")

    # Several reaper passes (every 2 s here, lease TTL 3 s) and a SIGKILLed worker later
    time.sleep(7)
    worker.kill()
    stack.worker("worker-2", queues="runs,notifications")
    after = db.run(engine, run_id)
    assert (after["status"], after["version"], after["attempt_count"]) == (
        "WAITING_APPROVAL",
        waiting["version"],
        0,
    )
    reaped = [e for e in db.events(engine, run_id) if e["trigger"] == "reaper"]
    assert reaped == []

    # The approval still works, and the new worker finishes the run
    assert decide(base, project, token).status_code == 200
    done = wait_for(engine, run_id, "COMPLETED")
    assert [e["step"] for e in done["saga_steps"] if e.get("status") == "SUCCEEDED"] == [
        "prepare",
        "approve",
        "act",
    ]


def test_an_operator_lists_the_waiting_run_and_approves_it_from_the_command_line(
    stack, engine, project, settings, provider
):
    # Given a run waiting for an approval whose prompt carried its token
    setup.configure(
        engine, settings, project["project_id"], config={"notify_url": f"{provider.url}/hook"}
    )
    _, base = start(stack, provider)
    run_id = admit(base, project)
    token = prompt_token(provider, run_id)
    wait_for(engine, run_id, "WAITING_APPROVAL")

    def awooop(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return awooop_command(base, project["api_token"], *argv, stdin=stdin)

    # When the operator lists the runs waiting for an approval, then approves with the token
    listed = awooop("approvals", "list", project["project_id"], "--json")
    decided = awooop(
        "approvals", "decide", project["project_id"], "-", "approve", "--actor", "alice",
        "--comment", "checked", stdin=f"{token}\n",
    )  # fmt: skip
    again = awooop("approvals", "decide", project["project_id"], token, "approve", "--actor", "a")

    # Then the run was listed, the decision recorded as alice's, and the token used up
    assert listed.returncode == 0, listed.stderr
    assert [r["run_id"] for r in json.loads(listed.stdout)["runs"]] == [str(run_id)]
    assert decided.returncode == 0, decided.stderr
    assert decided.stdout == f"approved by alice: run {run_id} moves on\n"
    assert again.returncode == 1 and "E-APPROVAL-003 (HTTP 409)" in again.stderr
    assert wait_for(engine, run_id, "COMPLETED")["status"] == "COMPLETED"
    (approval,) = db.rows(engine, "SELECT status, decided_by, comment FROM awooop_approval")
    assert (approval["status"], approval["decided_by"], approval["comment"]) == (
        "APPROVED",
        "alice",
        "checked",
    )
