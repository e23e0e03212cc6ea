"""Celery's Redis Sentinel transport (kombu's), with one failure mode turned into a
connection error.

When the master dies while a worker holds an unacknowledged message, kombu closes the
worker's broker connection, then its channel; the channel tries to put the unacknowledged
messages back (``restore_unacked``) and, its pool gone, asks the already closed transport
for the connection parameters: ``AttributeError: 'NoneType' object has no attribute
'hostname'``, which Celery treats as unrecoverable — the worker stops instead of
reconnecting to the promoted replica (the cluster suite's Redis failover scenario). Here
that question raises :class:`redis.ConnectionError`, which kombu's closing code ignores, so
the worker reconnects. Nothing is lost by not restoring: the message was on the dead master,
its run is in PostgreSQL, and a run whose message is gone is re-sent by the orphan sweep.

:func:`install` makes ``sentinel://`` mean this transport in this process (kombu resolves
the scheme again each time it switches to another sentinel of the URL);
``celeryconfig.py`` calls it for a ``sentinel://`` broker URL.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

SCHEME = "sentinel"


class Channel(kombu_redis.SentinelChannel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise redis.ConnectionError("the broker connection is already closed")
        return super()._connparams(asynchronous)


class Transport(kombu_redis.SentinelTransport):
    Channel = Channel


def install() -> None:
    TRANSPORT_ALIASES[SCHEME] = f"{__name__}:Transport"
