"""The fast run-message publisher writes exactly what Celery's apply_async would."""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid

from awooop.tasks import publish, runs
from tests.integration.conftest import queued_run_ids


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
    assert sorted(queued_run_ids(redis_client)) == ["a", "b", "c"]


def test_enqueue_of_nothing_sends_nothing(redis_client):
    assert runs.enqueue([]) == 0
    assert redis_client.llen(runs.RUNS_QUEUE) == 0


# The ids each message has of its own.
_PER_MESSAGE = (("headers", "id"), ("properties", "delivery_tag"))


def test_each_message_is_the_envelope_encoded_whole():
    """The template writer's JSON is json.dumps(envelope(...)) with the message's own ids,
    whatever the args hold."""
    args = ["run-1", 'quote " and \\ backslash', "unicode é ✓", 7, None]
    write = publish._writer("awooop.runs.execute", "runs")
    first, second = json.loads(write(args)), json.loads(write(args))

    expected = publish.envelope("awooop.runs.execute", "runs", args, task_id=first["headers"]["id"])
    expected["properties"]["delivery_tag"] = first["properties"]["delivery_tag"]
    assert first == expected
    assert json.loads(base64.b64decode(first["body"]))[0] == args
    fresh = [message[part][key] for message in (first, second) for part, key in _PER_MESSAGE]
    assert len(set(fresh)) == 4, "every message has a task id and a delivery tag of its own"
    assert all(uuid.UUID(i).version == 4 for i in fresh)
    # As apply_async's, the reply address names the sender, not the message.
    assert first["properties"]["reply_to"] == second["properties"]["reply_to"]


def test_a_forked_child_names_itself_in_its_messages():
    """The origin header and the reply address are the sending process's: a forked child
    writes its own, not its parent's."""
    write = publish._writer("awooop.runs.execute", "runs")
    parent = json.loads(write(["run-1"]))
    read, written = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: writes its message's header and property, then exits
        try:
            child = json.loads(publish._writer("awooop.runs.execute", "runs")(["run-1"]))
            os.write(
                written,
                json.dumps([child["headers"]["origin"], child["properties"]["reply_to"]]).encode(),
            )
            os._exit(0)
        except BaseException:
            os._exit(2)
    os.close(written)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        origin, reply_to = json.loads(pipe.read())

    assert os.waitstatus_to_exitcode(status) == 0
    assert origin == f"gen{pid}@{socket.gethostname()}" != parent["headers"]["origin"]
    assert reply_to != parent["properties"]["reply_to"]


def _connections_received(client) -> int:
    return int(client.info("stats")["total_connections_received"])


def test_pushes_share_one_connection(redis_client, broker_url):
    publisher = publish.RedisPublisher(broker_url)
    before = _connections_received(redis_client)

    for n in range(20):
        assert publisher.publish("t", "q", [[f"run-{n}"]]) == 1

    assert _connections_received(redis_client) - before == 1
    assert redis_client.llen("q") == 20


def test_a_forked_child_pushes_on_a_connection_of_its_own(redis_client, broker_url):
    """A child that inherited the parent's open connection must not write on it: the two
    processes' commands and replies would interleave on one socket."""
    publisher = publish.RedisPublisher(broker_url)
    assert publisher.publish("t", "q", [["parent-1"]]) == 1
    before = _connections_received(redis_client)

    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if its push landed
        try:
            os._exit(0 if publisher.publish("t", "q", [["child"]]) == 1 else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    assert _connections_received(redis_client) - before == 1  # the child's own
    assert publisher.publish("t", "q", [["parent-2"]]) == 1  # the parent's still answers
    bodies = [
        json.loads(base64.b64decode(json.loads(m)["body"]))[0][0]
        for m in redis_client.lrange("q", 0, -1)
    ]
    assert sorted(bodies) == ["child", "parent-1", "parent-2"]
