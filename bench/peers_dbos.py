"""DBOS Transact's side of ``make bench-peers``: a workflow of three steps through a queue,
set up as DBOS's own queue benchmark runs its workers (why: bench/NOTES.md). ``bench.peers``
runs ``python -m bench.peers_dbos setup`` (system tables and queue), ``admit N [FIRST RATE]``
(a DBOSClient enqueues) and ``worker`` (until SIGTERM), each in a process of its own.

Environment: BENCH_PEERS_DBOS_URL (the system database), BENCH_PEERS_DBOS_CONCURRENCY (the
queue's worker_concurrency), BENCH_PEERS_DBOS_THREADS (max_executor_threads).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from dbos import DBOS, DBOSClient, EnqueueOptions

APP_NAME = "awooop-bench-peers"
APP_VERSION = "bench-peers"
QUEUE = "bench-peers"
WORKFLOW = "peers_noop3"
URL = os.environ.get("BENCH_PEERS_DBOS_URL", "")
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


def launch() -> None:
    """DBOS launched in this process (launch runs the system database's migrations)."""
    DBOS(
        config={
            "name": APP_NAME,
            "application_version": APP_VERSION,
            "system_database_url": URL,
            "executor_id": f"bench-peers-{os.getpid()}",
            "max_executor_threads": THREADS,
        }
    )
    DBOS.launch()


def admit(n: int, first: int = 0, rate: float = 0.0) -> None:
    """Enqueue n workflows numbered from ``first``, one call each: one after the other, or
    ``rate`` a second on a fixed schedule (open loop)."""
    client = DBOSClient(system_database_url=URL, application_name=APP_NAME)
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


def main(argv: list[str]) -> None:
    match argv:
        case ["setup"]:
            launch()
            DBOS.register_queue(QUEUE, worker_concurrency=CONCURRENCY, on_conflict="always_update")
            DBOS.destroy()
        case ["admit", n]:
            admit(int(n))
        case ["admit", n, first, rate]:
            admit(int(n), int(first), float(rate))
        case ["worker"]:
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            launch()
            stop.wait()
            DBOS.destroy()
        case _:
            sys.exit("usage: python -m bench.peers_dbos setup | admit N [FIRST RATE] | worker")


if __name__ == "__main__":
    main(sys.argv[1:])
