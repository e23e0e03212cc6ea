"""Cluster scenarios 8 and 9 — a worker host cut from PostgreSQL only while its handler acts.

``w1`` reaches PostgreSQL through a proxy of its own on the bridge; Redis and the recorder
it reaches directly. It holds two runs of ``chaos-cooperative``, whose handler reads
``ctx.lease_held`` before every side effect and makes it at the recorder while it reads
true; ``w2`` is started and idle. Then the proxy stops forwarding, closing nothing
(scenario 9: and PostgreSQL, on ``db``, restarts with ``pg_ctl restart -m fast`` right after
the cut). ``w2`` takes the runs over; for each, ``w1``'s last side effect must come before
``w2``'s first (the recorder's clock). Then the proxy heals: every run COMPLETED, no step
completed twice, every journal effect recorded. The scenario is the chaos suite's
(:mod:`tests.chaos.cut_from_database`), with the workers on hosts of their own.
"""

from __future__ import annotations

import pytest

from tests.chaos.cut_from_database import cut_while_acting
from tests.chaos.stack import Worker


@pytest.mark.timeout(900)
@pytest.mark.parametrize("restart", [None, "fast"], ids=["cut", "cut_and_restart"])
def test_worker_host_cut_from_database_stops_acting_before_another_host_starts(
    cluster, cluster_services, figures, restart
):
    if restart is None:
        figures.scenario("8", "A worker host cut from PostgreSQL only while its handler acts")
    else:
        figures.scenario(
            "9",
            "A worker host cut from PostgreSQL only while its handler acts; PostgreSQL restarts",
        )
    links = cluster.links("database")
    stack = cluster.start(workers=("w1",), env={"w1": links.env})

    def start_other() -> Worker:
        other = Worker(stack, "w2", "runs,notifications", 2, host=stack.network["w2"])
        stack.workers["w2"] = other
        return other.spawn().wait_ready()

    def restart_postgres() -> float:
        return cluster_services.postgres.restart(restart)

    cut_while_acting(
        stack,
        stack.worker("w1"),
        start_other,
        links.partition,
        links.heal,
        figures,
        restart=restart_postgres if restart else None,
    )
