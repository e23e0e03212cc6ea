"""docs/webhooks.md's receiver verifies what AwoooP sends: it handles a signed delivery once,
answers a repeat of it without handling it again, and refuses a tampered one; its variant
for a secret from before Standard Webhooks verifies a delivery signed with such a secret."""

from __future__ import annotations

import time
from typing import Any

import pytest

from awooop.config import Settings
from awooop.outbound import adapters, signing
from tests.support.docs import ROOT, python_blocks

RECEIVER, OLD_SECRET_VARIANT = python_blocks(ROOT / "docs" / "webhooks.md")
PAYLOAD = {
    "url": "https://hooks.example/awooop",
    "body": {"type": "run.finished", "run_id": "r-1", "status": "COMPLETED", "code": None},
}


def delivery(secret: str, message_id: str = "6b0e3c2a-5f0e-4a43-9a7e-0c4f3b1d2e5a") -> Any:
    """What AwoooP sends now for one message: the body and headers of the attempt."""
    call = adapters.build(
        "webhook", message_id, PAYLOAD, None, [secret], Settings(), timestamp=int(time.time())
    )
    return call.encoded(), call.headers


def receiver(monkeypatch: pytest.MonkeyPatch, secret: str) -> dict[str, Any]:
    """The page's receiver (its Flask app and what it defines), given ``secret``."""
    monkeypatch.setenv("AWOOOP_WEBHOOK_SECRET", secret)
    namespace: dict[str, Any] = {"__name__": "receiver"}
    exec(RECEIVER.compiled(), namespace)  # noqa: S102 - our own docs
    handled: list[dict[str, Any]] = []
    namespace["handle"] = handled.append  # the reader's own code
    namespace["handled"] = handled
    return namespace


def test_the_receiver_handles_a_delivery_once_and_refuses_a_tampered_one(monkeypatch):
    secret = signing.new_secret()
    page = receiver(monkeypatch, secret)
    web = page["app"].test_client()
    body, headers = delivery(secret)

    first = web.post("/awooop", data=body, headers=headers)
    repeat = web.post("/awooop", data=body, headers=headers)
    tampered = web.post("/awooop", data=body.replace(b"COMPLETED", b"FAILED"), headers=headers)

    assert (first.status_code, repeat.status_code, tampered.status_code) == (204, 204, 400)
    assert page["handled"] == [PAYLOAD["body"]]


def test_the_variant_for_an_old_secret_verifies_what_such_a_secret_signs(monkeypatch):
    old_secret = "a free-form secret stored before Standard Webhooks"
    page = receiver(monkeypatch, signing.new_secret())
    monkeypatch.setenv("AWOOOP_WEBHOOK_SECRET", old_secret)
    exec(OLD_SECRET_VARIANT.compiled(), page)  # noqa: S102 - our own docs
    body, headers = delivery(old_secret)

    answer = page["app"].test_client().post("/awooop", data=body, headers=headers)

    assert answer.status_code == 204
    assert page["handled"] == [PAYLOAD["body"]]
