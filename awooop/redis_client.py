"""A redis-py client for a configured Redis URL: a plain server or a Sentinel-managed master.

AwoooP talks to Redis directly in three places besides Celery (the run sender's LPUSH, the
readiness check, the rate limiter); each asks :func:`for_url` and never learns which kind
of URL it was given.

- ``redis://``, ``rediss://``, ``unix://``: :meth:`redis.Redis.from_url`.
- ``sentinel://h1:26379;sentinel://h2:26379;…``: kombu's format for Celery's Sentinel
  transport. Every part names one sentinel; the first part's user, password and path
  (``/<db>``) are the master's, as kombu reads them. The client is
  ``redis.sentinel.Sentinel(...).master_for(master_name)``: each new connection asks the
  sentinels where the master is, so after a failover the next command that reconnects
  reaches the promoted replica. ``master_name`` is ``AWOOOP_BROKER_SENTINEL_MASTER``, the
  same name Celery reads from ``broker_transport_options['master_name']``.

The keyword arguments (timeouts, ``retry``) apply to the master's connections, and the
``socket_*`` ones also to the connections to the sentinels, so a sentinel that does not
answer costs one timeout, not a hang.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.sentinel import Sentinel

PLAIN_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEME = "sentinel"
DEFAULT_SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelURL:
    """What a ``sentinel://`` URL says: the sentinels, and the master's credentials and db."""

    sentinels: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    db: int = 0


def scheme(url: str) -> str:
    return url.partition("://")[0] if "://" in url else ""


def is_redis_url(url: str) -> bool:
    """Whether ``url`` names a Redis this module can connect to (plain or Sentinel)."""
    return all(scheme(part.strip()) in (*PLAIN_SCHEMES, SENTINEL_SCHEME) for part in url.split(";"))


def is_sentinel_url(url: str) -> bool:
    return scheme(url.strip()) == SENTINEL_SCHEME


def parse_sentinel_url(url: str) -> SentinelURL:
    """The sentinels of ``sentinel://h1:26379;sentinel://h2:26379/0``; ValueError (whose
    message shows no password) when a part is not a ``sentinel://host[:port]`` URL."""
    sentinels = []
    first = None
    for position, part in enumerate(url.split(";"), 1):
        part = part.strip()
        if not part:
            continue
        if scheme(part) != SENTINEL_SCHEME:
            raise ValueError(f"part {position} is not a sentinel:// URL (do not mix schemes)")
        parts = urlsplit(part)
        try:
            port = parts.port or DEFAULT_SENTINEL_PORT
        except ValueError:
            raise ValueError(f"part {position}: its port is not a number") from None
        if not parts.hostname:
            raise ValueError(f"part {position} names no sentinel host")
        sentinels.append((parts.hostname, port))
        first = first or parts
    if first is None:
        raise ValueError("names no sentinel")
    path = first.path.strip("/")
    if path and not path.isdigit():
        raise ValueError("the path must be a Redis database number, e.g. /0")
    return SentinelURL(
        tuple(sentinels),
        unquote(first.username) if first.username else None,
        unquote(first.password) if first.password else None,
        int(path or 0),
    )


def for_url(url: str, master_name: str = "", **kwargs: Any) -> redis.Redis:
    """A client of the Redis at ``url``; ``master_name`` is required for a ``sentinel://``
    URL (the group the sentinels monitor). ``kwargs`` go to redis-py's connections."""
    if not is_sentinel_url(url):
        return redis.Redis.from_url(url, **kwargs)
    if not master_name:
        raise ValueError(
            "a sentinel:// URL needs the master's name (AWOOOP_BROKER_SENTINEL_MASTER)"
        )
    parsed = parse_sentinel_url(url)
    sentinel_kwargs = {k: v for k, v in kwargs.items() if k.startswith("socket_")}
    sentinel = Sentinel(list(parsed.sentinels), sentinel_kwargs=sentinel_kwargs, **kwargs)
    return sentinel.master_for(
        master_name,
        username=parsed.username,
        password=parsed.password,
        db=parsed.db,
    )
