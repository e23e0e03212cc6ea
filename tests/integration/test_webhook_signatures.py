"""Outbound webhooks as a receiver sees them on the wire, verified with the Standard Webhooks
scheme's own library (``standardwebhooks`` from PyPI): every attempt of one outbox message
carries the same ``webhook-id`` (the message id) and a signature that verifies."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from awooop.engine import notify
from awooop.outbound.messages import Message
from awooop.store import outbox
from tests.support import approvals as setup
from tests.support import waiting
from tests.support.fake_provider import FakeProvider


def db_epoch(engine) -> int:
    with engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT floor(extract(epoch FROM now()))").scalar_one())


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider()
    yield fake
    fake.close()


def test_a_retried_webhook_keeps_its_id_and_every_attempt_verifies(
    engine, settings, project, provider
):
    # Given a project with a whsec_ signing secret and a webhook message whose first
    # delivery the receiver answers 503
    out_settings = setup.provider_settings(settings, provider.url)
    setup.configure(engine, out_settings, project["project_id"], workflow=None)
    body = {"type": "run.finished", "run_id": "r-1", "status": "COMPLETED", "code": None}
    message = Message("webhook", "run_outcome", {"url": f"{provider.url}/hook", "body": body})
    with engine.connect() as conn:
        (message_id,) = outbox.add(conn, project["project_id"], None, [message])
    provider.script("/hook", 503)

    # When it is sent, retried after its back-off, and sent again
    assert notify.send(engine, out_settings, message_id) == notify.Sent.RETRY
    (first,) = provider.to("/hook")
    # (the retry is due within 0.2 s; let the database clock reach the next second first,
    # so the two attempts' timestamps differ)
    waiting.until(lambda: db_epoch(engine) > int(first.headers["webhook-timestamp"]), 5)
    assert setup.drain(engine, out_settings) == [notify.Sent.SENT]

    # Then both attempts carry the message id as webhook-id, their own timestamps, and
    # signatures the library accepts
    first, second = provider.to("/hook")
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == str(message_id)
    assert int(first.headers["webhook-timestamp"]) < int(second.headers["webhook-timestamp"])
    assert abs(int(second.headers["webhook-timestamp"]) - time.time()) < 60
    receiver = Webhook(setup.WEBHOOK_SECRET)
    for attempt in (first, second):
        assert receiver.verify(attempt.body, attempt.headers) == body
    # ...the deprecated header still comes along, keyed as before
    assert second.headers["X-AwoooP-Delivery"] == str(message_id)
    assert second.headers["X-AwoooP-Signature"].startswith("sha256=")
    # ...and a tampered copy of the delivery is refused
    with pytest.raises(WebhookVerificationError):
        receiver.verify(second.body.replace(b"COMPLETED", b"FAILED"), second.headers)
