"""Which of a worker's writes wait for their WAL to reach the disk.

A step record commits asynchronously: losing it in a server crash is the same as its worker
dying just before writing it, which the lease, the reaper and the step's effect id repair. A
claim never does (a lease epoch lost in a crash could be issued twice), nor the statement
that ends a segment (a terminal status a client has seen must stay).

Observed through ``pg_stat_wal.wal_write``: a synchronous commit writes the WAL itself
before it answers, one write per commit from a single session; an asynchronous one leaves it
to the WAL writer, which writes at most every ``wal_writer_delay`` (200 ms by default).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.store import leases, segments
from tests.support import runs as test_runs

N = 100


def _wal_writes(conn: Connection, statements: Callable[[], None]) -> int:
    """WAL writes on the whole server while ``statements`` ran on ``conn``'s session."""

    def reading() -> int:
        conn.execute(text("SELECT pg_stat_force_next_flush()"))
        conn.execute(text("SELECT 1"))  # the session went idle once: its counters are in
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        return int(conn.execute(text("SELECT wal_write FROM pg_stat_wal")).scalar_one())

    before = reading()
    statements()
    return reading() - before


def _entry(step: str) -> list[dict]:
    return [{"step": step, "index": 0, "phase": "forward", "attempt": 1, "status": "succeeded"}]


def test_step_records_do_not_wait_for_the_wal_but_claims_and_finishes_do(engine, project):
    run_ids = test_runs.admit_many(engine, project["project_id"], N)
    with engine.connect() as conn:
        claims: list[leases.Claim] = []

        def claim_all() -> None:
            for run_id in run_ids:
                c = leases.claim(conn, "w1", 60, run_id)
                assert c is not None
                claims.append(c)

        recorded: list[leases.Claim] = []

        def record_all() -> None:
            for c in claims:
                now = segments.record_step(conn, c, _entry("one"), "two")
                assert now is not None
                recorded.append(c.advanced(now))

        def finish_all() -> None:
            for done in recorded:
                assert segments.finish(
                    conn,
                    done,
                    _entry("two"),
                    to_status=states.COMPLETED,
                    saga_status="COMPLETED",
                )

        claim_writes = _wal_writes(conn, claim_all)
        record_writes = _wal_writes(conn, record_all)
        finish_writes = _wal_writes(conn, finish_all)

    assert claim_writes >= N, claim_writes
    assert finish_writes >= N, finish_writes
    # The WAL writer's own passes while the records ran (a few at most), not one per record.
    assert record_writes <= N // 4, record_writes
    with engine.connect() as conn:
        journals = conn.execute(
            text("SELECT saga_steps FROM awooop_run_state WHERE run_id = ANY(:ids)"),
            {"ids": run_ids},
        ).scalars()
        assert [len(j if isinstance(j, list) else json.loads(j)) for j in journals] == [2] * N
