"""The run sender, ``/readyz`` and the rate limiter over a real Redis Sentinel group (three
redis-servers and three sentinels on loopback): they reach the master the sentinels name,
and, after that master is SIGKILLed, the replica the sentinels promote."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from awooop import redis_client
from awooop.ratelimit import RateLimiter
from awooop.tasks import redis_transport
from awooop.tasks.publish import RedisPublisher, Unavailable
from awooop.web.app import create_app
from tests.support import sentinel as ha
from tests.support.broker_channels import holding_a_message
from tests.support.processes import wait_until


@pytest.fixture
def group() -> Iterator[ha.SentinelGroup]:
    root = Path(tempfile.mkdtemp(prefix="awooop-sentinel-"))
    sentinels = ha.SentinelGroup(root, [ha.Place("127.0.0.1")] * 3, quorum=2)
    try:
        yield sentinels.start()
    finally:
        sentinels.stop()
        shutil.rmtree(root, ignore_errors=True)


def _queued(server, queue: str = "runs") -> list[str]:
    client = redis.Redis(server.host, server.port)
    try:
        return [json.loads(m)["headers"]["id"] for m in client.lrange(queue, 0, -1)]
    finally:
        client.close()


def _published_one(publisher: RedisPublisher) -> bool:
    try:
        return publisher.publish("awooop.runs.execute", "runs", [["after"]]) == 1
    except (redis.RedisError, Unavailable):
        return False


def test_the_run_sender_pushes_to_the_master_and_to_the_replica_promoted_after_a_failover(group):
    publisher = RedisPublisher(
        group.url, timeout=1.0, retry_seconds=0.05, master_name=ha.MASTER_NAME
    )
    first = group.master()
    assert publisher.publish("awooop.runs.execute", "runs", [["before"]]) == 1
    assert len(_queued(first)) == 1

    # When the master is killed and the sentinels promote a replica
    group.kill_master()
    promoted = group.wait_failover(first)

    # Then the same publisher reaches the promoted replica, without being made again
    wait_until(lambda: _published_one(publisher), 30, "a push to the promoted master")
    assert promoted is not first
    assert len(_queued(promoted)) >= 1
    assert group.master() is promoted


def test_a_sentinel_url_without_the_masters_name_is_refused(group):
    with pytest.raises(ValueError, match="AWOOOP_BROKER_SENTINEL_MASTER"):
        redis_client.for_url(group.url)


def test_readyz_asks_the_sentinels_for_the_broker(settings, engine, group):
    ready = create_app(
        dataclasses.replace(settings, broker_url=group.url, broker_sentinel_master=ha.MASTER_NAME),
        engine,
    ).test_client()
    unknown = create_app(
        dataclasses.replace(settings, broker_url=group.url, broker_sentinel_master="elsewhere"),
        engine,
    ).test_client()

    assert ready.get("/readyz").status_code == 200
    answer = unknown.get("/readyz")
    assert answer.status_code == 503
    assert answer.json["checks"] == {"database": "ok", "broker": "unreachable"}


def test_the_rate_limiter_counts_on_the_master_the_sentinels_name(group):
    limiter = RateLimiter.from_url(group.url, 1.0, 10.0, master_name=ha.MASTER_NAME)

    decisions = [limiter.hit("p1", "ingress", 2).allowed for _ in range(3)]

    assert decisions == [True, True, False]
    master = group.master()
    client = redis.Redis(master.host, master.port)
    try:
        assert int(client.get("awooop:rate:p1:ingress")) == 3
    finally:
        client.close()


def test_a_sentinel_channel_closed_after_its_transport_does_not_raise_attribute_error(group):
    # The state Celery's consumer reached when the master died: the transport already closed
    # (its client gone), the channel still open with a message unacknowledged.
    redis_transport.install()
    conn = holding_a_message(group.url, master_name=ha.MASTER_NAME)
    assert isinstance(conn.transport, redis_transport.SentinelTransport)
    group.kill_master()
    conn._do_close_transport()

    conn.close()  # kombu's own SentinelChannel raised AttributeError here (not ignored)
