"""kombu connections put in the state a Celery worker's consumer is in mid-task."""

from __future__ import annotations

from typing import Any

from kombu import Connection, Exchange, Producer, Queue


def holding_a_message(url: str, **transport_options: Any) -> Connection:
    """A kombu connection to ``url`` whose channel holds one unacknowledged message."""
    conn = Connection(url, transport_options=transport_options)
    queue = Queue("q", Exchange("q"), "q")
    channel = conn.default_channel
    Producer(channel).publish({"n": 1}, exchange=queue.exchange, routing_key="q", declare=[queue])
    assert queue(channel).get(no_ack=False) is not None
    return conn
