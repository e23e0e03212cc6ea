"""A Celery worker's broker channel when Redis dies while it holds an unacknowledged
message: kombu closes the transport, then the channel, which tries to put the message back
and asks the closed transport for its connection parameters. kombu's own channel raised
``AttributeError`` there, which Celery's consumer treats as unrecoverable: the worker
stopped instead of reconnecting (the fault suite's "Redis forgets" scenario, the cluster
suite's Sentinel failover). :mod:`awooop.tasks.redis_transport` makes it a connection
error, which kombu ignores while closing.

kombu also built a new ``redis.Redis`` for each command outside its consumer's client (two a
message in a worker's parent, each copying redis-py's response callbacks); these channels keep
one per connection pool.

A worker configured by ``celeryconfig.py`` takes messages without kombu's acknowledgement
emulation (no copy written back to Redis), still puts a message back when its process dies or
it stops, and leaves a message it cannot put back on a lost Redis to the sweeps."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection, Exchange, Producer, Queue
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


@pytest.mark.parametrize("transport_gone", [True, False], ids=["transport-closed", "server-gone"])
def test_a_message_that_cannot_go_back_to_a_lost_redis_is_left_to_the_sweeps(
    server, monkeypatch, caplog, transport_gone
):
    # Without acknowledgement emulation the message a worker holds is put back from memory
    # when its channel closes; with Redis gone that fails, and kombu would log an error and
    # dump the message to a temporary file. The run is in PostgreSQL and the orphan sweep
    # sends it again: one warning says so.
    from kombu.transport.virtual import base

    dumped: list = []
    monkeypatch.setattr(base, "emergency_dump_state", lambda *a, **k: dumped.append(a))
    redis_transport.install()
    conn = holding_a_message(server.url, ack_emulation=False)
    server.kill()
    if transport_gone:
        conn._do_close_transport()  # what Celery's consumer does when the connection is lost

    with caplog.at_level("WARNING"):
        conn.close()

    assert dumped == []
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    warned = [r for r in caplog.records if getattr(r, "action", None) == "message_not_restored"]
    assert len(warned) == 1


def test_installed_for_every_redis_scheme():
    redis_transport.install()
    assert resolve_transport("redis") is redis_transport.Transport
    assert resolve_transport("rediss") is redis_transport.Transport
    assert resolve_transport("sentinel") is redis_transport.SentinelTransport


@contextlib.contextmanager
def _channel_with_empty_queue(broker_url: str, name: str) -> Iterator[tuple[Any, Queue]]:
    """A channel of AwoooP's Redis transport, and a queue of its own, declared and empty."""
    redis_transport.install()
    queue = Queue(name, Exchange(name), name)
    with Connection(broker_url) as conn:
        channel = conn.default_channel
        queue(channel).declare()
        queue(channel).purge()
        yield channel, queue


def _clients_built(channel) -> list:
    """Every client ``channel`` builds from now on."""
    built: list = []
    make = channel.Client

    def counting(**kwargs):
        built.append(make(**kwargs))
        return built[-1]

    channel.Client = counting
    return built


def _taken_and_acked(channel, queue: Queue, count: int) -> list[str]:
    """``count`` messages published, then taken and acked one by one; their delivery tags."""
    producer = Producer(channel)
    for n in range(count):
        producer.publish({"n": n}, exchange=queue.exchange, routing_key=queue.routing_key)
    tags = []
    for n in range(count):
        message = queue(channel).get(no_ack=False)
        assert message is not None and message.payload == {"n": n}
        message.ack()
        tags.append(message.delivery_tag)
    return tags


def test_a_channel_sends_every_message_s_bookkeeping_and_ack_through_one_client(broker_url):
    with _channel_with_empty_queue(broker_url, "awooop-test-one-client") as (channel, queue):
        built = _clients_built(channel)

        tags = _taken_and_acked(channel, queue, 20)

        # the one client may already have been built by the declare and purge above;
        # kombu's own channel built 100 here, five a message
        assert len(built) <= 1
        # every ack landed: none of the messages is left in the unacknowledged set
        assert channel.client.hmget(channel.unacked_key, tags) == [None] * len(tags)
        assert channel.client.llen(queue.name) == 0


def test_a_channel_whose_pool_was_replaced_sends_through_a_client_of_the_new_pool(broker_url):
    with _channel_with_empty_queue(broker_url, "awooop-test-new-pool") as (channel, queue):
        _taken_and_acked(channel, queue, 1)
        old_pool = channel.pool
        built = _clients_built(channel)

        channel._disconnect_pools()  # what kombu does when it reconnects
        _taken_and_acked(channel, queue, 3)

        assert channel.pool is not old_pool
        assert [client.connection_pool for client in built] == [channel.pool]


# --- the worker's channel as celeryconfig configures it: no acknowledgement emulation -------


@contextlib.contextmanager
def _worker_channel(broker_url: str, name: str) -> Iterator[tuple[Any, Queue]]:
    """A channel with the transport options of ``celeryconfig.py`` (as a worker's), and a
    queue of its own with one message on it."""
    import celeryconfig

    redis_transport.install()
    queue = Queue(name, Exchange(name), name)
    options = celeryconfig.broker_transport_options
    with Connection(broker_url, transport_options=options) as conn:
        channel = conn.default_channel
        queue(channel).declare()
        queue(channel).purge()
        Producer(channel).publish({"run_id": "r1"}, exchange=name, routing_key=name)
        yield channel, queue


def test_a_worker_takes_a_message_without_writing_a_copy_back_to_redis(broker_url):
    # PostgreSQL holds every run and the sweeps re-send a lost message: kombu's copy of each
    # taken message in Redis (two transactions a message in the worker's parent) buys nothing
    with _worker_channel(broker_url, "awooop-test-no-copy") as (channel, queue):
        message = queue(channel).get(no_ack=False)
        assert message is not None and message.payload == {"run_id": "r1"}

        assert channel.client.hlen(channel.unacked_key) == 0
        assert channel.client.zcard(channel.unacked_index_key) == 0

        message.ack()
        assert channel.client.llen(queue.name) == 0


def test_a_message_whose_worker_process_died_goes_back_on_the_queue(broker_url):
    # task_reject_on_worker_lost: Celery rejects the message with requeue
    with _worker_channel(broker_url, "awooop-test-requeue") as (channel, queue):
        message = queue(channel).get(no_ack=False)
        assert message is not None

        message.reject(requeue=True)

        again = queue(channel).get(no_ack=False)
        assert again is not None and again.payload == {"run_id": "r1"}
        again.ack()
        assert channel.client.llen(queue.name) == 0


def test_messages_taken_and_not_acked_go_back_on_the_queue_when_the_worker_stops(broker_url):
    with _worker_channel(broker_url, "awooop-test-restore") as (channel, queue):
        assert queue(channel).get(no_ack=False) is not None
        client = channel.client
        assert client.llen(queue.name) == 0

        channel.close()  # a worker stopping with a message it has not run

        assert client.llen(queue.name) == 1
