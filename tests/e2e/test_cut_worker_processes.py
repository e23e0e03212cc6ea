"""One believed holder at a time — real processes, a worker cut from PostgreSQL only.

A worker's handler reads ``ctx.lease_held`` before each side effect. When that worker's link
to the database stops forwarding (Redis, and the systems it acts upon, still answer), the
dead-worker judgement hands its run to another worker. The cut worker must stop believing
it holds the run before that: its last side effect comes before the other worker's first.

Timings are the production defaults scaled down together (a fifth), so the takeover goes
through the dead-worker judgement, as it does in production, not through lease expiry.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from awooop.tasks import runs as run_tasks
from tests.support import runs as test_runs
from tests.support.netproxy import FaultProxy
from tests.support.processes import Stack, wait_until
from tests.support.timings import production_ratios

pytestmark = pytest.mark.slow

# The lease, liveness and reaper defaults, each divided by five.
SCALED_PRODUCTION = production_ratios(0.2)
STEP_SECONDS = 40.0


def effects(log: Path) -> list[tuple[str, int, float]]:
    """(kind, pid, wall time) of each line the handlers wrote."""
    if not log.exists():
        return []
    rows = []
    for line in log.read_text().splitlines():
        kind, pid, at = line.split()
        rows.append((kind, int(pid), float(at)))
    return rows


def acted_by(log: Path, pid: int) -> list[float]:
    return [at for kind, p, at in effects(log) if kind == "effect" and p == pid]


def others(log: Path, pid: int) -> list[float]:
    return [at for kind, p, at in effects(log) if kind == "effect" and p != pid]


@pytest.mark.timeout(240)
def test_a_worker_cut_from_the_database_stops_acting_before_another_worker_starts(
    stack: Stack, settings, engine, project, tmp_path
):
    stack.env.update(SCALED_PRODUCTION)
    url = make_url(settings.database_url)
    log = tmp_path / "effects"
    run_id = test_runs.admit(
        engine,
        project["project_id"],
        "test-cooperative",
        {"log": str(log), "seconds": STEP_SECONDS},
    )
    with FaultProxy(url.host or "127.0.0.1", url.port or 5432, name="worker-a-db") as proxy:
        # Given worker A, reaching PostgreSQL through a proxy, acting in a long step
        through_proxy = url.set(host="127.0.0.1", port=proxy.port)
        worker_a = stack.worker(
            "worker-a",
            env={"AWOOOP_DATABASE_URL": through_proxy.render_as_string(hide_password=False)},
        )
        run_tasks.enqueue([run_id])
        wait_until(lambda: len(effects(log)) >= 3, 60, "worker A's first side effects")
        cut_pid = effects(log)[0][1]
        # and worker B, the maintenance worker and beat on a direct link
        worker_b = stack.worker("worker-b")
        stack.worker("maintenance", queues="maintenance")
        stack.beat()

        # When worker A's link to the database stops forwarding (nothing is closed)
        proxy.partition()

        # Then another worker takes the run over and acts
        wait_until(lambda: others(log, cut_pid), 120, "another worker's first side effect")
        # and by then worker A has stopped
        wait_until(
            lambda: any(k != "effect" and p == cut_pid for k, p, _ in effects(log)),
            STEP_SECONDS,
            "worker A's handler to end",
        )
        cut_last, other_first = max(acted_by(log, cut_pid)), min(others(log, cut_pid))
        print(f"cut worker's last side effect {other_first - cut_last:.2f} s before the other's")
        assert cut_last < other_first, (
            f"two handlers acted at once for {cut_last - other_first:.2f} s"
        )
        # Worker B is in the run's long step and worker A's link is still cut: neither's warm
        # shutdown would end before the stack's 10 s run out.
        worker_a.kill()
        worker_b.kill()
