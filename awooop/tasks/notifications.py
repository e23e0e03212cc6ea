"""Outbox tasks: ``awooop.notifications.send`` (queue ``notifications``) sends one message;
the beat-driven ``awooop.sweeps.send_due_notifications`` re-sends what is due (retries after
a back-off, and messages whose task was lost). Arguments are message ids only."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from awooop import db
from awooop.config import get_settings
from awooop.engine import notify
from awooop.tasks import publish
from awooop.tasks.app import app

log = logging.getLogger("awooop.tasks.notifications")

SEND = "awooop.notifications.send"
NOTIFICATIONS_QUEUE = "notifications"


@app.task(name=SEND)
def send(message_id: str) -> str:
    return notify.send(db.get_engine(db.WORKER), get_settings(), uuid.UUID(message_id)).value


@app.task(name="awooop.sweeps.send_due_notifications")
def send_due_notifications() -> int:
    return enqueue(notify.due(db.get_engine(db.WORKER), get_settings()))


def enqueue(message_ids: Iterable[uuid.UUID | str]) -> int:
    """One send task per message, after the caller committed; a failed publish is logged
    (the sweep sends due messages anyway)."""
    ids = [str(m) for m in message_ids]
    if not ids:
        return 0
    try:
        return publish.send_each(send, NOTIFICATIONS_QUEUE, ids)
    except publish.Unavailable:
        return 0  # logged when the push failed; the outbox sweep sends them
    except Exception:
        log.exception(
            "could not send notification tasks; the outbox sweep will",
            extra={"action": "notify_enqueue_failed", "count": len(ids)},
        )
        return 0
