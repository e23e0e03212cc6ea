"""A live worker keeps its lease: renewals that hang are abandoned in time and
retried on a fresh connection; dropping a lease waits out a renewal in flight."""

from __future__ import annotations

import threading

from sqlalchemy import text
from sqlalchemy.engine import make_url

from awooop import db
from awooop.engine import lease
from awooop.store import leases, reaper
from tests.support import runs as test_runs
from tests.support.netproxy import FaultProxy
from tests.support.waiting import lock_waiters, until

TTL = 3.0
INTERVAL = 1.0  # a renewal is abandoned after half of this


def lease_row(engine, run_id):
    with engine.connect() as conn:
        return (
            conn.execute(
                text(
                    "SELECT status, worker_id, lease_until, heartbeat_at, now() AS db_now "
                    "FROM awooop_run_state WHERE run_id = :r"
                ),
                {"r": run_id},
            )
            .mappings()
            .one()
        )


def test_a_renewal_on_a_half_open_connection_fails_in_time_and_the_reaper_leaves_the_run(
    engine, database_url, project
):
    # Given a worker whose lease renewals go through a proxy, renewed once already
    run_id = test_runs.admit(engine, project["project_id"])
    with engine.connect() as conn:
        claim = leases.claim(conn, "live-worker", TTL, run_id)
    url = make_url(database_url)
    with FaultProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        proxied = db.make_engine(url.set(host="127.0.0.1", port=proxy.port), pool_size=2)
        keeper = lease.LeaseKeeper()
        held = lease.Lease(proxied, claim, TTL, INTERVAL)
        first = lease_row(engine, run_id)["heartbeat_at"]
        keeper.hold(held)
        until(lambda: lease_row(engine, run_id)["heartbeat_at"] > first, 5, "a first renewal")

        # When every open connection through the proxy stops answering, without closing
        proxy.stall()
        accepted = proxy.accepted
        stalled_until = lease_row(engine, run_id)["lease_until"]

        # Then the hung renewal is abandoned, the next one goes through a fresh connection,
        # and once the lease as it stood at the stall has expired the reaper finds nothing
        until(
            lambda: lease_row(engine, run_id)["db_now"] > stalled_until,
            TTL + 2,
            "the lease as of the stall to pass",
        )
        with engine.connect() as conn:
            reaped = reaper.reap(conn, actor="test-reaper")
        row = lease_row(engine, run_id)
        keeper.drop(held)
        keeper_closed = hasattr(keeper, "close") and keeper.close() is None
        proxied.dispose()

    assert reaped == []
    assert (row["status"], row["worker_id"]) == ("RUNNING", "live-worker")
    assert row["lease_until"] > stalled_until
    assert not held.lost.is_set()
    assert proxy.accepted > accepted  # renewed over a new connection
    assert keeper_closed


def test_drop_returns_only_after_a_renewal_in_flight_has_finished(engine, project):
    # Given a renewal held up by a row lock another transaction holds
    run_id = test_runs.admit(engine, project["project_id"])
    with engine.connect() as conn:
        claim = leases.claim(conn, "w1", 30.0, run_id)
    held = lease.Lease(engine, claim, 30.0, 5.0)
    keeper = lease.LeaseKeeper()
    in_flight = threading.Event()
    renewed = threading.Event()
    seen_at_drop: list[bool] = []

    def renew() -> None:
        in_flight.set()
        held.renew_now()
        renewed.set()

    with db.transaction(engine) as blocker:
        blocker.execute(
            text("SELECT 1 FROM awooop_run_state WHERE run_id = :r FOR UPDATE"), {"r": run_id}
        )
        renewal = threading.Thread(target=renew)
        renewal.start()
        until(in_flight.is_set, 5, "the renewal to start")
        until(lambda: lock_waiters(engine) > 0, 5, "the renewal to wait for the row lock")

        # When the runner drops the lease while that renewal is in flight
        def drop() -> None:
            keeper.drop(held)
            seen_at_drop.append(renewed.is_set())

        dropper = threading.Thread(target=drop)
        dropper.start()
        # A drop that does not wait returns at once; give it that chance before unblocking.
        dropper.join(timeout=0.5)
    # (the row lock is released here)
    dropper.join(timeout=10)
    renewal.join(timeout=10)

    # Then drop() returned only after the renewal finished, and nothing renews it any more
    assert seen_at_drop == [True]
    assert held.renew_now() is True  # a no-op once dropped: no statement, not lost
    assert not held.lost.is_set()
