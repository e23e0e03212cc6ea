"""Procrastinate's side of ``make bench-peers``: a three-step no-op workflow as three jobs (a
job is its unit of durability), each deferring the next (why: bench/NOTES.md). ``bench.peers``
runs, each in a process of its own: ``procrastinate --app=bench.peers_procrastinate.app schema
--apply``, :func:`main` ``admit N [FIRST RATE]``, and ``procrastinate
--app=bench.peers_procrastinate.app worker --concurrency C``.

Environment: BENCH_PEERS_PROCRASTINATE_DSN (libpq connection string of the scratch database),
BENCH_PEERS_PROCRASTINATE_CONCURRENCY (the worker's; its pool has one connection more).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import procrastinate

CONCURRENCY = int(os.environ.get("BENCH_PEERS_PROCRASTINATE_CONCURRENCY", "30"))
STEPS = ("peers.step_one", "peers.step_two", "peers.step_three")

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(
        conninfo=os.environ.get("BENCH_PEERS_PROCRASTINATE_DSN", ""),
        # psycopg_pool's default min_size is 4; it may not exceed max_size.
        min_size=min(4, CONCURRENCY + 1),
        max_size=CONCURRENCY + 1,
    )
)


@app.task(name=STEPS[2])
async def step_three(run: int) -> None:
    """The last step: nothing to do, nothing to defer."""


@app.task(name=STEPS[1])
async def step_two(run: int, first_started: float) -> None:
    await step_three.defer_async(run=run)


@app.task(name=STEPS[0])
async def step_one(run: int) -> None:
    """``first_started``: when this step's code began, as AwoooP's and DBOS's steps stamp
    theirs, carried by the write the step makes anyway."""
    await step_two.defer_async(run=run, first_started=time.time())


async def admit(n: int, first: int = 0, rate: float = 0.0) -> None:
    """Defer n workflows' first steps numbered from ``first``, one call each: one after the
    other, or ``rate`` a second on a fixed schedule (open loop)."""
    async with app.open_async():
        t0 = time.monotonic()
        for i in range(n):
            if rate > 0:
                await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            await step_one.defer_async(run=first + i)


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 4) or argv[0] != "admit":
        sys.exit("usage: admit N [FIRST RATE]")
    rest = (int(argv[2]), float(argv[3])) if len(argv) == 4 else ()
    asyncio.run(admit(int(argv[1]), *rest))
