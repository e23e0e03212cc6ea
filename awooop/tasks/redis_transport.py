"""Celery's Redis transports (kombu's plain and Sentinel ones), with one failure mode turned
into a connection error, a message that cannot be put back left to the sweeps, and one client
per connection pool.

When Redis goes away (a restart, a Sentinel failover) while a worker holds an
unacknowledged message, kombu closes the worker's broker connection, then its channel; the
channel tries to put the unacknowledged messages back (``restore_unacked``) and, its pool
gone, asks the already closed transport for the connection parameters:
``AttributeError: 'NoneType' object has no attribute 'hostname'``, which Celery treats as
unrecoverable — the worker stops instead of reconnecting. Here that question raises
:class:`redis.ConnectionError`, which kombu's closing code ignores, so the worker
reconnects. Nothing is lost by not restoring: the message was on the server that went away,
its run is in PostgreSQL, and a run whose message is gone is re-sent by the orphan sweep.

``celeryconfig.py`` turns kombu's acknowledgement emulation off, so a worker holds the
messages it took in memory and, when its channel closes, puts them back on their queue
itself. With Redis gone that fails, and kombu would log an error and dump the messages to a
temporary file; here each is one warning instead: what the message asked for is in
PostgreSQL (a run, a notification in the outbox), and the orphan or outbox sweep sends it
again (beat sends its sweeps again on their schedule).

kombu builds a new ``redis.Redis`` for each command it sends outside its consumer's own
client (each publish; with acknowledgement emulation, also the bookkeeping of each message
taken and its ack). A client is only a handle on its connection pool, safe to share between
threads, yet building one copies redis-py's table of response callbacks, about 0.16 ms of CPU
here. These channels keep one client per pool, and build a new one when kombu replaces the
pool (after a reconnection).

:func:`install` makes ``redis://``, ``rediss://`` and ``sentinel://`` mean these transports
in this process (kombu resolves the scheme again each time it connects, and for each
sentinel of a Sentinel URL); ``celeryconfig.py`` calls it for a Redis broker URL.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

log = logging.getLogger("awooop.tasks.redis_transport")


class _ClosedTransportIsAConnectionError:
    connection: Any

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise redis.ConnectionError("the broker connection is already closed")
        return super()._connparams(asynchronous)  # type: ignore[misc]


class _UnrestorableLeftToTheSweeps:
    connection_errors: tuple[type[BaseException], ...]

    def _restore(self, message: Any, leftmost: bool = False) -> None:
        try:
            super()._restore(message, leftmost)  # type: ignore[misc]
        except self.connection_errors as exc:
            log.warning(
                "a message taken from the broker could not be put back on its queue; what it "
                "asked for is in PostgreSQL, and the sweeps send it again",
                extra={
                    "action": "message_not_restored",
                    "routing_key": message.delivery_info.get("routing_key"),
                    "error": type(exc).__name__,
                },
            )


class _OneClientPerPool:
    pool: redis.ConnectionPool
    _pool_client: redis.Redis | None = None

    _create_client: Any  # kombu's

    @contextlib.contextmanager
    def conn_or_acquire(self, client: redis.Redis | None = None) -> Iterator[redis.Redis]:
        if client:
            yield client
            return
        shared = self._pool_client
        if shared is None or shared.connection_pool is not self.pool:
            shared = self._pool_client = self._create_client()
        yield shared

    def close(self) -> None:
        self._pool_client = None
        super().close()  # type: ignore[misc]


class Channel(
    _OneClientPerPool,
    _UnrestorableLeftToTheSweeps,
    _ClosedTransportIsAConnectionError,
    kombu_redis.Channel,
):
    pass


class SentinelChannel(
    _OneClientPerPool,
    _UnrestorableLeftToTheSweeps,
    _ClosedTransportIsAConnectionError,
    kombu_redis.SentinelChannel,
):
    pass


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel


_SCHEMES = {"redis": "Transport", "rediss": "Transport", "sentinel": "SentinelTransport"}


def install() -> None:
    for scheme, name in _SCHEMES.items():
        TRANSPORT_ALIASES[scheme] = f"{__name__}:{name}"
