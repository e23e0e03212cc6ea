"""A Celery worker's broker channel when Redis dies while it holds an unacknowledged
message: kombu closes the transport, then the channel, which tries to put the message back
and asks the closed transport for its connection parameters. kombu's own channel raised
``AttributeError`` there, which Celery's consumer treats as unrecoverable: the worker
stopped instead of reconnecting (the fault suite's "Redis forgets" scenario, the cluster
suite's Sentinel failover). :mod:`awooop.tasks.redis_transport` makes it a connection
error, which kombu ignores while closing."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kombu.transport import resolve_transport

from awooop.tasks import redis_transport
from tests.chaos.services import Redis
from tests.support.broker_channels import holding_a_message


@pytest.fixture
def server() -> Iterator[Redis]:
    root = Path(tempfile.mkdtemp(prefix="awooop-redis-transport-"))
    redis_server = Redis(root)
    redis_server.start()
    try:
        yield redis_server
    finally:
        redis_server.kill()
        shutil.rmtree(root, ignore_errors=True)


def test_a_redis_channel_closed_after_its_transport_does_not_raise_attribute_error(server):
    redis_transport.install()
    conn = holding_a_message(server.url)
    assert isinstance(conn.transport, redis_transport.Transport)
    server.kill()
    conn._do_close_transport()  # what Celery's consumer did when the connection was lost

    conn.close()  # kombu's own channel raised AttributeError here


def test_installed_for_every_redis_scheme():
    redis_transport.install()
    assert resolve_transport("redis") is redis_transport.Transport
    assert resolve_transport("rediss") is redis_transport.Transport
    assert resolve_transport("sentinel") is redis_transport.SentinelTransport
