"""The fast run-message publisher writes exactly what Celery's apply_async would."""

from __future__ import annotations

import base64
import json

from awooop.tasks import runs


def _normalise(message: dict) -> dict:
    """Blank out the per-message ids and the sender's identity."""
    message = json.loads(json.dumps(message))
    headers, properties = message["headers"], message["properties"]
    for key in ("id", "root_id", "origin"):
        headers[key] = "*"
    for key in ("correlation_id", "reply_to", "delivery_tag"):
        properties[key] = "*"
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


def test_fast_publish_matches_apply_async(redis_client):
    runs.execute.apply_async(("run-1",), queue=runs.RUNS_QUEUE)
    assert runs.enqueue(["run-1"]) == 1

    fast, celery = (json.loads(m) for m in redis_client.lrange(runs.RUNS_QUEUE, 0, -1))

    assert _normalise(fast) == _normalise(celery)
    assert fast["headers"]["id"] == fast["properties"]["correlation_id"]


def test_enqueue_sends_one_message_per_run(redis_client):
    assert runs.enqueue(["a", "b", "c"]) == 3
    args = sorted(
        json.loads(base64.b64decode(json.loads(m)["body"]))[0][0]
        for m in redis_client.lrange(runs.RUNS_QUEUE, 0, -1)
    )
    assert args == ["a", "b", "c"]


def test_enqueue_of_nothing_sends_nothing(redis_client):
    assert runs.enqueue([]) == 0
    assert redis_client.llen(runs.RUNS_QUEUE) == 0
