"""Per-project rate limits: a fixed one-minute window counted in Redis.

One round trip per checked request: ``SET key 0 EX 60 NX`` (start a window if none is open),
``INCR key``, ``PTTL key`` in one MULTI. The key expires with its window, so a crashed web
process can never leave a project blocked. A window admits at most ``limit`` requests; at a
window boundary a client can get up to twice the limit within a short time, which is fine
for protecting the service from a runaway caller.

Rate limits are a safety valve, not a correctness mechanism: when Redis is unreachable the
limiter **fails open** (the request is allowed), logs ``action=rate_limit_unavailable`` and
does not try Redis again for ``retry_seconds``, so a dead Redis costs one timeout per
interval, not one per request. Active-run quotas, which must hold, live in PostgreSQL
(``awooop/store/admission.py``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from awooop import redis_client

log = logging.getLogger("awooop.ratelimit")

WINDOW_SECONDS = 60


@dataclass(frozen=True)
class Decision:
    allowed: bool
    # Seconds until the current window ends (only meaningful when refused).
    retry_after: int = 0


ALLOWED = Decision(True)


class RateLimiter:
    def __init__(
        self,
        client: Any | None,
        retry_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        prefix: str = "awooop:rate",
    ) -> None:
        self._client = client
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._prefix = prefix
        self._lock = threading.Lock()
        self._skip_until = 0.0

    @classmethod
    def from_url(
        cls, url: str, timeout: float, retry_seconds: float, master_name: str = ""
    ) -> RateLimiter:
        """A limiter over the Redis at ``url`` (``master_name``: the master of a
        ``sentinel://`` URL); with no Redis URL, one that allows everything."""
        if not url or not redis_client.is_redis_url(url):
            if url:
                log.warning(
                    "rate limits need Redis; they are not enforced",
                    extra={"action": "rate_limit_unavailable"},
                )
            return cls(None)
        # No retries inside redis-py: one timeout, then the limiter's own back-off.
        client = redis_client.for_url(
            url,
            master_name,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            health_check_interval=30,
            retry=Retry(NoBackoff(), 0),
        )
        return cls(client, retry_seconds)

    def hit(self, project_id: str, kind: str, limit: int | None) -> Decision:
        """Count one ``kind`` request of ``project_id``; refused once ``limit`` per window is
        used up. ``limit`` None: no limit, and Redis is not asked."""
        if limit is None or self._client is None:
            return ALLOWED
        if self._clock() < self._skip_until:
            return ALLOWED
        key = f"{self._prefix}:{project_id}:{kind}"
        try:
            with self._client.pipeline(transaction=True) as pipe:
                pipe.set(key, 0, ex=WINDOW_SECONDS, nx=True)
                pipe.incr(key)
                pipe.pttl(key)
                _, count, ttl_ms = pipe.execute()
        except redis.RedisError as exc:
            with self._lock:
                self._skip_until = self._clock() + self._retry_seconds
            log.warning(
                "rate limit store unavailable; allowing requests",
                extra={
                    "action": "rate_limit_unavailable",
                    "project_id": project_id,
                    "kind": kind,
                    "error": type(exc).__name__,
                    "retry_in_seconds": self._retry_seconds,
                },
            )
            return ALLOWED
        if int(count) <= limit:
            return ALLOWED
        ttl = int(ttl_ms) if int(ttl_ms) > 0 else WINDOW_SECONDS * 1000
        return Decision(False, retry_after=max(1, math.ceil(ttl / 1000)))
