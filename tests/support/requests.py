"""Building valid (signed, authenticated) channel requests for a test project."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any


def body(payload: Any) -> bytes:
    return json.dumps(payload).encode()


def telegram(
    project: dict, update_id: int = 1001, text: str = "/status"
) -> tuple[str, dict, bytes]:
    payload = {
        "update_id": update_id,
        "message": {"message_id": 7, "text": text, "from": {"username": "ops"}, "chat": {"id": 42}},
    }
    headers = {
        "X-Telegram-Bot-Api-Secret-Token": project["secrets"]["telegram"],
        "Content-Type": "application/json",
    }
    return f"/v1/projects/{project['project_id']}/webhooks/telegram", headers, body(payload)


def alert(
    fingerprint: str = "f1", status: str = "firing", ends_at: str = "0001-01-01T00:00:00Z"
) -> dict[str, Any]:
    return {
        "status": status,
        "fingerprint": fingerprint,
        "labels": {"alertname": "DiskFull", "instance": "db-1"},
        "startsAt": "2026-11-29T10:00:00Z",
        "endsAt": ends_at,
    }


def alertmanager_payload(status: str = "firing", alerts: list | None = None) -> dict[str, Any]:
    if alerts is None:
        ends_at = "2026-11-29T11:00:00Z" if status == "resolved" else "0001-01-01T00:00:00Z"
        alerts = [alert(status=status, ends_at=ends_at)]
    return {
        "version": "4",
        "receiver": "awooop",
        "groupKey": '{}:{alertname="DiskFull"}',
        "status": status,
        "alerts": alerts,
        "groupLabels": {"alertname": "DiskFull"},
        "truncatedAlerts": 0,
    }


def alertmanager(project: dict, payload: dict | None = None) -> tuple[str, dict, bytes]:
    headers = {
        "Authorization": f"Bearer {project['secrets']['alertmanager']}",
        "Content-Type": "application/json",
    }
    return (
        f"/v1/projects/{project['project_id']}/webhooks/alertmanager",
        headers,
        body(payload or alertmanager_payload()),
    )


def gitea(
    project: dict, delivery: str = "d-1", payload: dict | None = None
) -> tuple[str, dict, bytes]:
    raw = body(payload or {"action": "opened", "repository": {"full_name": "ops/infra"}})
    signature = hmac.new(project["secrets"]["gitea"].encode(), raw, hashlib.sha256).hexdigest()
    headers = {
        "X-Gitea-Delivery": delivery,
        "X-Gitea-Event": "issues",
        "X-Gitea-Signature": signature,
        "Content-Type": "application/json",
    }
    return f"/v1/projects/{project['project_id']}/webhooks/gitea", headers, raw


def line_event(event_id: str, text: str = "hello") -> dict[str, Any]:
    return {
        "type": "message",
        "webhookEventId": event_id,
        "timestamp": 1764400000000,
        "deliveryContext": {"isRedelivery": False},
        "source": {"type": "user", "userId": "U1"},
        "message": {"type": "text", "id": "m-" + event_id, "text": text},
    }


def line(project: dict, events: list[dict]) -> tuple[str, dict, bytes]:
    raw = body({"destination": "Uawooop", "events": events})
    digest = hmac.new(project["secrets"]["line"].encode(), raw, hashlib.sha256).digest()
    headers = {
        "X-Line-Signature": base64.b64encode(digest).decode(),
        "Content-Type": "application/json",
    }
    return f"/v1/projects/{project['project_id']}/webhooks/line", headers, raw


def api(project: dict, key: str = "key-1", payload: dict | None = None) -> tuple[str, dict, bytes]:
    headers = {
        "Authorization": f"Bearer {project['api_token']}",
        "Idempotency-Key": key,
        "Content-Type": "application/json",
    }
    return (
        f"/v1/projects/{project['project_id']}/runs",
        headers,
        body(payload if payload is not None else {"summary": "disk almost full"}),
    )


def resign(project: dict, path: str, headers: dict, raw: bytes) -> dict:
    """Headers with the signature recomputed for ``raw`` (signed channels only)."""
    headers = dict(headers)
    if path.endswith("/gitea"):
        headers["X-Gitea-Signature"] = hmac.new(
            project["secrets"]["gitea"].encode(), raw, hashlib.sha256
        ).hexdigest()
    if path.endswith("/line"):
        headers["X-Line-Signature"] = base64.b64encode(
            hmac.new(project["secrets"]["line"].encode(), raw, hashlib.sha256).digest()
        ).decode()
    return headers


CREDENTIAL_HEADERS = {
    "telegram": "X-Telegram-Bot-Api-Secret-Token",
    "alertmanager": "Authorization",
    "gitea": "X-Gitea-Signature",
    "line": "X-Line-Signature",
    "api": "Authorization",
}


def valid(channel: str, project: dict) -> tuple[str, dict, bytes]:
    """One valid request per channel."""
    return {
        "telegram": lambda: telegram(project),
        "alertmanager": lambda: alertmanager(project),
        "gitea": lambda: gitea(project),
        "line": lambda: line(project, [line_event("e1")]),
        "api": lambda: api(project),
    }[channel]()
