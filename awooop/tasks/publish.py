"""Sending ``awooop.runs.execute`` messages cheaply.

Celery's ``apply_async`` costs about 1 ms of CPU per message (option merging, signals,
kombu's generic publish path, a new Redis client object per publish). Admission sends one
message per request, which made publishing the largest cost of a request. On the Redis
transport a Celery message is one ``LPUSH`` of a JSON envelope — Celery's message protocol v2
inside kombu's Redis envelope — so this module writes that envelope (from a template made
once per task and queue) and pushes it on one redis-py connection held between pushes
(:mod:`awooop.redis_client`: a plain Redis, or the master a ``sentinel://`` URL's sentinels
name). Any other broker transport goes through
``apply_async``.

``tests/integration/test_publish.py`` checks the envelope against what ``apply_async``
produces, and the end-to-end tests prove that real workers consume it.

A broker that does not answer (a partition: no error, no reset) must not hold admission:
each push waits at most ``AWOOOP_BROKER_PUBLISH_TIMEOUT_SECONDS`` (no retries inside
redis-py), and after a failed push the publisher raises :class:`Unavailable` at once for
``AWOOOP_BROKER_PUBLISH_RETRY_SECONDS`` — the runs are committed, and the orphan sweep sends
their messages (``tests/integration/test_broker_unavailable.py``).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from awooop import ids, redis_client
from awooop.config import get_settings

_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}

# Celery's ``origin`` header, this process and host, and its ``reply_to`` property, an id of
# the sender (``apply_async`` puts its thread's id there; nothing replies to a task whose result
# is ignored): made once per process, not per message.
_origin = ""
_reply_to = ""


def _name_this_process() -> None:
    global _origin, _reply_to
    _origin = f"gen{os.getpid()}@{socket.gethostname()}"
    _reply_to = ids.uuid4_text()


_name_this_process()
os.register_at_fork(after_in_child=_name_this_process)


def envelope(
    task_name: str, queue: str, args: list[Any], task_id: str | None = None
) -> dict[str, Any]:
    """The kombu Redis envelope of a Celery protocol-v2 task message."""
    task_id = task_id or ids.uuid4_text()
    return {
        "body": _body(args),
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
            "origin": _origin,
            "ignore_result": True,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
        },
        "properties": {
            "correlation_id": task_id,
            "reply_to": _reply_to,
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": ids.uuid4_text(),
        },
    }


# Placeholders in a message template, found in the template by their JSON form; no value
# written into a message contains a control character unescaped.
_SLOTS = ("\x01body\x01", "\x01id\x01", "\x01argsrepr\x01", "\x01tag\x01")
_SLOT = re.compile("|".join(re.escape(json.dumps(slot)) for slot in _SLOTS))


@functools.cache
def _writer(task_name: str, queue: str) -> Callable[[list[Any]], str]:
    """A function from a task's args to its message as JSON: ``json.dumps(envelope(...))``
    with fresh ids, built by filling the message's four varying strings into a template made
    once, which costs less than encoding the whole envelope for every message."""
    template = envelope(task_name, queue, [], task_id=_SLOTS[1])
    template["body"] = _SLOTS[0]
    template["headers"]["argsrepr"] = _SLOTS[2]
    template["properties"]["delivery_tag"] = _SLOTS[3]
    text = json.dumps(template)
    parts = _SLOT.split(text)
    order = [_SLOTS.index(json.loads(m.group())) for m in _SLOT.finditer(text)]

    def write(args: list[Any]) -> str:
        # Each slot's JSON: base64 and ids need no escaping, the args' repr may.
        tokens = (
            f'"{_body(args)}"',
            f'"{ids.uuid4_text()}"',
            json.dumps(repr(tuple(args))),
            f'"{ids.uuid4_text()}"',
        )
        out = [parts[0]]
        for slot, part in zip(order, parts[1:], strict=True):
            out += (tokens[slot], part)
        return "".join(out)

    return write


os.register_at_fork(after_in_child=_writer.cache_clear)  # its template names the process


def _body(args: list[Any]) -> str:
    return base64.b64encode(json.dumps([args, {}, _EMBED]).encode()).decode("ascii")


class Unavailable(RuntimeError):
    """The broker failed a moment ago; nothing was sent (the orphan sweep will send it)."""


class RedisPublisher:
    """Pushes task messages straight onto a Redis-backed Celery queue; each push waits at
    most ``timeout`` seconds, and after a failed one pushes are refused with
    :class:`Unavailable` for ``retry_seconds``.

    The pushes share one connection, held between them (redis-py's single-connection client:
    its lock serialises callers). A pooled client would check a connection out and in for
    every push, polling its socket each time, and the run sender pushes about once per
    admission (bench/NOTES.md has the measurement). After a failed push the connection
    goes back to the pool, closed; the next push checks one out again, which with a
    ``sentinel://`` URL connects to the master the sentinels name now."""

    def __init__(
        self,
        broker_url: str,
        timeout: float = 1.0,
        retry_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        master_name: str = "",
    ) -> None:
        self._pool = redis_client.for_url(
            broker_url,
            master_name,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),  # one try: a failed push is the orphan sweep's
        ).connection_pool
        self._client: redis.Redis | None = None  # connects when made: made by the first push
        self._pid = 0  # the process that made it (a forked child makes its own)
        self._retry_seconds = retry_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._skip_until = 0.0

    def publish(self, task_name: str, queue: str, args_list: Iterable[list[Any]]) -> int:
        write = _writer(task_name, queue)
        messages = [write(args) for args in args_list]
        if not messages:
            return 0
        if self._clock() < self._skip_until:
            raise Unavailable(f"the broker failed less than {self._retry_seconds:g} s ago")
        try:
            self._connected().lpush(queue, *messages)
        except redis.RedisError:
            with self._lock:
                self._skip_until = self._clock() + self._retry_seconds
                # The next push checks a connection out of the pool again: a held one
                # reconnects to the address it had, and the pool's checkout is what asks
                # the sentinels where the master is now.
                client, self._client = self._client, None
            if client is not None:
                client.close()
            raise
        return len(messages)

    def _connected(self) -> redis.Redis:
        with self._lock:
            if self._client is None or self._pid != os.getpid():
                self._client = redis.Redis(
                    connection_pool=self._pool, single_connection_client=True
                )
                self._pid = os.getpid()
            return self._client


@functools.cache
def for_app(app: Any) -> RedisPublisher | None:
    """The process's publisher for the Celery ``app``'s broker; None when the broker is not
    Redis. The URL is read once: asking Celery's configuration for it costs about as much as
    writing a message. (A test that points the app elsewhere clears this cache.)"""
    url = app.conf.broker_url
    if not redis_client.is_redis_url(url):
        return None
    settings = get_settings()
    return RedisPublisher(
        url,
        settings.broker_publish_timeout_seconds,
        settings.broker_publish_retry_seconds,
        master_name=settings.broker_sentinel_master,
    )


def send_each(task: Any, queue: str, ids: list[str]) -> int:
    """One ``task(id)`` message per id on ``queue``: one pipelined LPUSH on Redis,
    ``apply_async`` on any other broker. Raises what the broker raises, or
    :class:`Unavailable` while a Redis broker's last push failed recently."""
    publisher = for_app(task.app)
    if publisher is not None:
        return publisher.publish(task.name, queue, ([i] for i in ids))
    for i in ids:
        task.apply_async((i,), queue=queue)
    return len(ids)
