"""Sending ``awooop.runs.execute`` messages cheaply.

Celery's ``apply_async`` costs about 1 ms of CPU per message (option merging, signals,
kombu's generic publish path, a new Redis client object per publish). Admission sends one
message per request, which made publishing the largest cost of a request. On the Redis
transport a Celery message is one ``LPUSH`` of a JSON envelope — Celery's message protocol v2
inside kombu's Redis envelope — so this module builds that envelope and pushes it with one
pooled redis-py client. Any other broker transport goes through ``apply_async``.

``tests/integration/test_publish.py`` checks the envelope against what ``apply_async``
produces, and the end-to-end tests prove that real workers consume it.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import socket
import uuid
from collections.abc import Iterable
from typing import Any

import redis

_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def envelope(
    task_name: str, queue: str, args: list[Any], task_id: str | None = None
) -> dict[str, Any]:
    """The kombu Redis envelope of a Celery protocol-v2 task message."""
    task_id = task_id or str(uuid.uuid4())
    body = json.dumps([args, {}, _EMBED]).encode()
    return {
        "body": base64.b64encode(body).decode("ascii"),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py",
            "task": task_name,
            "id": task_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [None, None],
            "root_id": task_id,
            "parent_id": None,
            "argsrepr": repr(tuple(args)),
            "kwargsrepr": "{}",
            "origin": f"gen{os.getpid()}@{socket.gethostname()}",
            "ignore_result": True,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
        },
        "properties": {
            "correlation_id": task_id,
            "reply_to": str(uuid.uuid4()),
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    }


class RedisPublisher:
    """Pushes task messages straight onto a Redis-backed Celery queue."""

    def __init__(self, broker_url: str) -> None:
        self._client = redis.Redis.from_url(broker_url)

    def publish(self, task_name: str, queue: str, args_list: Iterable[list[Any]]) -> int:
        messages = [json.dumps(envelope(task_name, queue, args)) for args in args_list]
        if not messages:
            return 0
        self._client.lpush(queue, *messages)
        return len(messages)


def is_redis_url(url: str) -> bool:
    return url.startswith(("redis://", "rediss://", "unix://"))


@functools.cache
def for_broker(url: str) -> RedisPublisher | None:
    """The process's publisher for ``url``; None when the broker is not Redis."""
    return RedisPublisher(url) if is_redis_url(url) else None


def send_each(task: Any, queue: str, ids: list[str]) -> int:
    """One ``task(id)`` message per id on ``queue``: one pipelined LPUSH on Redis,
    ``apply_async`` on any other broker. Raises what the broker raises."""
    publisher = for_broker(task.app.conf.broker_url)
    if publisher is not None:
        return publisher.publish(task.name, queue, ([i] for i in ids))
    for i in ids:
        task.apply_async((i,), queue=queue)
    return len(ids)
