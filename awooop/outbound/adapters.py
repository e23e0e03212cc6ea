"""Provider calls for outbox messages: Telegram Bot API, LINE Messaging API, Gitea, and a
generic webhook signed with the Standard Webhooks scheme (:mod:`awooop.outbound.signing`).
Each adapter turns a message into a :class:`ProviderCall`; sending and retrying is
:mod:`awooop.engine.notify`'s. Base URLs come from the settings (Telegram,
LINE) or the project (Gitea, webhook), so tests point them at a local fake provider.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from awooop.config import Settings
from awooop.outbound import signing
from awooop.outbound.messages import APPROVE_PREFIX, REJECT_PREFIX

# LINE's buttons template allows 160 characters of text.
_LINE_BUTTONS_TEXT = 160


class CannotSend(Exception):
    """The message can never be sent as it is (no credential, bad target): park it."""


@dataclass(frozen=True)
class ProviderCall:
    url: str
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    # Strings that must never appear in a log line or a stored error (tokens in the URL).
    secrets: tuple[str, ...] = ()

    def encoded(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode()


def _telegram(
    message_id: str,
    payload: dict[str, Any],
    token: str | None,
    keys: list[str],
    s: Settings,
    timestamp: int,
) -> ProviderCall:
    bot_id = str(payload.get("bot_id", "0"))
    # A project may run several bots: the token whose numeric prefix is the bot id, else the
    # only one.
    matching = [k for k in keys if k.split(":", 1)[0] == bot_id] or keys[:1]
    if not matching:
        raise CannotSend("no Telegram bot token is configured for this project")
    bot_token = matching[0]
    base = f"{s.telegram_api_base.rstrip('/')}/bot{bot_token}"
    if payload.get("method") == "answer":
        body = {"callback_query_id": payload["callback_query_id"], "text": payload["text"]}
        return ProviderCall(f"{base}/answerCallbackQuery", body, secrets=(bot_token,))
    body = {"chat_id": payload["chat_id"], "text": payload["text"]}
    if payload.get("buttons"):
        if token is None:
            raise CannotSend("the approval token of this prompt is gone")
        body["reply_markup"] = {
            "inline_keyboard": [
                [
                    {"text": "Approve", "callback_data": APPROVE_PREFIX + token},
                    {"text": "Reject", "callback_data": REJECT_PREFIX + token},
                ]
            ]
        }
    return ProviderCall(f"{base}/sendMessage", body, secrets=(bot_token,))


def _line(
    message_id: str,
    payload: dict[str, Any],
    token: str | None,
    keys: list[str],
    s: Settings,
    timestamp: int,
) -> ProviderCall:
    if not keys:
        raise CannotSend("no LINE channel access token is configured for this project")
    messages: list[dict[str, Any]] = [{"type": "text", "text": payload["text"]}]
    if payload.get("buttons"):
        if token is None:
            raise CannotSend("the approval token of this prompt is gone")
        messages.append(
            {
                "type": "template",
                "altText": "Approval needed",
                "template": {
                    "type": "buttons",
                    "text": payload["text"].split("\n", 1)[0][:_LINE_BUTTONS_TEXT],
                    "actions": [
                        {"type": "postback", "label": "Approve", "data": APPROVE_PREFIX + token},
                        {"type": "postback", "label": "Reject", "data": REJECT_PREFIX + token},
                    ],
                },
            }
        )
    headers = {"Authorization": f"Bearer {keys[0]}"}
    base = s.line_api_base.rstrip("/")
    if payload.get("reply_token"):
        body = {"replyToken": payload["reply_token"], "messages": messages}
        return ProviderCall(f"{base}/v2/bot/message/reply", body, headers, (keys[0],))
    # The retry key makes LINE drop a push it already accepted (a retry after a timeout).
    headers["X-Line-Retry-Key"] = message_id
    body = {"to": payload["to"], "messages": messages}
    return ProviderCall(f"{base}/v2/bot/message/push", body, headers, (keys[0],))


def _gitea(
    message_id: str,
    payload: dict[str, Any],
    token: str | None,
    keys: list[str],
    s: Settings,
    timestamp: int,
) -> ProviderCall:
    if not keys:
        raise CannotSend("no Gitea API token is configured for this project")
    url = f"{payload['base_url']}/api/v1/repos/{payload['repo']}/issues/{payload['index']}/comments"
    headers = {"Authorization": f"token {keys[0]}"}
    return ProviderCall(url, {"body": payload["text"]}, headers, (keys[0],))


def _webhook(
    message_id: str,
    payload: dict[str, Any],
    token: str | None,
    keys: list[str],
    s: Settings,
    timestamp: int,
) -> ProviderCall:
    if not keys:
        raise CannotSend("no webhook signing secret is configured for this project")
    body = dict(payload["body"])
    if token is not None:
        body["approval_token"] = token
        if payload.get("decide_url"):
            body["decide_url"] = f"{payload['decide_url']}/{token}"
    call = ProviderCall(payload["url"], body, secrets=tuple(keys) + ((token,) if token else ()))
    # Standard Webhooks (webhook-id = the message id, stable across retries; the attempt's
    # timestamp; a v1 signature per active secret) and, until their removal (no earlier than
    # 0.3.0), the deprecated X-AwoooP-Signature / X-AwoooP-Delivery.
    try:
        call.headers.update(signing.headers(message_id, timestamp, call.encoded(), keys))
    except signing.BadSecret as exc:
        raise CannotSend(f"the webhook signing secret is unusable: {exc}") from None
    return call


ADAPTERS = {"telegram": _telegram, "line": _line, "gitea": _gitea, "webhook": _webhook}
# The credential each adapter needs (a channel secret of this type, stored encrypted).
CREDENTIALS = {
    "telegram": "telegram:bot",
    "line": "line:access",
    "gitea": "gitea:token",
    "webhook": "webhook:signing",
}


def build(
    channel: str,
    message_id: str,
    payload: dict[str, Any],
    token: str | None,
    keys: list[str],
    settings: Settings,
    *,
    timestamp: int,
) -> ProviderCall:
    """The provider call of one send attempt; ``timestamp`` is the attempt's time (whole
    seconds since the epoch, by the database clock), which signed webhooks carry."""
    adapter = ADAPTERS.get(channel)
    if adapter is None:
        raise CannotSend(f"no outbound adapter for {channel!r}")
    try:
        return adapter(message_id, payload, token, keys, settings, timestamp)
    except KeyError as exc:
        raise CannotSend(f"the {channel} message lacks {exc}") from None
