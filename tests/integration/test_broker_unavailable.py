"""Admission when the broker does not answer (cluster scenario 4 found it blocking).

A run's message is a nudge sent after the commit; when it cannot be sent the orphan sweep
sends it later. So a broker that stops answering — a partition: no error, no reset, just
silence — must cost admission one short, bounded wait, not one socket timeout per request:
the event is committed and answered 202 promptly.
"""

from __future__ import annotations

import time

import pytest
import redis
from sqlalchemy import text
from sqlalchemy.engine import make_url

from awooop.tasks import publish, runs
from tests.support.netproxy import FaultProxy


@pytest.fixture
def silent_broker(broker_url, redis_client, monkeypatch):
    """The app's broker behind a proxy that stops forwarding: ``(proxy, url)``."""
    url = make_url(broker_url.replace("redis://", "postgresql://", 1))
    with FaultProxy(url.host or "127.0.0.1", url.port or 6379) as proxy:
        proxied = broker_url.replace(f"{url.host}:{url.port}", f"127.0.0.1:{proxy.port}")
        monkeypatch.setattr(runs.execute.app.conf, "broker_url", proxied)
        publish.for_app.cache_clear()  # the publisher read the URL when it was made
        yield proxy, proxied
    publish.for_app.cache_clear()


def post_event(client, project, key: str):
    return client.post(
        f"/v1/projects/{project['project_id']}/runs",
        json={"n": key},
        headers={"Authorization": f"Bearer {project['api_token']}", "Idempotency-Key": key},
    )


def test_admission_answers_promptly_while_the_broker_does_not_answer(
    client, project, engine, silent_broker
):
    proxy, _ = silent_broker
    assert post_event(client, project, "warm-up").status_code == 202  # connected once

    # When the broker stops answering (a partition: nothing is closed)
    proxy.partition()
    started = time.monotonic()
    answers = [post_event(client, project, f"during-{i}").status_code for i in range(5)]
    elapsed = time.monotonic() - started

    # Then every event is committed and answered 202, and the five together waited about
    # one publish timeout, not five socket timeouts
    assert answers == [202] * 5
    assert elapsed < 3.0, f"five admissions took {elapsed:.1f} s"
    with engine.connect() as conn:
        pending = conn.execute(
            text("SELECT count(*) FROM awooop_run_state WHERE status = 'PENDING'")
        ).scalar_one()
    assert pending == 6


def test_after_a_failed_publish_sends_are_skipped_for_a_while_then_tried_again(
    redis_client, silent_broker
):
    proxy, url = silent_broker
    clock = [1000.0]
    publisher = publish.RedisPublisher(url, timeout=0.3, retry_seconds=5, clock=lambda: clock[0])
    assert publisher.publish("t", "q", [["a"]]) == 1

    proxy.partition()
    with pytest.raises(redis.RedisError):
        publisher.publish("t", "q", [["b"]])
    proxy.heal(reset=True)
    started = time.monotonic()
    with pytest.raises(publish.Unavailable):
        publisher.publish("t", "q", [["c"]])  # skipped at once: no wait, nothing sent
    assert time.monotonic() - started < 0.1
    clock[0] += 5.0
    assert publisher.publish("t", "q", [["d"]]) == 1
    assert redis_client.llen("q") == 2  # a, d
