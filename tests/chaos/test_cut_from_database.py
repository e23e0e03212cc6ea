"""Scenarios 9 and 10 — a worker cut from PostgreSQL only while its handler acts.

``worker-b`` reaches PostgreSQL through a :class:`~tests.support.netproxy.FaultProxy`; the
recorder and Redis it reaches directly. It holds two runs of ``chaos-cooperative``, whose
handler reads ``ctx.lease_held`` before every side effect (one every 0.2 s, for two lease
lengths) and makes it at the recorder while it reads true; ``worker-a`` is started and idle.
Then the proxy stops forwarding on every connection, open or new, closing none (scenario
10: and PostgreSQL restarts with ``pg_ctl restart -m fast`` right after the cut).

``worker-a`` takes the runs over and finishes them. Asserted, from the recorder's clock:
for each run, ``worker-b``'s last side effect came before ``worker-a``'s first — a handler
told its lease is held never acts while another does. Then the proxy heals: every run
COMPLETED, no step completed twice, every journal effect recorded (the suite's checks).
Reported: from the cut to ``worker-b``'s last side effect and to ``worker-a``'s first, and
how long both acted at once.
"""

from __future__ import annotations

import pytest

from tests.chaos.cut_from_database import cut_while_acting
from tests.chaos.stack import Worker


@pytest.mark.timeout(600)
@pytest.mark.parametrize("restart", [None, "fast"], ids=["cut", "cut_and_restart"])
def test_worker_cut_from_database_stops_acting_before_another_worker_starts(
    chaos_stack, chaos_services, figures, restart
):
    if restart is None:
        figures.scenario("9", "A worker cut from PostgreSQL only while its handler acts")
    else:
        figures.scenario(
            "10", "A worker cut from PostgreSQL only while its handler acts; PostgreSQL restarts"
        )
    stack = chaos_stack.start(workers=("worker-b",), proxied=("worker-b",))
    cut = stack.worker("worker-b")
    proxy = cut.proxy
    assert proxy is not None

    def start_other() -> Worker:
        other = Worker(stack, "worker-a", "runs,notifications", 2)
        stack.workers["worker-a"] = other
        return other.spawn().wait_ready()

    def restart_postgres() -> float:
        return chaos_services.postgres.restart(restart)

    cut_while_acting(
        stack,
        cut,
        start_other,
        proxy.partition,
        proxy.heal,
        figures,
        restart=restart_postgres if restart else None,
    )
