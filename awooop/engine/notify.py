"""Sending one outbox message: claim it, build the provider call, send, and record what
happened — SENT, due again after a back-off, or PARKED.

A message is parked at once when it can never be sent as it is (no credential configured, a
4xx other than 408/429 from the provider) and after ``outbox_max_attempts`` sends for
anything transient (5xx, 429, timeouts, connection errors). A parked message stays visible
(``awooop outbox list``) and can be retried (``awooop outbox retry``); it never blocks its run.
"""

from __future__ import annotations

import enum
import logging
import random
import uuid

import requests
from sqlalchemy import Engine

from awooop import metrics, telemetry
from awooop import secrets as crypto
from awooop.config import Settings
from awooop.outbound import adapters, transport
from awooop.store import outbox, projects

log = logging.getLogger("awooop.engine.notify")

_TRANSIENT_STATUSES = {408, 425, 429}


class Sent(enum.Enum):
    SENT = "sent"
    RETRY = "retry"
    PARKED = "parked"
    NOT_DUE = "not_due"  # sent, parked, held by another sender, or not due yet


def backoff(attempt: int, settings: Settings) -> float:
    base = settings.outbox_base_delay_seconds * 2 ** (attempt - 1)
    return min(settings.outbox_max_delay_seconds, base) * random.uniform(0.9, 1.1)


def _redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


def send(engine: Engine, settings: Settings, message_id: uuid.UUID) -> Sent:
    """Send the message if it is due; its span (when tracing is on) joins its run's trace."""
    # Longer than transport.post's deadline (timeout) plus its last read (timeout) and the
    # recording of the outcome: no other sender claims a message still being sent.
    hold = settings.outbox_send_timeout_seconds * 2 + 5
    with engine.connect() as conn:
        message = outbox.claim(conn, message_id, hold)
        if message is None:
            return Sent.NOT_DUE
        encrypted = projects.outbound_keys(
            conn, message.project_id, adapters.CREDENTIALS.get(message.channel, "")
        )
    fields = {
        "message_id": str(message.message_id),
        "run_id": str(message.run_id),
        "project_id": message.project_id,
        "channel": message.channel,
        "purpose": message.purpose,
        "attempt": message.attempts,
    }
    attributes = {**fields, "run_id": str(message.run_id) if message.run_id else None}
    with telemetry.send(message.channel, message.traceparent, attributes) as span:
        sent = _send(engine, settings, message, encrypted, fields)
        span.set(outcome=sent.value)
        if sent is not Sent.SENT:
            span.fail(sent.value)
        return sent


def _send(
    engine: Engine,
    settings: Settings,
    message: outbox.Claimed,
    encrypted: list[str],
    fields: dict[str, object],
) -> Sent:
    box = crypto.SecretBox(settings.secret_keys)
    keys = [k for k in (box.decrypt(e) for e in encrypted) if k is not None]
    token = box.decrypt(message.sealed) if message.sealed else None
    secrets: tuple[str, ...] = tuple(keys) + ((token,) if token else ())
    try:
        call = adapters.build(
            message.channel,
            str(message.message_id),
            message.payload,
            token,
            keys,
            settings,
            timestamp=message.attempted_at,
        )
        # A deadline on the whole send, shorter than the hold (see outbound.transport).
        answer = transport.post(call, settings.outbox_send_timeout_seconds)
    except adapters.CannotSend as exc:
        return _failed(engine, settings, message, str(exc), permanent=True, fields=fields)
    except requests.RequestException as exc:
        # The exception text may carry the URL, which for Telegram holds the bot token.
        error = _redact(f"{type(exc).__name__}: {exc}", secrets)
        return _failed(engine, settings, message, error, permanent=False, fields=fields)
    if 200 <= answer.status < 300:
        with engine.connect() as conn:
            outbox.mark_sent(conn, message)
        metrics.OUTBOUND_SENDS.labels(metrics.channel_label(message.channel), "sent").inc()
        log.info("message sent", extra={**fields, "action": "message_sent"})
        return Sent.SENT
    error = _redact(f"HTTP {answer.status}: {answer.text[:300]}", secrets)
    permanent = answer.status < 500 and answer.status not in _TRANSIENT_STATUSES
    return _failed(engine, settings, message, error, permanent=permanent, fields=fields)


def _failed(
    engine: Engine,
    settings: Settings,
    message: outbox.Claimed,
    error: str,
    *,
    permanent: bool,
    fields: dict[str, object],
) -> Sent:
    park = permanent or message.attempts >= settings.outbox_max_attempts
    delay = 0.0 if park else backoff(message.attempts, settings)
    with engine.connect() as conn:
        outbox.mark_failed(conn, message, error, delay, park)
    result = "parked" if park else "retry"
    metrics.OUTBOUND_SENDS.labels(metrics.channel_label(message.channel), result).inc()
    if park:
        log.error(
            "message parked: it will not be retried",
            extra={**fields, "action": "message_parked", "error": error},
        )
        return Sent.PARKED
    log.warning(
        "message not sent; will retry",
        extra={**fields, "action": "message_retry", "error": error, "retry_in_s": delay},
    )
    return Sent.RETRY


def due(engine: Engine, settings: Settings) -> list[uuid.UUID]:
    with engine.connect() as conn:
        return outbox.due(conn, settings.outbox_batch_size)
