"""Approval steps: the prompt with its buttons, decisions from the API, Telegram and LINE,
single use under concurrency, token binding, expiry, and what the chat is told."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from awooop.config import Settings
from awooop.engine import runner, sweeps
from awooop.web.app import create_app
from tests.support import approvals as setup
from tests.support import db
from tests.support import requests as req
from tests.support import workflows as wf
from tests.support.fake_provider import FakeProvider


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider()
    yield fake
    fake.close()


@pytest.fixture
def out_settings(settings: Settings, provider: FakeProvider) -> Settings:
    return setup.provider_settings(settings, provider.url)


class Sent:
    """What the app handed to Celery: runs to execute, outbox messages to send."""

    def __init__(self) -> None:
        self.runs: list[uuid.UUID] = []
        self.messages: list[uuid.UUID] = []


@pytest.fixture
def sent() -> Sent:
    return Sent()


@pytest.fixture
def app_client(out_settings, engine, sent):
    app = create_app(
        out_settings,
        engine,
        enqueue=lambda ids: sent.runs.extend(ids) or len(ids),
        notify=lambda ids: sent.messages.extend(ids) or len(ids),
    )
    return app.test_client()


@pytest.fixture
def approval_project(project, engine, out_settings, provider):
    setup.configure(engine, out_settings, project["project_id"])
    return project


def telegram_update(project: dict, update: dict) -> tuple[str, dict, bytes]:
    headers = {
        "X-Telegram-Bot-Api-Secret-Token": project["secrets"]["telegram"],
        "Content-Type": "application/json",
    }
    path = f"/v1/projects/{project['project_id']}/webhooks/telegram?bot_id=123456"
    return path, headers, req.body(update)


def telegram_press(project: dict, token: str, update_id: int, user: int = 777, chat: int = 42):
    return telegram_update(
        project,
        {
            "update_id": update_id,
            "callback_query": {
                "id": f"cb-{update_id}",
                "from": {"id": user, "username": "alice"},
                "message": {"message_id": 9, "chat": {"id": chat}},
                "data": f"ap:{token}",
            },
        },
    )


def start_from_telegram(client, project, engine, settings, sent) -> uuid.UUID:
    update = {
        "update_id": 5001,
        "message": {"message_id": 1, "text": "/restart db-1", "chat": {"id": 42}},
    }
    response = post(client, telegram_update(project, update))
    assert response.status_code == 202, response.json
    run_id = uuid.UUID(response.json["run_id"])
    outcome = runner.execute(engine, settings, run_id, notify=sent.messages.extend)
    assert outcome == runner.Outcome.WAITING_APPROVAL
    return run_id


def _kw(built: tuple[str, dict, bytes]) -> dict:
    return {"headers": built[1], "data": built[2]}


def post(client, built):
    return client.post(built[0], **_kw(built))


def button_token(call_json: dict) -> str:
    keyboard = call_json["reply_markup"]["inline_keyboard"][0]
    assert [b["text"] for b in keyboard] == ["Approve", "Reject"]
    assert keyboard[1]["callback_data"] == "rj:" + keyboard[0]["callback_data"][3:]
    return keyboard[0]["callback_data"][3:]


def all_database_text(engine) -> str:
    with engine.connect() as conn:
        tables = [
            r[0]
            for r in conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            )
        ]
        return "\n".join(
            str(row[0])
            for table in tables
            for row in conn.execute(text(f'SELECT t::text FROM "{table}" t'))
        )


def test_telegram_prompt_buttons_and_callback_resume_the_run(
    app_client, approval_project, engine, out_settings, sent, provider
):
    # Given a run started from a Telegram chat, waiting for approval
    run_id = start_from_telegram(app_client, approval_project, engine, out_settings, sent)
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["lease_until"], row["attempt_count"]) == (
        "WAITING_APPROVAL",
        "RUNNING",
        None,
        0,
    )
    assert (
        db.count(engine, "awooop_timer", "kind = 'approval_expiry' AND run_id = :r", r=run_id) == 1
    )

    # When the worker's notification is sent, the chat gets the prompt with two buttons
    assert len(sent.messages) == 1
    assert setup.drain(engine, out_settings) == [setup.notify.Sent.SENT]
    (prompt,) = provider.to("/telegram/bot123456:")
    assert prompt.path == f"/telegram/bot{setup.BOT_TOKEN}/sendMessage"
    assert prompt.json["chat_id"] == 42
    assert "Approval needed: restart-db" in prompt.json["text"]
    assert "Restart db-1?" in prompt.json["text"]
    token = button_token(prompt.json)
    assert len(token) == 43

    # The database never holds the raw token (the sealed copy was wiped once sent)
    assert token not in all_database_text(engine)

    # When an approver presses Approve in that chat
    pressed = post(app_client, telegram_press(approval_project, token, 5002))
    assert (pressed.status_code, pressed.json["status"]) == (200, "approved")
    assert sent.runs[-1] == run_id
    assert db.run(engine, run_id)["status"] == "RESUMED"

    # Then the run continues and completes
    assert runner.execute(engine, out_settings, run_id) == runner.Outcome.COMPLETED
    journal = db.run(engine, run_id)["saga_steps"]
    approve = [
        (e["phase"], e.get("status"), e.get("decision")) for e in journal if e["step"] == "approve"
    ]
    assert approve == [
        ("forward", "REQUESTED", None),
        ("approval", None, "approved"),
        ("forward", "SUCCEEDED", None),
    ]
    assert wf.CALLS[str(run_id)] == ["do:prepare", "ask:approve", "do:act"]

    # And the chat is told: the button press answered, the decision, the outcome
    setup.drain(engine, out_settings)
    # (the prompt first; the others are sent in no particular order)
    calls = [(c.path.rsplit("/", 1)[1], c.json.get("text", "")) for c in provider.to("/telegram/")]
    assert calls[0][0] == "sendMessage"
    assert sorted(calls[1:]) == [
        ("answerCallbackQuery", "Approved."),
        ("sendMessage", f"Approved by telegram:alice: restart-db. Run {run_id} continues."),
        ("sendMessage", f"Run {run_id} finished: COMPLETED."),
    ]


def test_a_replayed_callback_update_is_a_duplicate(
    app_client, approval_project, engine, out_settings, sent, provider
):
    run_id = start_from_telegram(app_client, approval_project, engine, out_settings, sent)
    setup.drain(engine, out_settings)
    token = button_token(provider.to("/telegram/")[0].json)

    first = post(app_client, telegram_press(approval_project, token, 6001))
    replay = post(app_client, telegram_press(approval_project, token, 6001))

    assert first.json["status"] == "approved"
    assert (replay.status_code, replay.json["status"]) == (200, "duplicate")
    assert db.count(engine, "awooop_approval", "status = 'APPROVED'") == 1
    decisions = [e for e in db.run(engine, run_id)["saga_steps"] if e["phase"] == "approval"]
    assert len(decisions) == 1
    assert sent.runs.count(run_id) == 2  # admission, then the one decision


def test_a_press_from_a_stranger_or_another_chat_changes_nothing(
    app_client, approval_project, engine, out_settings, sent, provider
):
    run_id = start_from_telegram(app_client, approval_project, engine, out_settings, sent)
    setup.drain(engine, out_settings)
    token = button_token(provider.to("/telegram/")[0].json)

    stranger = post(app_client, telegram_press(approval_project, token, 7001, user=999))
    elsewhere = post(app_client, telegram_press(approval_project, token, 7002, chat=43))

    assert (stranger.json["status"], stranger.json["reason"]) == ("refused", "forbidden")
    assert (elsewhere.json["status"], elsewhere.json["reason"]) == ("refused", "forbidden")
    assert db.run(engine, run_id)["status"] == "WAITING_APPROVAL"
    setup.drain(engine, out_settings)
    answers = [c.json["text"] for c in provider.to("/telegram/") if "answerCallback" in c.path]
    assert answers == ["You may not decide this approval."] * 2


def test_line_postback_approves(app_client, approval_project, engine, out_settings, sent, provider):
    # Given a run started by a LINE message from user U1
    started = post(app_client, req.line(approval_project, [req.line_event("ev-1", "restart")]))
    assert started.status_code == 202
    run_id = uuid.UUID(started.json["runs"][0]["run_id"])
    assert runner.execute(engine, out_settings, run_id) == runner.Outcome.WAITING_APPROVAL
    setup.drain(engine, out_settings)

    # The prompt is pushed to U1 with postback buttons (and a retry key)
    (push,) = provider.to("/line/")
    assert push.path == "/line/v2/bot/message/push"
    assert push.headers["Authorization"] == f"Bearer {setup.LINE_ACCESS_TOKEN}"
    assert push.headers["X-Line-Retry-Key"]
    assert push.json["to"] == "U1"
    actions = push.json["messages"][1]["template"]["actions"]
    assert [a["label"] for a in actions] == ["Approve", "Reject"]
    token = actions[0]["data"][3:]

    # When U1 presses Approve
    postback = {
        "type": "postback",
        "webhookEventId": "ev-2",
        "timestamp": 1764400000001,
        "deliveryContext": {"isRedelivery": False},
        "replyToken": "reply-1",
        "source": {"type": "user", "userId": "U1"},
        "postback": {"data": f"ap:{token}"},
    }
    pressed = post(app_client, req.line(approval_project, [postback]))
    assert pressed.status_code == 200
    assert pressed.json["decisions"][0]["status"] == "approved"

    # Then the run completes and LINE gets the decision and the outcome
    assert runner.execute(engine, out_settings, run_id) == runner.Outcome.COMPLETED
    setup.drain(engine, out_settings)
    calls = provider.to("/line/")
    assert sorted(c.path for c in calls[1:]) == [
        "/line/v2/bot/message/push",
        "/line/v2/bot/message/push",
        "/line/v2/bot/message/reply",
    ]
    (reply,) = [c for c in calls if c.path.endswith("/reply")]
    assert reply.json == {
        "replyToken": "reply-1",
        "messages": [{"type": "text", "text": "Approved."}],
    }


def start_from_api(client, project, engine, settings, workflow_config=None):
    response = post(client, req.api(project, key=uuid.uuid4().hex))
    assert response.status_code == 202, response.json
    run_id = uuid.UUID(response.json["run_id"])
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_APPROVAL
    return run_id


@pytest.fixture
def hook_project(project, engine, out_settings, provider):
    setup.configure(
        engine, out_settings, project["project_id"], config={"notify_url": f"{provider.url}/hook"}
    )
    return project


def webhook_token(provider: FakeProvider, index: int = 0) -> str:
    return provider.to("/hook")[index].json["approval_token"]


def test_api_approval_through_the_signed_webhook_prompt(
    app_client, hook_project, engine, out_settings, provider
):
    import hashlib
    import hmac

    from standardwebhooks import Webhook

    run_id = start_from_api(app_client, hook_project, engine, out_settings)
    setup.drain(engine, out_settings)
    (hook,) = provider.to("/hook")
    assert Webhook(setup.WEBHOOK_SECRET).verify(hook.body, hook.headers) == hook.json
    expected = hmac.new(setup.WEBHOOK_SECRET.encode(), hook.body, hashlib.sha256).hexdigest()
    assert hook.headers["X-AwoooP-Signature"] == f"sha256={expected}"  # deprecated
    assert hook.json["type"] == "approval.requested"
    assert (hook.json["run_id"], hook.json["action"]) == (str(run_id), "restart-db")

    decided = setup.decide_by_api(app_client, hook_project, webhook_token(provider), comment="go")
    assert (decided.status_code, decided.json) == (
        200,
        {"status": "approved", "run_id": str(run_id)},
    )
    assert runner.execute(engine, out_settings, run_id) == runner.Outcome.COMPLETED
    (approval,) = db.rows(engine, "SELECT * FROM awooop_approval")
    assert (approval["status"], approval["decided_by"], approval["decided_via"]) == (
        "APPROVED",
        "alice",
        "api",
    )
    assert approval["comment"] == "go"
    history = [e for e in db.events(engine, run_id) if e["trigger"] == "approval"]
    assert [(h["from_status"], h["to_status"], h["actor"]) for h in history] == [
        ("WAITING_APPROVAL", "RESUMED", "alice")
    ]


def test_rejection_compensates_and_fails_with_its_own_code(
    app_client, hook_project, engine, out_settings, provider
):
    run_id = start_from_api(app_client, hook_project, engine, out_settings)
    setup.drain(engine, out_settings)

    assert (
        setup.decide_by_api(app_client, hook_project, webhook_token(provider), "reject").status_code
        == 200
    )
    assert runner.execute(engine, out_settings, run_id) == runner.Outcome.FAILED

    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "FAILED",
        "COMPENSATED",
        "E-APPROVAL-001",
    )
    assert wf.CALLS[str(run_id)] == ["do:prepare", "ask:approve", "undo:prepare"]


def test_rejection_can_let_the_workflow_continue(
    app_client, project, engine, out_settings, provider
):
    setup.configure(
        engine,
        out_settings,
        project["project_id"],
        workflow="test-approval-continue",
        config={"notify_url": f"{provider.url}/hook"},
    )
    run_id = start_from_api(app_client, project, engine, out_settings)
    setup.drain(engine, out_settings)
    setup.decide_by_api(app_client, project, webhook_token(provider), "reject")

    assert runner.execute(engine, out_settings, run_id) == runner.Outcome.COMPLETED
    outputs = {e["step"]: e.get("output") for e in db.run(engine, run_id)["saga_steps"]}
    assert outputs["approve"]["approved"] is False


def test_twenty_concurrent_redemptions_take_effect_once(
    app_client, hook_project, engine, out_settings, provider, sent
):
    run_id = start_from_api(app_client, hook_project, engine, out_settings)
    setup.drain(engine, out_settings)
    token = webhook_token(provider)
    app = app_client.application
    barrier = threading.Barrier(20)
    statuses: list[int] = []

    def redeem(i: int) -> None:
        client = app.test_client()
        barrier.wait()
        decision = "approve" if i % 2 else "reject"
        statuses.append(setup.decide_by_api(client, hook_project, token, decision).status_code)

    threads = [threading.Thread(target=redeem, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(statuses) == [200] + [409] * 19
    assert db.count(engine, "awooop_approval", "status IN ('APPROVED', 'REJECTED')") == 1
    decisions = [e for e in db.run(engine, run_id)["saga_steps"] if e["phase"] == "approval"]
    assert len(decisions) == 1
    assert db.run(engine, run_id)["status"] == "RESUMED"
    assert sent.runs.count(run_id) == 2


def test_a_token_is_bound_to_its_project_run_and_step(
    app_client, hook_project, engine, out_settings, provider, settings
):
    run_a = start_from_api(app_client, hook_project, engine, out_settings)
    run_b = start_from_api(app_client, hook_project, engine, out_settings)
    setup.drain(engine, out_settings)
    token_a = next(
        c.json["approval_token"] for c in provider.to("/hook") if c.json["run_id"] == str(run_a)
    )
    other = __import__("awooop.cli", fromlist=["create_project"]).create_project(
        settings, f"q{uuid.uuid4().hex[:8]}"
    )

    for response in (
        setup.decide_by_api(app_client, hook_project, token_a, run_id=str(run_b)),  # another run
        setup.decide_by_api(app_client, hook_project, token_a, step="act"),  # another step
        setup.decide_by_api(app_client, other, token_a),  # another project
        setup.decide_by_api(app_client, hook_project, "x" * 43),  # no such token
        setup.decide_by_api(app_client, hook_project, "short"),
    ):
        assert (response.status_code, response.json["error"]["code"]) == (404, "E-NOT-FOUND-001")
    assert {db.run(engine, r)["status"] for r in (run_a, run_b)} == {"WAITING_APPROVAL"}
    # The right binding works.
    ok = setup.decide_by_api(app_client, hook_project, token_a, run_id=str(run_a), step="approve")
    assert ok.status_code == 200


def test_deciding_twice_after_expiry_or_without_the_role(
    app_client, project, engine, out_settings, provider, settings
):
    setup.configure(
        engine,
        out_settings,
        project["project_id"],
        workflow="test-approval-short",
        config={"notify_url": f"{provider.url}/hook"},
    )
    # An ingest token may admit events but not decide.
    ingest_token = "ingest-" + uuid.uuid4().hex
    from awooop import secrets
    from awooop.store import projects

    with engine.begin() as conn:
        projects.add_api_token(
            conn, project["project_id"], "ingest", secrets.sha256_hex(ingest_token)
        )
    run_id = start_from_api(app_client, project, engine, out_settings)
    setup.drain(engine, out_settings)
    token = webhook_token(provider)

    forbidden = setup.decide_by_api(app_client, {**project, "api_token": ingest_token}, token)
    assert (forbidden.status_code, forbidden.json["error"]["code"]) == (403, "E-APPROVAL-004")
    anonymous = setup.decide_by_api(app_client, {**project, "api_token": "nope"}, token)
    assert anonymous.status_code == 401

    # The TTL (1 s) passes; the timer sweep expires the approval
    with engine.connect() as conn:
        conn.execute(text("UPDATE awooop_timer SET due_at = now() WHERE kind = 'approval_expiry'"))
    import time

    time.sleep(1.1)
    fired = sweeps.fire_due_timers_once(engine, out_settings)
    assert [t.kind for t in fired] == ["approval_expiry"]
    late = setup.decide_by_api(app_client, project, token)
    assert (late.status_code, late.json["error"]["code"]) == (410, "E-APPROVAL-002")

    assert runner.execute(engine, out_settings, run_id) == runner.Outcome.FAILED
    row = db.run(engine, run_id)
    assert (row["status"], row["failure_code"]) == ("FAILED", "E-APPROVAL-002")
    assert wf.CALLS[str(run_id)] == ["do:prepare", "ask:approve", "undo:prepare"]
    still = setup.decide_by_api(app_client, project, token)
    assert still.status_code == 410
    assert db.count(engine, "awooop_approval", "status = 'EXPIRED'") == 1


def test_a_decided_approval_is_refused_with_409(
    app_client, hook_project, engine, out_settings, provider
):
    start_from_api(app_client, hook_project, engine, out_settings)
    setup.drain(engine, out_settings)
    token = webhook_token(provider)
    assert setup.decide_by_api(app_client, hook_project, token).status_code == 200
    again = setup.decide_by_api(app_client, hook_project, token, "reject")
    assert (again.status_code, again.json["error"]["code"]) == (409, "E-APPROVAL-003")


def test_waiting_approval_survives_the_reaper(
    app_client, hook_project, engine, out_settings, provider
):
    run_id = start_from_api(app_client, hook_project, engine, out_settings)
    before = db.run(engine, run_id)
    with engine.connect() as conn:  # even with an old heartbeat and attempts used up
        conn.execute(text("UPDATE awooop_run_state SET heartbeat_at = now() - interval '1 hour'"))
    assert sweeps.reap_once(engine) == []
    after = db.run(engine, run_id)
    assert (after["status"], after["version"]) == ("WAITING_APPROVAL", before["version"])


def test_bad_decision_requests_get_400_and_change_nothing(
    app_client, hook_project, engine, out_settings, provider
):
    run_id = start_from_api(app_client, hook_project, engine, out_settings)
    setup.drain(engine, out_settings)
    token = webhook_token(provider)
    path = f"/v1/projects/{hook_project['project_id']}/approvals/{token}"
    auth = {"Authorization": f"Bearer {hook_project['api_token']}"}
    for body, content_type, status in (
        (b'{"decision": "maybe"}', "application/json", 400),
        (b"[]", "application/json", 400),
        (b"{not json", "application/json", 400),
        (b'{"decision": "approve", "comment": 5}', "application/json", 400),
        (b'{"decision": "approve", "run_id": "nope"}', "application/json", 400),
        (b"decision=approve", "application/x-www-form-urlencoded", 415),
    ):
        response = app_client.post(path, headers={**auth, "Content-Type": content_type}, data=body)
        assert response.status_code == status, body
        assert set(response.json) == {"error"}
    assert db.run(engine, run_id)["status"] == "WAITING_APPROVAL"


def test_outbox_retries_a_failing_provider_then_sends_once(
    app_client, approval_project, engine, out_settings, sent, provider
):
    provider.script("/telegram/", 500, 502, 503)
    start_from_telegram(app_client, approval_project, engine, out_settings, sent)

    results = setup.drain(engine, out_settings)

    assert [r.value for r in results] == ["retry", "retry", "retry", "sent"]
    assert [c.path.endswith("sendMessage") for c in provider.to("/telegram/")] == [True] * 4
    (message,) = db.rows(engine, "SELECT * FROM awooop_outbox")
    assert (message["status"], message["attempts"], message["sealed"]) == ("SENT", 4, None)


def test_a_provider_down_for_good_parks_the_message_and_the_run_goes_on(
    app_client, approval_project, engine, out_settings, sent, provider
):
    provider.always("/telegram/", 500)
    run_id = start_from_telegram(app_client, approval_project, engine, out_settings, sent)

    results = setup.drain(engine, out_settings)

    assert [r.value for r in results] == ["retry", "retry", "retry", "parked"]
    (message,) = db.rows(engine, "SELECT * FROM awooop_outbox")
    assert message["status"] == "PARKED"
    assert message["last_error"].startswith("HTTP 500")
    assert setup.BOT_TOKEN not in message["last_error"]
    assert setup.drain(engine, out_settings) == []  # parked: not retried
    # The run is not blocked by it: it still waits, and an API decision moves it on.
    assert db.run(engine, run_id)["status"] == "WAITING_APPROVAL"


def test_a_missing_credential_parks_at_once_without_leaking(
    app_client, project, engine, out_settings, sent, provider
):
    from awooop import db as awooop_db
    from awooop.store import projects

    with awooop_db.transaction(engine) as conn:
        projects.set_routes(conn, project["project_id"], {"telegram": "test-approval"})
        projects.set_config(conn, project["project_id"], {"approvers": {"telegram": ["777"]}})
    start_from_telegram(app_client, project, engine, out_settings, sent)

    assert [r.value for r in setup.drain(engine, out_settings)] == ["parked"]
    (message,) = db.rows(engine, "SELECT * FROM awooop_outbox")
    assert message["last_error"] == "no Telegram bot token is configured for this project"
    assert provider.calls == []


def test_unreachable_provider_error_is_redacted(
    app_client, approval_project, engine, out_settings, sent
):
    import dataclasses

    dead = dataclasses.replace(
        out_settings, telegram_api_base="http://127.0.0.1:9/telegram", outbox_max_attempts=1
    )
    start_from_telegram(app_client, approval_project, engine, dead, sent)
    assert [r.value for r in setup.drain(engine, dead)] == ["parked"]
    (message,) = db.rows(engine, "SELECT * FROM awooop_outbox")
    assert "ConnectionError" in message["last_error"]
    assert setup.BOT_TOKEN not in message["last_error"]
    assert "[redacted]" in message["last_error"]
