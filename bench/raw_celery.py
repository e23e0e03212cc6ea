"""Raw Celery on AwoooP's broker: the no-op task the end-to-end benchmark compares against.

``celery -A bench.raw_celery worker -Q bench_noop -c 1 -P prefork …``. Same broker URL and
the same settings style as ``celeryconfig`` (JSON, acks late, prefetch 1, results ignored),
no database. Each task increments a Redis counter; the first and the last record when they
ran (``time.time()``), so the benchmark measures first task → last task like AwoooP's
first claim → last completion.
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery
from kombu import Queue

QUEUE = "bench_noop"
COUNTER = "awooop:bench:noop:count"
FIRST = "awooop:bench:noop:first"
LAST = "awooop:bench:noop:last"
KEYS = (COUNTER, FIRST, LAST)

BROKER_URL = os.environ.get("AWOOOP_BROKER_URL", "")

app = Celery("awooop_bench_raw")
app.conf.update(
    broker_url=BROKER_URL,
    broker_connection_retry_on_startup=True,
    broker_transport_options={"visibility_timeout": 3600},
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    result_backend=None,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    worker_redirect_stdouts=False,
    task_default_queue=QUEUE,
    task_queues=(Queue(QUEUE),),
)

_redis: redis.Redis | None = None


def _client() -> redis.Redis:
    global _redis
    if _redis is None:  # created in the worker child, after the fork
        _redis = redis.Redis.from_url(BROKER_URL)
    return _redis


@app.task(name="bench.noop")
def noop(expected: int) -> None:
    """One Redis round trip per task (two for the first and the last)."""
    r = _client()
    n = r.incr(COUNTER)
    if n == 1:
        r.set(FIRST, repr(time.time()))
    if n == expected:
        r.set(LAST, repr(time.time()))
