"""Accessors for what create_app() put on the application, and the current request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from flask import current_app, request
from sqlalchemy import Engine

from awooop import db
from awooop.channels.base import RawRequest
from awooop.config import Settings
from awooop.ratelimit import RateLimiter
from awooop.secrets import SecretBox
from awooop.store.projects import ProjectAuth
from awooop.web.auth import ProjectAuthCache


def _ext() -> dict[str, Any]:
    return current_app.extensions["awooop"]


def settings() -> Settings:
    return _ext()["settings"]


def engine() -> Engine:
    return _ext()["engine"]


def read_engine() -> Engine:
    """The engine of reads that may lag behind the primary (:func:`awooop.db.read_engine`):
    the console's list pages and /metrics' gauges. Nothing read here decides a write."""
    return _ext()["read_engine"]


def probe_engine() -> Engine:
    """The poolless engine /readyz checks the database with."""
    return _ext()["probe_engine"]


def secret_box() -> SecretBox:
    return _ext()["secret_box"]


def project_auth(project_id: str, channel: str, fresh: bool = False) -> ProjectAuth | None:
    cache: ProjectAuthCache = _ext()["auth_cache"]
    # Read on the request thread's own connection, as admission's statement is: an admission
    # takes nothing from the pool.
    return cache.load(db.thread_connection(engine()), project_id, channel, fresh)


def rate_limiter() -> RateLimiter:
    return _ext()["rate_limiter"]


def enqueue(run_ids: list[Any]) -> int:
    return _ext()["enqueue"](run_ids)


def notify(message_ids: list[Any]) -> int:
    """Send these outbox messages now (they were committed)."""
    if not message_ids:
        return 0
    return _ext()["notify"](message_ids)


def raw_request(body: bytes = b"") -> RawRequest:
    """The current request as the channel modules see it."""
    # werkzeug's Headers is a case-insensitive mapping in all but its declared type.
    headers = cast(Mapping[str, str], request.headers)
    return RawRequest(headers=headers, body=body, query=request.args.to_dict(flat=False))
