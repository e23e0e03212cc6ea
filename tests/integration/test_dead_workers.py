"""A dead worker loses its runs quickly, a live one never does: the reaper also takes RUNNING
runs whose holder's liveness row (``awooop_worker``, beaten by the lease keeper every few
seconds) it has itself seen unchanged for ``dead_after`` seconds of its own clock, long before
their leases expire. The watches here run on a clock the test moves."""

from __future__ import annotations

import threading
import time

from sqlalchemy import Engine, event, text

from awooop import db as db_module
from awooop.engine import lease, sweeps
from awooop.engine.watch import WorkerWatch
from awooop.store import leases, reaper, workers
from tests.support import db
from tests.support import runs as test_runs
from tests.support.waiting import lock_waiters, until

DEAD_AFTER = 20.0
LONG_TTL = 300.0  # the default lease: these runs' leases never expire during a test


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def claim(engine: Engine, worker: str, run_id: object) -> leases.Claim:
    with engine.connect() as conn:
        c = leases.claim(conn, worker, LONG_TTL, run_id)
    assert c is not None
    return c


def seen(engine: Engine, worker: str, seconds_ago: float) -> None:
    """``worker``'s liveness row, last beaten ``seconds_ago`` by the database clock."""
    with engine.connect() as conn:
        workers.beat(conn, worker)
        conn.execute(
            text(
                "UPDATE awooop_worker SET seen_at = now() - make_interval(secs => :ago) "
                "WHERE worker_id = :w"
            ),
            {"w": worker, "ago": seconds_ago},
        )


def beat(engine: Engine, worker: str):
    with engine.connect() as conn:
        return workers.beat(conn, worker)


def watched(engine: Engine) -> tuple[WorkerWatch, Clock]:
    """A watch that has seen the current tokens once, at the clock's start."""
    clock = Clock()
    watch = WorkerWatch(DEAD_AFTER, clock)
    assert sweeps.reap_once(engine, watcher=watch) == []
    return watch, clock


def reap(engine: Engine, watch: WorkerWatch, batch_size: int = 1000) -> list:
    """One pass: look at the tokens, then reap with what the watch judged."""
    with engine.connect() as conn:
        tokens = reaper.liveness_tokens(conn)
        watch.observe(tokens.server, tokens.seen)
        return reaper.reap(conn, actor="test-reaper", batch_size=batch_size, dead=watch.dead())


def reaper_events(engine: Engine, run_id: object) -> list[dict]:
    return [e for e in db.events(engine, run_id) if e["trigger"] == "reaper"]


def test_a_worker_the_reaper_saw_unchanged_for_dead_after_loses_its_run_before_its_lease_expires(
    engine, project
):
    # Given a run held under a 5-minute lease, its worker's row seen by the reaper's watch
    run_id = test_runs.admit(engine, project["project_id"])
    c = claim(engine, "dead-worker", run_id)
    seen(engine, "dead-worker", 0)
    watch, clock = watched(engine)

    # When the watch has seen the same token for just under dead_after, then for dead_after
    clock.now += DEAD_AFTER - 0.1
    assert reap(engine, watch) == []
    clock.now += 0.1
    reaped = reap(engine, watch)

    # Then the second pass takes the run, and says why
    assert [(r.run_id, r.to_status, r.lost_worker_id, r.reason) for r in reaped] == [
        (run_id, "PENDING", "dead-worker", "worker_dead")
    ]
    row = db.run(engine, run_id)
    assert (row["status"], row["worker_id"], row["lease_until"]) == ("PENDING", None, None)
    [event] = reaper_events(engine, run_id)
    assert event["trigger_id"] == f"reap:{c.lease_epoch}"
    assert event["detail"]["reason"] == "worker_dead"
    assert event["detail"]["lost_worker_id"] == "dead-worker"
    # The run is claimable at once, by anyone.
    assert claim(engine, "other-worker", run_id).attempt_count == 2


def test_a_row_that_looks_old_by_the_database_clock_is_not_judged_on_sight(engine, project):
    # Given a live worker whose row the database clock calls an hour old (the clock stepped,
    # or the database restarted, or a standby with an old start time took over)
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "live-worker", run_id)
    seen(engine, "live-worker", 3600)

    # When a reaper that never saw it passes, and passes again after a new beat
    watch, clock = watched(engine)
    clock.now += DEAD_AFTER - 1
    beat(engine, "live-worker")
    clock.now += 5

    # Then nothing is taken: only the reaper's own clock, from its own sight, judges
    assert reap(engine, watch) == []
    assert db.run(engine, run_id)["status"] == "RUNNING"


def test_a_beat_that_commits_between_the_judgement_and_the_reap_saves_the_worker(engine, project):
    # Given a worker the watch has judged dead (its token unchanged for dead_after)
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "slow-worker", run_id)
    seen(engine, "slow-worker", 0)
    watch, clock = watched(engine)
    clock.now += DEAD_AFTER
    with engine.connect() as conn:
        tokens = reaper.liveness_tokens(conn)
    watch.observe(tokens.server, tokens.seen)
    dead = watch.dead()
    assert list(dead) == ["slow-worker"]

    # When the worker's beat commits before the reap statement runs
    assert beat(engine, "slow-worker") is None

    # Then the reap's compare-and-set on the token takes nothing, and stamps nothing
    with engine.connect() as conn:
        assert reaper.reap(conn, actor="test-reaper", dead=dead) == []
    assert db.run(engine, run_id)["status"] == "RUNNING"
    assert beat(engine, "slow-worker") is None


def test_a_beat_held_behind_a_reap_in_flight_learns_that_its_worker_was_judged_dead(
    engine, project
):
    # Given a reap of a judged worker's run, uncommitted
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "cut-worker", run_id)
    seen(engine, "cut-worker", 0)
    watch, clock = watched(engine)
    clock.now += DEAD_AFTER
    beaten: list = []
    with engine.connect() as reaping:
        # (a transaction of its own: the test's engine autocommits)
        reaping.execution_options(isolation_level="READ COMMITTED")
        txn = reaping.begin()
        tokens = reaper.liveness_tokens(reaping)
        watch.observe(tokens.server, tokens.seen)
        assert len(reaper.reap(reaping, actor="test-reaper", dead=watch.dead())) == 1

        # When the worker's beat is sent meanwhile (it waits on the reap's row lock)
        beating = threading.Thread(target=lambda: beaten.append(beat(engine, "cut-worker")))
        beating.start()
        until(lambda: lock_waiters(engine) > 0, 5, "the beat to wait on the reap")
        txn.commit()
    beating.join(5)

    # Then the beat returns the judgement: the worker knows its runs were taken
    assert beaten and beaten[0] is not None
    assert db.run(engine, run_id)["status"] == "PENDING"


def test_a_keeper_whose_beat_returns_a_judgement_marks_its_leases_lost(engine, project):
    # Given a keeper holding a lease, whose worker the reaper has judged dead
    run_id = test_runs.admit(engine, project["project_id"])
    c = claim(engine, "judged-worker", run_id)
    seen(engine, "judged-worker", 0)
    watch, clock = watched(engine)
    clock.now += DEAD_AFTER
    keeper = lease.LeaseKeeper(liveness_interval=0.2, dead_after=3.0, margin=1.0)
    held = lease.Lease(engine, c, LONG_TTL, 30.0)
    try:
        assert len(reap(engine, watch)) == 1
        # When its keeper's next beat commits
        keeper.hold(held)
        # Then the lease is lost, though the beat itself went through
        until(held.lost.is_set, 5, "the lease to be marked lost")
        assert not held.believed()
        assert beat(engine, "judged-worker") is not None
    finally:
        keeper.drop(held)
        keeper.close()


def test_a_worker_woken_after_its_belief_lapsed_beats_once_on_one_connection(
    database_url, project, monkeypatch
):
    # Given a keeper that has beaten once, whose process then stood still (SIGSTOP, a paused
    # VM) for longer than its belief lasts; its liveness thread's beat is held in flight
    engine = db_module.make_engine(database_url)
    keeper_pool = db_module.keeper_engine(engine)
    connects: list[object] = []
    event.listen(keeper_pool, "connect", lambda *_: connects.append(1))
    clock = Clock()
    keeper = lease.LeaseKeeper(clock=clock, liveness_interval=5.0, dead_after=3.0, margin=1.0)
    keeper._beating = beating = WatchedLock()
    held = lease.Lease(
        engine,
        claim(engine, "frozen-worker", test_runs.admit(engine, project["project_id"])),
        LONG_TTL,
        30.0,
        clock=clock,
    )
    real_beat, gate, counted = workers.beat, threading.Event(), threading.Lock()
    beats: list[str] = []
    in_flight = [0, 0]  # now, most at once

    def gated_beat(conn, worker_id):
        with counted:
            beats.append(threading.current_thread().name)
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
        try:
            if len(beats) > 1:
                gate.wait(10)
            return real_beat(conn, worker_id)
        finally:
            with counted:
                in_flight[0] -= 1

    monkeypatch.setattr(workers, "beat", gated_beat)
    waking = threading.Thread(target=lambda: keeper.hold(held), name="task")
    try:
        keeper.hold(held)
        until(lambda: _seen_at(engine, "frozen-worker") is not None, 5, "the first beat")
        keeper.drop(held)
        clock.now += 10.0
        until(lambda: len(beats) == 2, 5, "the liveness thread's beat after the freeze")

        # When a task claims a run now, its hold finding the belief lapsed
        waking.start()
        until(
            lambda: "task" in beats or "task" in beating.waiting,
            5,
            "the task's hold to beat, or to wait for the beat in flight",
        )
        gate.set()
        waking.join(10)
    finally:
        gate.set()
        keeper.drop(held)
        keeper.close()
        engine.dispose()

    # Then it waited for the beat in flight rather than sending its own: one beat at a time,
    # none more than needed, one connection, and the run believed held
    assert not waking.is_alive()
    assert in_flight[1] == 1
    assert beats == ["worker-liveness", "worker-liveness"]
    assert len(connects) == 1
    assert held.believed()


class WatchedLock:
    """A lock that says which threads wait for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waiting: set[str] = set()

    def __enter__(self) -> None:
        name = threading.current_thread().name
        self.waiting.add(name)
        self._lock.acquire()
        self.waiting.discard(name)

    def __exit__(self, *_: object) -> None:
        self._lock.release()


def test_a_failed_pass_or_another_server_makes_the_watch_start_afresh():
    clock = Clock()
    watch = WorkerWatch(DEAD_AFTER, clock)
    token = object()
    watch.observe("db@1", {"w": token})  # type: ignore[dict-item]
    clock.now += DEAD_AFTER
    assert list(watch.dead()) == ["w"]

    watch.observe("db@2", {"w": token})  # type: ignore[dict-item]
    assert watch.dead() == {}  # a restarted or promoted server: seen anew
    clock.now += DEAD_AFTER
    assert list(watch.dead()) == ["w"]

    watch.forget()  # a pass that failed
    watch.observe("db@2", {"w": token})  # type: ignore[dict-item]
    assert watch.dead() == {}


def test_a_dead_workers_run_with_its_attempts_exhausted_fails(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "dead-worker", run_id)
    with engine.connect() as conn:
        conn.execute(
            text("UPDATE awooop_run_state SET attempt_count = max_attempts WHERE run_id = :r"),
            {"r": run_id},
        )
    seen(engine, "dead-worker", 0)
    watch, clock = watched(engine)
    clock.now += DEAD_AFTER

    assert [r.to_status for r in reap(engine, watch)] == ["FAILED"]
    row = db.run(engine, run_id)
    assert (row["status"], row["failure_code"]) == ("FAILED", "E-LEASE-001")
    assert reaper_events(engine, run_id)[0]["detail"]["reason"] == "worker_dead"


def test_an_expired_lease_is_still_reaped_and_says_so(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    with engine.connect() as conn:
        leases.claim(conn, "slow-worker", 0.05, run_id)
    seen(engine, "slow-worker", 0)
    until(lambda: db.run(engine, run_id)["lease_until"] < _db_now(engine), 5, "the lease to pass")

    assert [r.to_status for r in reap(engine, WorkerWatch(DEAD_AFTER, Clock()))] == ["PENDING"]
    assert reaper_events(engine, run_id)[0]["detail"]["reason"] == "lease_expired"


def test_a_worker_with_no_liveness_row_is_left_to_its_lease(engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "rowless-worker", run_id)
    seen(engine, "someone-else", 3600)
    watch, clock = watched(engine)
    clock.now += 10 * DEAD_AFTER

    assert reap(engine, watch) == []
    assert db.run(engine, run_id)["worker_id"] == "rowless-worker"


def test_a_live_worker_whose_step_runs_for_many_liveness_intervals_is_never_taken_over(
    engine, project
):
    # Given a worker whose keeper beats every 0.2 s, judged dead after 1 s of the reaper's clock
    run_id = test_runs.admit(engine, project["project_id"])
    c = claim(engine, "live-worker", run_id)
    keeper = lease.LeaseKeeper(liveness_interval=0.2, dead_after=1.0, margin=0.5)
    held = lease.Lease(engine, c, LONG_TTL, 30.0)
    keeper.hold(held)
    watch = WorkerWatch(1.0)
    try:
        until(lambda: _seen_at(engine, "live-worker") is not None, 5, "a first liveness row")
        last = _seen_at(engine, "live-worker")

        # When its step runs for five times the dead-after threshold, reapers passing often
        passes = 0
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            assert reap(engine, watch) == []
            passes += 1
            last = _next_renewal(engine, "live-worker", last)
    finally:
        keeper.drop(held)
        keeper.close()

    # Then no pass took the run, the worker believed all along, and the row says who it is
    assert passes >= 5
    row = db.run(engine, run_id)
    assert (row["status"], row["worker_id"]) == ("RUNNING", "live-worker")
    assert not held.lost.is_set()
    [liveness] = db.rows(engine, "SELECT * FROM awooop_worker WHERE worker_id = 'live-worker'")
    assert liveness["pid"] > 0 and liveness["host"]
    assert liveness["started_at"] <= liveness["seen_at"]


def test_two_concurrent_reapers_take_disjoint_runs_of_a_dead_worker(engine, project):
    # Given six runs of a dead worker, judged by two reapers' watches
    run_ids = set(test_runs.admit_many(engine, project["project_id"], 6))
    for run_id in run_ids:
        claim(engine, "dead-worker", run_id)
    seen(engine, "dead-worker", 0)
    first_watch, first_clock = watched(engine)
    second_watch, second_clock = watched(engine)
    first_clock.now += DEAD_AFTER
    second_clock.now += DEAD_AFTER

    # When one reaper has taken three and not committed yet, and a second one passes
    with engine.connect() as held_conn:
        held_conn.execution_options(isolation_level="READ COMMITTED")
        txn = held_conn.begin()
        held_conn.execute(text("SET LOCAL lock_timeout = '5s'"))
        tokens = reaper.liveness_tokens(held_conn)
        first_watch.observe(tokens.server, tokens.seen)
        first = reaper.reap(held_conn, actor="reaper-1", batch_size=3, dead=first_watch.dead())
        second = _reap_when_unblocked(engine, second_watch, txn)

    # Then they took disjoint runs, all of them, each recorded once
    taken_first = {r.run_id for r in first}
    taken_second = {r.run_id for r in second}
    assert len(taken_first) == 3 and taken_first.isdisjoint(taken_second)
    assert taken_first | taken_second == run_ids
    assert reap(engine, second_watch) == []
    for run_id in run_ids:
        assert len(reaper_events(engine, run_id)) == 1


def test_liveness_rows_of_workers_gone_for_long_are_pruned(engine, project):
    # A row an hour old goes, unless its worker still holds a run (the reaper's to judge);
    # a recent row stays.
    run_id = test_runs.admit(engine, project["project_id"])
    claim(engine, "gone-but-holding", run_id)
    seen(engine, "gone-but-holding", 7200)
    seen(engine, "gone", 7200)
    seen(engine, "recent", 10)

    with engine.connect() as conn:
        assert workers.prune(conn, older_than=3600) == 1

    left = {r["worker_id"] for r in db.rows(engine, "SELECT worker_id FROM awooop_worker")}
    assert left == {"gone-but-holding", "recent"}


def _reap_when_unblocked(engine: Engine, watch: WorkerWatch, txn) -> list:
    """The second reaper's pass: its stamp on the worker's row waits for the first reaper's
    transaction, which commits once the second is seen waiting."""
    result: list = []
    second = threading.Thread(target=lambda: result.extend(reap(engine, watch)))
    second.start()
    until(lambda: lock_waiters(engine) > 0, 5, "the second reaper to wait on the first")
    txn.commit()
    second.join(10)
    return result


def _db_now(engine: Engine):
    with engine.connect() as conn:
        return conn.execute(text("SELECT now()")).scalar_one()


def _next_renewal(engine: Engine, worker: str, after: object):
    return until(
        lambda: _seen_at(engine, worker) != after and _seen_at(engine, worker), 2, "a renewal"
    )


def _seen_at(engine: Engine, worker: str):
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT seen_at FROM awooop_worker WHERE worker_id = :w"), {"w": worker}
        ).scalar_one_or_none()
