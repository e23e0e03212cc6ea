"""Outbound webhooks verified by the Standard Webhooks scheme's own Python library
(``standardwebhooks`` from PyPI), as a receiver would: a valid delivery is accepted; a
tampered body, a stale or future timestamp, or a replay with a fresh timestamp is refused."""

from __future__ import annotations

import base64
import time

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from awooop.config import Settings
from awooop.outbound import adapters, signing

SECRET = signing.new_secret()
PAYLOAD = {
    "url": "https://hooks.example/awooop",
    "body": {"type": "run.finished", "run_id": "r-1", "status": "COMPLETED", "note": "ü ✓"},
}
MESSAGE_ID = "0b7c8e0e-3f55-4e0a-9d4f-6f1c2a4b8d10"


def deliver(timestamp: int, secrets: list[str] | None = None) -> tuple[bytes, dict[str, str]]:
    """What AwoooP puts on the wire for one attempt: the body bytes and the headers."""
    call = adapters.build(
        "webhook", MESSAGE_ID, PAYLOAD, None, secrets or [SECRET], Settings(), timestamp=timestamp
    )
    return call.encoded(), call.headers


def test_the_library_accepts_a_fresh_delivery_and_returns_its_body():
    body, headers = deliver(int(time.time()))

    assert Webhook(SECRET).verify(body, headers) == PAYLOAD["body"]


def test_the_library_refuses_a_tampered_body():
    body, headers = deliver(int(time.time()))
    tampered = body.replace(b"COMPLETED", b"FAILED")

    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(SECRET).verify(tampered, headers)


def test_the_library_refuses_a_delivery_signed_with_another_secret():
    body, headers = deliver(int(time.time()))

    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(signing.new_secret()).verify(body, headers)


@pytest.mark.parametrize(("offset", "refusal"), [(-360, "too old"), (360, "too new")])
def test_the_library_refuses_a_timestamp_outside_its_five_minute_window(offset, refusal):
    body, headers = deliver(int(time.time()) + offset)

    with pytest.raises(WebhookVerificationError, match=refusal):
        Webhook(SECRET).verify(body, headers)


def test_a_captured_delivery_replayed_with_a_fresh_timestamp_is_refused():
    # The timestamp is signed: an attacker who captured an old delivery cannot refresh it.
    body, headers = deliver(int(time.time()) - 3600)
    replayed = {**headers, "webhook-timestamp": str(int(time.time()))}

    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(SECRET).verify(body, replayed)


def test_while_secrets_rotate_the_delivery_verifies_with_the_old_and_the_new_one():
    new, old = signing.new_secret(), signing.new_secret()
    body, headers = deliver(int(time.time()), [new, old])

    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (new, old):
        assert Webhook(secret).verify(body, headers) == PAYLOAD["body"]
    # The legacy header stays keyed by the newest secret alone.
    assert (
        headers["X-AwoooP-Signature"] == deliver(int(time.time()), [new])[1]["X-AwoooP-Signature"]
    )


def test_a_secret_stored_before_whsec_verifies_with_its_utf8_bytes():
    legacy = "an-old-free-form-secret"
    body, headers = deliver(int(time.time()), [legacy])

    assert Webhook(legacy.encode()).verify(body, headers) == PAYLOAD["body"]


def test_retries_of_one_message_keep_the_webhook_id_and_change_the_timestamp():
    now = int(time.time())
    first, second = deliver(now - 30)[1], deliver(now)[1]

    assert first["webhook-id"] == second["webhook-id"] == MESSAGE_ID
    assert first["webhook-timestamp"] != second["webhook-timestamp"]


def test_new_secrets_are_whsec_base64_of_32_random_bytes():
    secret = signing.new_secret()

    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert signing.new_secret() != secret


@pytest.mark.parametrize(
    "secret",
    [
        "whsec_",
        "whsec_not base64",
        "whsec_" + base64.b64encode(b"x" * 23).decode(),
        "whsec_" + base64.b64encode(b"x" * 65).decode(),
    ],
)
def test_malformed_whsec_secrets_are_refused(secret):
    with pytest.raises(signing.BadSecret):
        signing.key_of(secret)
