"""The reaper's pass reads each stale run it moves by its primary key.

The pass finds its stale runs once, through the index of running runs, then moves each of
them back to PENDING (or to FAILED). Planned from statistics taken while few runs were
running, those two updates read every running run through that index again and compared
each with every stale run found: a pass over 1,200 running runs, 10 of them stale, made
12,000 comparisons, and the work grew with the running runs times the batch."""

from __future__ import annotations

import re

from sqlalchemy import text

from awooop.store import reaper
from tests.support import plans

PAST, FUTURE = "2000-01-01T00:00:00Z", "2999-01-01T00:00:00Z"


def cte_plans(plan: str) -> dict[str, str]:
    """The plan of each CTE of ``plan``, by name."""
    parts: dict[str, list[str]] = {}
    current = None
    for line in plan.splitlines():
        found = re.match(r"^  CTE (\w+)$", line)
        if found:
            current = parts.setdefault(found.group(1), [])
        elif current is not None and line.startswith("    "):
            current.append(line.strip())
        else:
            current = None
    return {name: "\n".join(lines) for name, lines in parts.items()}


def test_the_runs_a_pass_moves_are_read_by_their_primary_key(engine, project):
    # Given 20,000 finished runs analyzed at a quiet moment (no run running), then 600
    # running runs whose lease expired and 600 whose lease holds, uncounted by the statistics
    run_id = plans.finished_runs(engine, project["project_id"], 20_000)
    plans.freeze_statistics(engine)
    plans.copy_run(engine, run_id, ["RUNNING"], 600, lease_until=PAST)
    plans.copy_run(engine, run_id, ["RUNNING"], 600, lease_until=FUTURE)

    # When a pass over 10 of them is planned
    values = {
        "actor": "test",
        "exhausted_code": reaper.EXHAUSTED,
        "batch_size": 10,
        "dead_ids": [],
        "dead_tokens": [],
    }
    with engine.connect() as conn:
        ctes = cte_plans(plans.custom_plan(conn, reaper._REAP, values))

    # Then both updates read each run by its primary key, not through the running runs
    for moved in ("requeued", "failed"):
        scans = [
            line
            for line in ctes[moved].splitlines()
            if "Scan" in line and " on awooop_run_state" in line
        ]
        assert scans, ctes[moved]
        assert all("pk_awooop_run_state" in line for line in scans), ctes[moved]

    # And the pass still moves the 10 expired runs it found, none of the others
    with engine.begin() as conn:
        reaped = reaper.reap(conn, "test", batch_size=10)
        expired = conn.execute(
            text(
                "SELECT count(*) FROM awooop_run_state"
                " WHERE status = 'RUNNING' AND lease_until < now()"
            )
        ).scalar_one()
    assert len(reaped) == 10 and {r.reason for r in reaped} == {"lease_expired"}
    assert expired == 590
