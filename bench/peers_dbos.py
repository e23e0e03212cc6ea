"""DBOS Transact's side of ``make bench-peers``: a workflow of three steps, through a queue,
configured as DBOS's own queue benchmark runs its workers (why each setting: bench/NOTES.md).

Used three ways, each in a process of its own that ``bench.peers`` starts:

- ``python -m bench.peers_dbos setup``: creates DBOS's system tables (launch runs the
  migrations) and registers the queue;
- ``python -m bench.peers_dbos admit N [FIRST RATE]``: N workflows enqueued with a
  ``DBOSClient``, at RATE a second when given;
- ``python -m bench.peers_dbos worker``: one process that dequeues and runs them until
  SIGTERM.

Environment: BENCH_PEERS_DBOS_URL (the system database), BENCH_PEERS_DBOS_CONCURRENCY
(the queue's worker_concurrency), BENCH_PEERS_DBOS_THREADS (max_executor_threads).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from dbos import DBOS, DBOSClient, DBOSConfig, EnqueueOptions

APP_NAME = "awooop-bench-peers"
APP_VERSION = "bench-peers"
QUEUE = "bench-peers"
WORKFLOW = "peers_noop3"
CONCURRENCY = int(os.environ.get("BENCH_PEERS_DBOS_CONCURRENCY", "1000"))
THREADS = int(os.environ.get("BENCH_PEERS_DBOS_THREADS", "512"))


@DBOS.step()
async def step_one(run: int) -> int:
    return run


@DBOS.step()
async def step_two(run: int) -> int:
    return run


@DBOS.step()
async def step_three(run: int) -> int:
    return run


@DBOS.workflow(name=WORKFLOW)
async def noop3(run: int) -> int:
    await step_one(run)
    await step_two(run)
    return await step_three(run)


def config() -> DBOSConfig:
    return {
        "name": APP_NAME,
        "application_version": APP_VERSION,
        "system_database_url": os.environ["BENCH_PEERS_DBOS_URL"],
        "executor_id": f"bench-peers-{os.getpid()}",
        "max_executor_threads": THREADS,
    }


def setup() -> None:
    DBOS(config=config())
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=CONCURRENCY, on_conflict="always_update")
    DBOS.destroy()


def admit(n: int, first: int = 0, rate: float = 0.0) -> None:
    """Enqueue n workflows (numbered from ``first``), one call each: one after the other, or
    ``rate`` a second on a fixed schedule (open loop) when given."""
    client = DBOSClient(
        system_database_url=os.environ["BENCH_PEERS_DBOS_URL"], application_name=APP_NAME
    )
    options: EnqueueOptions = {
        "queue_name": QUEUE,
        "workflow_name": WORKFLOW,
        "app_version": APP_VERSION,
    }
    try:
        t0 = time.monotonic()
        for i in range(n):
            if rate > 0:
                time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            client.enqueue(options, first + i)
    finally:
        client.destroy()


def worker() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    DBOS(config=config())
    DBOS.launch()
    stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    command = sys.argv[1:2]
    if command == ["setup"]:
        setup()
    elif command == ["admit"] and len(sys.argv) in (3, 5):
        admit(int(sys.argv[2]), *((int(sys.argv[3]), float(sys.argv[4])) if sys.argv[4:] else ()))
    elif command == ["worker"]:
        worker()
    else:
        sys.exit("usage: python -m bench.peers_dbos setup | admit N [FIRST RATE] | worker")
