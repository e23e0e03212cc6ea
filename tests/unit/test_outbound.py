"""Pure parts of the outbound side: reply targets, button data, provider calls, and the
access-log redaction of approval tokens."""

from __future__ import annotations

import pytest

from awooop.config import Settings
from awooop.outbound import adapters, messages
from awooop.web.access_log import redact_path

TOKEN = "A" * 43


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
    call = adapters.build("gitea", "m1", prompt.payload, None, ["gitea-token"], Settings())
    assert call.url == "https://g/api/v1/repos/o/r/issues/1/comments"
    assert call.headers == {"Authorization": "token gitea-token"}


def test_adapters_refuse_to_send_without_a_credential():
    for channel in ("telegram", "line", "gitea", "webhook"):
        with pytest.raises(adapters.CannotSend):
            adapters.build(channel, "m1", {"text": "x"}, None, [], Settings())


def test_the_bot_token_is_chosen_by_bot_id():
    payload = {"method": "send", "bot_id": "222", "chat_id": 1, "text": "hi"}
    call = adapters.build("telegram", "m", payload, None, ["111:a", "222:b"], Settings())
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

    call = adapters.build("webhook", "m1", prompt.payload, TOKEN, ["s3cret"], Settings())

    assert call.body["approval_token"] == TOKEN
    assert call.body["decide_url"] == f"https://awooop.example/v1/projects/ops/approvals/{TOKEN}"
    expected = hmac.new(b"s3cret", call.encoded(), hashlib.sha256).hexdigest()
    assert call.headers == {"X-AwoooP-Signature": f"sha256={expected}", "X-AwoooP-Delivery": "m1"}
    assert call.secrets == ("s3cret", TOKEN)
