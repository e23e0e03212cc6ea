"""A worker that reconnects to RabbitMQ while the server still holds its old connection
(cluster scenario 7 found it: after a partition the server keeps the dead connection until
its heartbeat timeout, and the worker's reconnect failed with 405 RESOURCE_LOCKED on its
remote-control queue — an "Unrecoverable error" that stops the worker)."""

from __future__ import annotations

import os
import uuid

import pytest
from kombu import Connection

from awooop.tasks.app import app

AMQP_URL = os.environ.get("AWOOOP_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


@pytest.fixture
def amqp_url() -> str:
    try:
        with Connection(AMQP_URL, connect_timeout=2) as conn:
            conn.connect()
    except OSError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no RabbitMQ at {AMQP_URL}: {exc}")
        pytest.skip(f"no RabbitMQ at {AMQP_URL}")
    return AMQP_URL


def test_a_worker_can_take_its_control_queue_again_while_its_old_connection_lingers(amqp_url):
    node_name = f"w-{uuid.uuid4().hex[:8]}@host"
    with Connection(amqp_url) as old, Connection(amqp_url) as new:
        # Given the worker's remote-control queue declared and consumed on a connection the
        # server still holds (the worker was cut off; the server has not noticed)
        old_node = app.control.mailbox.Node(node_name, channel=old.channel())
        old_consumer = old_node.listen()

        # When the worker, reconnected, declares and consumes it again
        new_node = app.control.mailbox.Node(node_name, channel=new.channel())
        with pytest.warns(UserWarning, match="already using this process mailbox"):
            new_consumer = new_node.listen()

        # Then the server accepts it (no 405 RESOURCE_LOCKED; kombu only warns that the
        # queue has another consumer — the stale connection's, until the server drops it)
        assert new_consumer.queues[0].name == old_consumer.queues[0].name
        new_consumer.cancel()
        old_consumer.cancel()
