"""Channel key rules and authentication, without I/O."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from awooop import errors
from awooop import secrets as crypto
from awooop.channels import alertmanager, api, gitea, line, telegram
from awooop.channels.base import ChannelSecrets, RawRequest
from tests.support import requests as samples


def raw(payload, headers=None, query=None) -> RawRequest:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return RawRequest(headers=headers or {}, body=body, query=query or {})


def test_telegram_event_id_is_bot_id_and_update_id():
    [event] = telegram.parse(raw({"update_id": 99}, query={"bot_id": ["123"]}))
    assert event.provider_event_id == "123:99"


def test_telegram_without_bot_id_uses_zero():
    [event] = telegram.parse(raw({"update_id": 99}))
    assert event.provider_event_id == "0:99"


@pytest.mark.parametrize("bot_id", ["\u0661", "1\u0662", "\uff11", "\u00b9", "", "-1", "1" * 21])
def test_telegram_bot_id_must_be_ascii_digits(bot_id):
    # "\u0661" (ARABIC-INDIC DIGIT ONE) passes str.isdigit() and int() reads it as 1, but the
    # event key would keep it as itself: one bot, two dedupe keys for the same update.
    with pytest.raises(errors.MalformedRequest):
        telegram.parse(raw({"update_id": 99}, query={"bot_id": [bot_id]}))


@pytest.mark.parametrize("update_id", [None, "1", 1.5, True])
def test_telegram_update_id_must_be_an_integer(update_id):
    with pytest.raises(errors.MalformedRequest):
        telegram.parse(raw({"update_id": update_id}))


def test_telegram_secret_token_checked_against_hashes():
    secrets = ChannelSecrets(hashes=(crypto.sha256_hex("old"), crypto.sha256_hex("new")))
    header = telegram.SECRET_HEADER
    assert telegram.authenticate(raw(b"", {header: "new"}), secrets)
    assert telegram.authenticate(raw(b"", {header: "old"}), secrets)  # rotation
    assert not telegram.authenticate(raw(b"", {header: "other"}), secrets)
    assert not telegram.authenticate(raw(b"", {}), secrets)


def _am_key(payload) -> str:
    return alertmanager.parse(raw(payload))[0].provider_event_id


def test_alertmanager_key_ignores_fields_outside_the_identity():
    payload = samples.alertmanager_payload()
    changed = {**payload, "commonAnnotations": {"summary": "new text"}, "externalURL": "x"}
    assert _am_key(payload) == _am_key(changed)


def test_alertmanager_key_changes_with_status_and_alert_timing():
    firing = samples.alertmanager_payload("firing")
    assert _am_key(firing) != _am_key(samples.alertmanager_payload("resolved"))
    restarted = samples.alertmanager_payload(
        alerts=[{**samples.alert(), "startsAt": "2026-11-29T12:00:00Z"}]
    )
    assert _am_key(firing) != _am_key(restarted)


def test_alertmanager_accepts_bearer_and_basic_auth():
    secrets = ChannelSecrets(hashes=(crypto.sha256_hex("s3cret"),))
    basic = base64.b64encode(b"alertmanager:s3cret").decode()
    assert alertmanager.authenticate(raw(b"", {"Authorization": "Bearer s3cret"}), secrets)
    assert alertmanager.authenticate(raw(b"", {"Authorization": f"Basic {basic}"}), secrets)
    assert not alertmanager.authenticate(raw(b"", {"Authorization": "Basic !!"}), secrets)
    assert not alertmanager.authenticate(raw(b"", {"Authorization": "Token s3cret"}), secrets)


def test_gitea_signature_is_hex_hmac_of_the_raw_body():
    body = b'{"action": "opened"}'
    secrets = ChannelSecrets(hmac_keys=lambda: ["k1", "k2"])
    good = hmac.new(b"k2", body, hashlib.sha256).hexdigest()
    assert gitea.authenticate(raw(body, {"X-Gitea-Signature": good}), secrets)
    assert not gitea.authenticate(raw(body + b" ", {"X-Gitea-Signature": good}), secrets)


def test_gitea_event_id_is_the_delivery_header():
    [event] = gitea.parse(raw({"a": 1}, {"X-Gitea-Delivery": "uuid-1", "X-Gitea-Event": "push"}))
    assert (event.provider_event_id, event.meta) == ("uuid-1", {"event_type": "push"})


def test_line_signature_is_base64_hmac_of_the_raw_body():
    body = b'{"events": []}'
    signature = base64.b64encode(hmac.new(b"chan", body, hashlib.sha256).digest()).decode()
    secrets = ChannelSecrets(hmac_keys=lambda: ["chan"])
    assert line.authenticate(raw(body, {"X-Line-Signature": signature}), secrets)
    assert not line.authenticate(raw(body, {"X-Line-Signature": "AAAA"}), secrets)


def test_line_fans_out_one_event_per_webhook_event_id():
    events = line.parse(raw({"events": [samples.line_event("a"), samples.line_event("b")]}))
    assert [e.provider_event_id for e in events] == ["a", "b"]
    assert events[0].request_digest != events[1].request_digest


def test_api_requires_an_idempotency_key():
    with pytest.raises(errors.MissingIdempotencyKey):
        api.parse(raw({"a": 1}))
    [event] = api.parse(raw({"a": 1}, {"Idempotency-Key": "k-1"}))
    assert event.provider_event_id == "k-1"


def test_request_digest_ignores_key_order_and_whitespace():
    a = api.parse(raw(b'{"a": 1, "b": 2}', {"Idempotency-Key": "k"}))[0]
    b = api.parse(raw(b'{"b":2,"a":1}', {"Idempotency-Key": "k"}))[0]
    assert a.request_digest == b.request_digest
