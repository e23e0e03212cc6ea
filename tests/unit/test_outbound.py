"""Pure parts of the outbound side: reply targets, button data, provider calls, and the
access-log redaction of approval tokens."""

from __future__ import annotations

import pytest

from awooop.config import Settings
from awooop.outbound import adapters, messages
from awooop.web.access_log import redact_path

TOKEN = "A" * 43
NOW = 1_764_000_000


def test_reply_targets_follow_the_event_and_the_project_config():
    telegram = {
        "channel": "telegram",
        "provider_event_id": "123456:77",
        "event": {"message": {"chat": {"id": -100}}},
        "project": {"notify_url": "https://hooks.example/x", "notify_telegram_chat": -100},
    }
    assert messages.reply_targets(telegram) == [
        {"channel": "telegram", "bot_id": "123456", "chat_id": -100},
        {"channel": "webhook", "url": "https://hooks.example/x"},
    ]
    gitea = {
        "channel": "gitea",
        "event": {
            "repository": {"full_name": "ops/app", "html_url": "https://git.example/ops/app"},
            "issue": {"number": 12},
        },
    }
    assert messages.reply_targets(gitea) == [
        {"channel": "gitea", "base_url": "https://git.example", "repo": "ops/app", "index": 12}
    ]
    assert messages.reply_targets({"channel": "api", "event": {}}) == []


@pytest.mark.parametrize(
    ("data", "parsed"),
    [
        (f"ap:{TOKEN}", ("approve", TOKEN)),
        (f"rj:{TOKEN}", ("reject", TOKEN)),
        ("ap:short", None),
        (f"xx:{TOKEN}", None),
        ("/status", None),
    ],
)
def test_button_data(data, parsed):
    assert messages.parse_button(data) == parsed


def test_button_data_fits_telegram_callback_data():
    assert len((messages.APPROVE_PREFIX + TOKEN).encode()) <= 64


def test_gitea_prompt_never_carries_the_token():
    (prompt,) = messages.approval_prompt(
        [{"channel": "gitea", "base_url": "https://g", "repo": "o/r", "index": 1}],
        run_id="r",
        step="s",
        action="restart",
        prompt="Restart?",
        ttl_seconds=900,
        sealed_token="sealed",
        decide_url=None,
    )
    assert prompt.sealed is None
    call = adapters.build(
        "gitea", "m1", prompt.payload, None, ["gitea-token"], Settings(), timestamp=NOW
    )
    assert call.url == "https://g/api/v1/repos/o/r/issues/1/comments"
    assert call.headers == {"Authorization": "token gitea-token"}


def test_adapters_refuse_to_send_without_a_credential():
    for channel in ("telegram", "line", "gitea", "webhook"):
        with pytest.raises(adapters.CannotSend):
            adapters.build(channel, "m1", {"text": "x"}, None, [], Settings(), timestamp=NOW)


def test_the_bot_token_is_chosen_by_bot_id():
    payload = {"method": "send", "bot_id": "222", "chat_id": 1, "text": "hi"}
    call = adapters.build(
        "telegram", "m", payload, None, ["111:a", "222:b"], Settings(), timestamp=NOW
    )
    assert call.url == "https://api.telegram.org/bot222:b/sendMessage"
    assert call.secrets == ("222:b",)


@pytest.mark.parametrize(
    ("path", "logged"),
    [
        (f"/v1/projects/p/approvals/{TOKEN}", "/v1/projects/p/approvals/[redacted]"),
        ("/v1/projects/p/runs/1", "/v1/projects/p/runs/1"),
    ],
)
def test_access_log_paths_lose_approval_tokens(path, logged):
    assert redact_path(path) == logged


def test_the_webhook_prompt_carries_the_token_and_its_decide_url_signed():
    import base64
    import hashlib
    import hmac
    import json

    (prompt,) = messages.approval_prompt(
        [{"channel": "webhook", "url": "https://hooks.example/x"}],
        run_id="r",
        step="approve",
        action="restart",
        prompt="Restart?",
        ttl_seconds=900,
        sealed_token="sealed",
        decide_url="https://awooop.example/v1/projects/ops/approvals",
    )
    assert prompt.sealed == "sealed" and TOKEN not in json.dumps(prompt.payload)
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()

    call = adapters.build(
        "webhook", "m1", prompt.payload, TOKEN, [secret], Settings(), timestamp=NOW
    )

    assert call.body["approval_token"] == TOKEN
    assert call.body["decide_url"] == f"https://awooop.example/v1/projects/ops/approvals/{TOKEN}"
    signed = b"m1.%d.%s" % (NOW, call.encoded())
    v1 = base64.b64encode(hmac.new(b"k" * 32, signed, hashlib.sha256).digest()).decode()
    legacy = hmac.new(secret.encode(), call.encoded(), hashlib.sha256).hexdigest()
    assert call.headers == {
        "webhook-id": "m1",
        "webhook-timestamp": str(NOW),
        "webhook-signature": f"v1,{v1}",
        "X-AwoooP-Signature": f"sha256={legacy}",
        "X-AwoooP-Delivery": "m1",
    }
    assert call.secrets == (secret, TOKEN)


def test_a_webhook_with_an_unusable_whsec_secret_cannot_be_sent():
    payload = {"url": "https://hooks.example/x", "body": {"type": "run.finished"}}
    for secret in ("whsec_not base64!", "whsec_" + "QUFB" * 4):  # bad base64; 12 bytes
        with pytest.raises(adapters.CannotSend, match="signing secret is unusable"):
            adapters.build("webhook", "m1", payload, None, [secret], Settings(), timestamp=NOW)
