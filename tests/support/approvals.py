"""Setting a project up for approvals against the local fake provider, and draining its
outbox the way the notifications worker would."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import Engine

from awooop import db, secrets
from awooop.config import Settings
from awooop.engine import notify
from awooop.store import projects

BOT_TOKEN = "123456:TEST-bot-token-do-not-log"
LINE_ACCESS_TOKEN = "line-access-token-do-not-log"
GITEA_TOKEN = "gitea-token-do-not-log"
# Standard Webhooks format: whsec_ + base64 of the 32-byte key b"webhook signing key, do not log!".
WEBHOOK_SECRET = "whsec_d2ViaG9vayBzaWduaW5nIGtleSwgZG8gbm90IGxvZyE="


def provider_settings(settings: Settings, provider_url: str) -> Settings:
    return dataclasses.replace(
        settings,
        telegram_api_base=f"{provider_url}/telegram",
        line_api_base=f"{provider_url}/line",
        outbox_base_delay_seconds=0.05,
        outbox_max_delay_seconds=0.2,
        outbox_max_attempts=4,
        outbox_send_timeout_seconds=2.0,
    )


def configure(
    engine: Engine,
    settings: Settings,
    project_id: str,
    workflow: str | None = "test-approval",
    config: dict[str, Any] | None = None,
) -> None:
    """Route every channel to ``workflow`` (None: leave the routes), set approvers, store
    outbound credentials."""
    box = secrets.SecretBox(settings.secret_keys)
    with db.transaction(engine) as conn:
        if workflow is not None:
            routes = {c: workflow for c in ("telegram", "line", "api", "gitea")}
            projects.set_routes(conn, project_id, routes)
        projects.set_config(
            conn,
            project_id,
            {"approvers": {"telegram": ["777"], "line": ["U1"]}, **(config or {})},
        )
        for kind, value in (
            ("telegram:bot", BOT_TOKEN),
            ("line:access", LINE_ACCESS_TOKEN),
            ("gitea:token", GITEA_TOKEN),
            ("webhook:signing", WEBHOOK_SECRET),
        ):
            projects.add_channel_secret(conn, project_id, kind, secret_encrypted=box.encrypt(value))


def decide_by_api(
    client: Any, project: dict, token: str, decision: str = "approve", **extra: Any
) -> Any:
    """``POST …/approvals/{token}`` as alice, with the project's API token."""
    import json

    return client.post(
        f"/v1/projects/{project['project_id']}/approvals/{token}",
        headers={
            "Authorization": f"Bearer {project['api_token']}",
            "Content-Type": "application/json",
        },
        data=json.dumps({"decision": decision, "actor": "alice", **extra}),
    )


def drain(engine: Engine, settings: Settings, rounds: int = 50) -> list[notify.Sent]:
    """Send every due message until none is left due (retries included)."""
    import time

    results: list[notify.Sent] = []
    for _ in range(rounds):
        due = notify.due(engine, settings)
        if not due:
            with engine.connect() as conn:
                pending = conn.exec_driver_sql(
                    "SELECT count(*) FROM awooop_outbox WHERE status = 'PENDING'"
                ).scalar_one()
            if not pending:
                return results
            time.sleep(0.05)
            continue
        results += [notify.send(engine, settings, m) for m in due]
    return results
