"""Celery's Redis transports (kombu's plain and Sentinel ones), with one failure mode turned
into a connection error.

When Redis goes away (a restart, a Sentinel failover) while a worker holds an
unacknowledged message, kombu closes the worker's broker connection, then its channel; the
channel tries to put the unacknowledged messages back (``restore_unacked``) and, its pool
gone, asks the already closed transport for the connection parameters:
``AttributeError: 'NoneType' object has no attribute 'hostname'``, which Celery treats as
unrecoverable — the worker stops instead of reconnecting. Here that question raises
:class:`redis.ConnectionError`, which kombu's closing code ignores, so the worker
reconnects. Nothing is lost by not restoring: the message was on the server that went away
(a surviving copy in the unacked set is restored by kombu after the visibility timeout),
its run is in PostgreSQL, and a run whose message is gone is re-sent by the orphan sweep.

:func:`install` makes ``redis://``, ``rediss://`` and ``sentinel://`` mean these transports
in this process (kombu resolves the scheme again each time it connects, and for each
sentinel of a Sentinel URL); ``celeryconfig.py`` calls it for a Redis broker URL.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis


class _ClosedTransportIsAConnectionError:
    connection: Any

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise redis.ConnectionError("the broker connection is already closed")
        return super()._connparams(asynchronous)  # type: ignore[misc]


class Channel(_ClosedTransportIsAConnectionError, kombu_redis.Channel):
    pass


class SentinelChannel(_ClosedTransportIsAConnectionError, kombu_redis.SentinelChannel):
    pass


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel


_SCHEMES = {"redis": "Transport", "rediss": "Transport", "sentinel": "SentinelTransport"}


def install() -> None:
    for scheme, name in _SCHEMES.items():
        TRANSPORT_ALIASES[scheme] = f"{__name__}:{name}"
