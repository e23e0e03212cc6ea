"""The lease protocol's real statements, interleaved at random against PostgreSQL.

A hypothesis state machine plays three workers, one reaper and one operator over two runs.
Every rule calls the statements (and the lease keeper's code) that production calls: claim,
renewal (``Lease.renew_now``), liveness beat (``workers.beat`` with ``Liveness.attempting`` /
``committed`` and ``LeaseKeeper._judged``, in the order ``LeaseKeeper._announce_due`` uses), a
reaper pass (``sweeps.reap_once``: ``liveness_tokens`` → ``WorkerWatch.observe`` →
``reap(dead=...)``), fenced step records and segment ends, operator pause / resume / cancel
(``operations.apply``) and the timer sweep. After every step it checks:

(a) at most one worker believes it holds a run (``Lease.believed``, on the worker's clock),
    and a worker that believes is the holder the database names;
(b) a fenced write is accepted only from the current (worker, lease epoch);
(c) an acknowledged operator intent (pause, cancel) stays in the row until a worker that
    has read it decides from it;
(d) a run's lease epoch never repeats and only grows.

**Time is simulated.** Each worker, the reaper and the database have a clock of their own,
each running at a fixed rate within ``timing.CLOCK_RATE_BOUND`` of real time, advanced
together by the ``tick`` and ``wait`` rules in steps of at most ``STEP``. At each step what
runs on its own does: each keeper's loop bodies (``LeaseKeeper._renew_due``,
``_announce_due``, ``_mark_overdue`` / ``_mark_unbelieved``), the reaper's pass every
``WATCH_INTERVAL`` of its clock, and the database's expiry of leases. The other rules
interleave extra statements between those steps.

The liveness judgement uses only the reaper's clock, as in production. The database's real
clock plays no part: claims take a lease of ``REAL_TTL`` and renewals one of ``TTL`` real
seconds, both longer than an example runs; the database's expiry of a lease is simulated
(a shortcut): once the database's simulated clock is ``TTL`` past the last claim or renewal
that committed, the renewal statement itself (``leases.renew`` with a negative TTL, fenced by
the holder's claim) moves ``lease_until`` into the past, and the next reaper pass takes the
run as ``lease_expired``.

**Failures.** A partitioned worker's statements are simply not sent while its clock runs
on (its keeper still marks what it no longer believes). A claim's reply may arrive late,
within ``REPLY_BOUND`` on the worker's clock (the worker's statement timeout, scaled), or
never (the claim committed; the worker gave up). A beat may be in flight for any time (its
statement commits later, or never), its reply lost past the keeper's deadline. A keeper's
renewals or beats may stall while the other goes on (a stalled thread, a renewal meeting a
lock). Lease keepers run no threads: the machine calls their methods. Not modelled: step
timeouts (their timer takes a run from a holder that may still believe, by design), tool
results and approvals, clock steps.

Settings are the production ones (liveness 5 / dead-after 20 / margin 5 s) with a lease
scaled down from 300 / 30 s to 60 / 6 s so that expiry is reachable in a few ticks.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import uuid
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import Engine

from awooop.config import Settings
from awooop.domain import timing
from awooop.engine import sweeps
from awooop.engine.lease import Lease, LeaseKeeper
from awooop.engine.watch import WorkerWatch
from awooop.store import admission, leases, operations, segments, timers, workers
from awooop.workflows import registry
from tests.support import db
from tests.support import runs as test_runs

RHO = timing.CLOCK_RATE_BOUND
LIVENESS_INTERVAL = 5.0
DEAD_AFTER = 20.0
MARGIN = 5.0
TTL = 60.0
INTERVAL = 6.0
# How late a claim's reply may come (the worker's statement timeout, scaled like the lease).
REPLY_BOUND = 6.0
# How long a beat's reply is waited for (the keeper's deadline: min(5 s, interval / 2)).
BEAT_DEADLINE = min(5.0, LIVENESS_INTERVAL / 2)
# The reaper's pass, and the longest step of simulated time between two looks at the clocks.
WATCH_INTERVAL = 10.0
STEP = 1.0
# Lease TTL given to the database: an example never lasts this long in real time.
REAL_TTL = 3600.0

N_WORKERS = 3
N_RUNS = 2

RATES = st.sampled_from([1 - RHO, 1.0, 1 + RHO])
TICKS = st.one_of(
    st.sampled_from([0.5, 1.0, 2.5, 5.0, 10.0, 12.0]), st.floats(0.01, 20.0, allow_nan=False)
)


class Clock:
    """A monotonic clock the test moves: ``rate`` seconds per second of real time."""

    def __init__(self, rate: float, start: float) -> None:
        self.rate = rate
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, real_seconds: float) -> None:
        self.now += real_seconds * self.rate


class TrackedLease(Lease):
    """A lease that tells the test when one of its renewal statements matched its row."""

    renewed: Callable[[], None] = staticmethod(lambda: None)

    def _renew(self) -> bool:
        held = super()._renew()
        if held:
            self.renewed()
        return held


@dataclasses.dataclass
class Worker:
    worker_id: str
    clock: Clock
    keeper: LeaseKeeper
    partitioned: bool = False
    heals_at: float = 0.0
    renewals_stall_until: float = 0.0
    liveness_stall_until: float = 0.0
    # run index -> the lease this worker drives it under
    leases: dict[int, Lease] = dataclasses.field(default_factory=dict)
    # a claim that committed, its reply not yet here: (run index, claim, worker clock at send)
    reply: tuple[int, leases.Claim, float] | None = None
    # beats sent, not answered: their start on the worker's clock
    beats: list[float] = dataclasses.field(default_factory=list)


def machine(
    engine: Engine, project_id: str, run_settings: Settings, watch_dead_after: float
) -> type[RuleBasedStateMachine]:
    class LeaseProtocol(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.workers: list[Worker] = []
            self.run_ids: list[uuid.UUID] = []
            # The database's view as the statements' results told it, per run index.
            self.holder: dict[int, leases.Claim | None] = {}
            self.epochs: dict[int, list[int]] = {}
            self.lease_committed: dict[int, float] = {}  # database clock at the last commit
            self.expired: set[int] = set()  # runs whose lease the database saw expire
            self.exhausted: set[int] = set()  # runs the reaper failed (attempts exhausted)
            self.reaped_at = 0.0
            self.control: dict[int, str] = {}  # control_state as the operator set it
            self.cancel_pending: dict[int, bool] = {}  # a cancel no worker has acted on
            self.log: list[str] = []

        @initialize(
            rates=st.lists(RATES, min_size=N_WORKERS + 2, max_size=N_WORKERS + 2),
            max_attempts=st.sampled_from([2, 50]),
        )
        def start(self, rates: list[float], max_attempts: int) -> None:
            self.db_clock = Clock(rates[0], 0.0)
            self.reaper_clock = Clock(rates[1], 1000.0)
            self.watch = WorkerWatch(watch_dead_after, self.reaper_clock)
            for i in range(N_WORKERS):
                clock = Clock(rates[2 + i], 100.0 * i)
                keeper = LeaseKeeper(clock, LIVENESS_INTERVAL, DEAD_AFTER, MARGIN)
                keeper._start = lambda: None  # type: ignore[method-assign]  # rules drive it
                self.workers.append(Worker(f"w{i}-{uuid.uuid4().hex[:8]}", clock, keeper))
            wf = registry.latest("noop-3")
            assert wf is not None
            for r in range(N_RUNS):
                new = dataclasses.replace(
                    test_runs.new_run(project_id, wf), max_attempts=max_attempts
                )
                with engine.begin() as conn:
                    self.run_ids.append(admission.admit(conn, new).run_id)
                self.holder[r] = None
                self.epochs[r] = [0]
                self.control[r] = "ACTIVE"
                self.cancel_pending[r] = False
            self.log.append(f"rates db={rates[0]} reaper={rates[1]} workers={rates[2:]}")

        def teardown(self) -> None:
            # Hand back what is still held, so that later examples' reaper passes (which see
            # the whole database) meet no RUNNING run of this one.
            with engine.connect() as conn:
                for c in self.holder.values():
                    if c is not None:
                        leases.release(conn, c, 0, "test teardown")

        # -- time and faults --------------------------------------------------------------

        @rule(dt=st.sampled_from([10.0, 20.0, 30.0]))
        def wait(self, dt: float) -> None:
            """A longer while passes (as ``tick``)."""
            self.tick(dt)

        @rule(dt=TICKS)
        def tick(self, dt: float) -> None:
            """Time passes, in steps of at most ``STEP`` seconds. At each, what runs on its
            own does: each keeper's renewal and liveness loop bodies (``_renew_due``,
            ``_announce_due``; a cut-off or stalled one only marks what it no longer
            believes), the reaper's pass every ``WATCH_INTERVAL`` of its clock, and the
            database's expiry of leases not renewed for ``TTL`` of its clock."""
            self.log.append(f"tick {dt:g}")
            steps = max(1, math.ceil(dt / STEP))
            for _ in range(steps):
                self.db_clock.advance(dt / steps)
                self.reaper_clock.advance(dt / steps)
                for w in self.workers:
                    w.clock.advance(dt / steps)
                    if w.partitioned and w.clock.now >= w.heals_at:
                        w.partitioned = False
                for r in self._expired():
                    self._expire(r)
                for w in self.workers:
                    held = list(w.leases.values())
                    if w.partitioned or w.clock.now < w.renewals_stall_until:
                        w.keeper._mark_overdue(held)
                    else:
                        w.keeper._renew_due(held)
                    if not w.partitioned and w.clock.now >= w.liveness_stall_until:
                        w.keeper._announce_due()
                    w.keeper._mark_unbelieved(held)
                if self.reaper_clock.now - self.reaped_at >= WATCH_INTERVAL:
                    self.reaper_pass()

        @rule(
            i=st.integers(0, N_WORKERS - 1),
            what=st.sampled_from(["renewals", "liveness"]),
            lasts=st.sampled_from([10.0, 30.0, 60.0]),
        )
        def stall(self, i: int, what: str, lasts: float) -> None:
            """A keeper thread stalls (or its statements keep failing on a lock) for
            ``lasts`` seconds of its worker's clock; the other goes on."""
            w = self.workers[i]
            setattr(w, f"{what}_stall_until", w.clock.now + lasts)
            self.log.append(f"w{i} {what} stalled for {lasts:g}")

        @rule(i=st.integers(0, N_WORKERS - 1), lasts=st.sampled_from([5.0, 20.0, 60.0, 1e9]))
        def partition(self, i: int, lasts: float) -> None:
            """Worker ``i`` is cut from the database for ``lasts`` seconds of its clock."""
            w = self.workers[i]
            w.partitioned = True
            w.heals_at = w.clock.now + lasts
            self.log.append(f"w{i} cut off for {lasts:g}")

        # -- a worker's statements --------------------------------------------------------

        def _pick(self, data: st.DataObject, choices: list[int]) -> int | None:
            return data.draw(st.sampled_from(choices)) if choices else None

        def _reachable(self, also: Callable[[Worker], bool]) -> list[int]:
            return [i for i, w in enumerate(self.workers) if not w.partitioned and also(w)]

        @rule(data=st.data())
        def claim(self, data: st.DataObject) -> None:
            """``runner.execute``'s claim, answered at once."""
            self._claim(data, "now")

        @rule(data=st.data(), reply=st.sampled_from(["later", "never"]))
        def claim_slow_reply(self, data: st.DataObject, reply: str) -> None:
            """A claim whose reply comes later (``claim_reply``), or never (the worker gave
            up; the claim committed)."""
            self._claim(data, reply)

        def _claim(self, data: st.DataObject, reply: str) -> None:
            i = self._pick(data, self._reachable(lambda w: w.reply is None))
            if i is None:
                return
            w = self.workers[i]
            # Mostly a run no one holds (a claim of a held run must find nothing, too).
            free = [r for r in range(N_RUNS) if self.holder[r] is None]
            r = data.draw(st.sampled_from(free or list(range(N_RUNS))))
            with engine.connect() as conn:
                c = leases.claim(conn, w.worker_id, REAL_TTL, self.run_ids[r])
            self.log.append(f"w{i} claim r{r} -> {c and c.lease_epoch}")
            if c is None:
                return
            assert c.lease_epoch > max(self.epochs[r]), (
                f"(d) lease epoch {c.lease_epoch} of run {r} does not grow: {self.epochs[r]}"
            )
            self.epochs[r].append(c.lease_epoch)
            self.holder[r] = c
            self._committed(r)
            if reply != "never":
                w.reply = (r, c, w.clock.now)
            if reply == "now":
                self._claim_replied(i, True)

        @precondition(lambda self: any(w.reply for w in self.workers))
        @rule(data=st.data(), arrives=st.booleans())
        def claim_reply(self, data: st.DataObject, arrives: bool) -> None:
            """The claim's reply reaches the worker (``runner._drive``: a ``Lease`` and
            ``keeper.hold``), or the worker gives up on it."""
            i = self._pick(data, self._reachable(lambda w: w.reply is not None))
            if i is not None:
                self._claim_replied(i, arrives)

        def _claim_replied(self, i: int, arrives: bool) -> None:
            w = self.workers[i]
            assert w.reply is not None
            r, c, sent = w.reply
            w.reply = None
            if not arrives or w.clock.now - sent > REPLY_BOUND:
                self.log.append(f"w{i} claim reply r{r} lost")
                return
            old = w.leases.pop(r, None)
            if old is not None:
                w.keeper.drop(old)
            # (runner.execute: the lease counts from before the claim was sent)
            held = TrackedLease(engine, c, TTL, INTERVAL, clock=w.clock, granted_at=sent)
            held.renewed = functools.partial(self._committed, r)
            w.keeper.hold(held)
            w.leases[r] = held
            self.log.append(f"w{i} holds r{r} epoch {c.lease_epoch}")

        def _held(self, data: st.DataObject, live: bool = False) -> tuple[int, int] | None:
            """A (worker, run) whose lease a reachable worker holds."""
            choices = [
                (i, r)
                for i, w in enumerate(self.workers)
                if not w.partitioned
                for r, held in w.leases.items()
                if not (live and held.lost.is_set())
            ]
            return data.draw(st.sampled_from(choices)) if choices else None

        @precondition(lambda self: any(w.leases for w in self.workers))
        @rule(data=st.data())
        def renew(self, data: st.DataObject) -> None:
            """The keeper's renewal of a lease that is due (``LeaseKeeper._renew_due``)."""
            picked = self._held(data, live=True)
            if picked is None:
                return
            i, r = picked
            w = self.workers[i]
            held = w.leases[r]
            renewed = held.renew_now()
            if not renewed:
                w.keeper.drop(held)
            self.log.append(f"w{i} renew r{r} -> {renewed}")

        @precondition(lambda self: any(w.keeper._announced for w in self.workers))
        @rule(data=st.data(), whole=st.booleans())
        def beat(self, data: st.DataObject, whole: bool) -> None:
            """The keeper's liveness beat (``LeaseKeeper._announce_due``), whole, or only
            sent (``Liveness.attempting``): it lands with ``beat_lands``, or never."""
            i = self._pick(data, self._reachable(lambda w: bool(w.keeper._announced)))
            if i is None:
                return
            w = self.workers[i]
            if whole:
                w.keeper._announce_due(force=True)
                self.log.append(f"w{i} beat")
            else:
                w.beats.append(w.keeper.liveness.attempting())
                self.log.append(f"w{i} beat sent at {w.beats[-1]:g}")

        @precondition(lambda self: any(w.beats for w in self.workers))
        @rule(data=st.data(), k=st.integers(0, 3), answered=st.booleans())
        def beat_lands(self, data: st.DataObject, k: int, answered: bool) -> None:
            """A beat in flight commits (even from a worker cut off since it was sent). Its
            reply reaches the worker if it is answered within the keeper's deadline and the
            worker is reachable; then, as ``_announce_due`` does: ``_judged``, ``committed``."""
            i = self._pick(data, [i for i, w in enumerate(self.workers) if w.beats])
            if i is None:
                return
            w = self.workers[i]
            started = w.beats.pop(k % len(w.beats))
            with engine.connect() as conn:
                judged = workers.beat(conn, w.worker_id)
            told = answered and not w.partitioned and w.clock.now - started <= BEAT_DEADLINE
            if told:
                w.keeper._judged(w.worker_id, judged)
                w.keeper.liveness.committed(started)
            self.log.append(f"w{i} beat of {started:g} lands, told={told}, judged={judged}")

        @precondition(lambda self: any(w.leases for w in self.workers))
        @rule(data=st.data(), kind=st.sampled_from(["step", "step", "finish", "retry_later"]))
        def write(self, data: st.DataObject, kind: str) -> None:
            """A fenced segment write, whatever the worker believes (the fence must hold).
            A paused run is handed back (``pause_release``); a cancelled one ends CANCELLED."""
            picked = self._held(data)
            if picked is None:
                return
            i, r = picked
            w = self.workers[i]
            held = w.leases[r]
            c = held.claim
            current = self.holder[r]
            entry = [{"phase": "test", "step": "a", "n": len(self.log)}]
            ends = kind != "step" or c.paused
            if ends:
                w.keeper.drop(held)  # as the runner does before a segment's last write
            write_id = uuid.uuid4()  # the identity each segment write carries
            with engine.connect() as conn:
                written: leases.Position | None
                if c.paused:
                    kind = "pause_release"
                    written = segments.pause_release(conn, c, write_id=write_id)
                elif kind == "step":
                    written = segments.record_step(conn, c, entry, None, write_id=write_id)
                elif kind == "finish" and c.saga_status == "CANCELLING":
                    written = segments.finish(
                        conn,
                        c,
                        entry,
                        to_status="CANCELLED",
                        saga_status="COMPENSATED",
                        failure_code="E-SAGA-002",
                        write_id=write_id,
                    )
                elif kind == "finish":
                    written = segments.finish(
                        conn,
                        c,
                        entry,
                        to_status="COMPLETED",
                        saga_status="COMPLETED",
                        write_id=write_id,
                    )
                else:
                    written = segments.retry_later(
                        conn, c, entry, 0.0, "a", "forward", len(self.log), write_id=write_id
                    )
                # (the runner's one check after a miss)
                after = None if written is not None else leases.after_miss(conn, c, write_id, ends)
            accepted = written is not None
            self.log.append(f"w{i} {kind} r{r} epoch {c.lease_epoch} -> {accepted}")
            if written is not None:
                assert current is not None and (current.worker_id, current.lease_epoch) == (
                    c.worker_id,
                    c.lease_epoch,
                ), (
                    f"(b) a fenced {kind} of run {r} by {c.worker_id} epoch {c.lease_epoch} "
                    f"was accepted; the holder is {current and current.worker_id} "
                    f"epoch {current and current.lease_epoch}"
                )
                if c.saga_status == "CANCELLING" and kind == "finish":
                    self.cancel_pending[r] = False  # decided from the cancel it had read
                if kind == "step":
                    held.claim = c.advanced(written)
                else:
                    self.holder[r] = None
                    del w.leases[r]
            elif isinstance(after, leases.Intent):
                # Someone recorded an intent meanwhile: read it back, decide from it.
                held.claim = c.advanced(after.position)
                if ends:
                    w.keeper.hold(held)
            else:
                assert not isinstance(after, leases.Applied), (
                    f"(b) a refused {kind} of run {r} was read back as applied"
                )
                w.keeper.drop(held)  # the lease is gone: the worker stops
                del w.leases[r]

        # -- the reaper ---------------------------------------------------------------------

        @rule()
        def reaper_pass(self) -> None:
            """``sweeps.reap_once`` with this machine's watch (on the reaper's clock)."""
            self.reaped_at = self.reaper_clock.now
            reaped = sweeps.reap_once(engine, run_settings, watcher=self.watch, prune=False)
            for x in reaped:
                if x.run_id in self.run_ids:
                    r = self.run_ids.index(x.run_id)
                    self.holder[r] = None
                    if x.to_status == "FAILED":
                        self.exhausted.add(r)
                    self.log.append(f"reaper took r{r} from {x.lost_worker_id}: {x.reason}")

        def _committed(self, r: int) -> None:
            """A claim or renewal of run ``r`` committed: its lease runs ``TTL`` from now."""
            self.lease_committed[r] = self.db_clock.now
            self.expired.discard(r)

        def _expired(self) -> list[int]:
            return [
                r
                for r, c in self.holder.items()
                if c is not None
                and r not in self.expired
                and self.db_clock.now - self.lease_committed[r] >= TTL
            ]

        def _expire(self, r: int) -> None:
            """The database's clock passed the lease's end (simulated: see the docstring)."""
            c = self.holder[r]
            assert c is not None
            with engine.connect() as conn:
                assert leases.renew(conn, c, -1.0)
            self.expired.add(r)
            self.log.append(f"r{r} lease of {c.worker_id} epoch {c.lease_epoch} expired")

        @rule()
        def fire_timers(self) -> None:
            """The timer sweep (retry timers: only a nudge; other kinds take effect)."""
            with engine.connect() as conn:
                for t in timers.fire_due(conn, "test-sweep", 100):
                    if t.fired and t.kind in timers.EFFECTS:
                        timers.EFFECTS[t.kind](conn, t)

        # -- the operator ------------------------------------------------------------------

        @rule(r=st.integers(0, N_RUNS - 1), op=st.sampled_from(["pause", "resume", "cancel"]))
        def operate(self, r: int, op: str) -> None:
            with engine.connect() as conn:
                result = operations.apply(
                    conn, op, project_id, self.run_ids[r], uuid.uuid4().hex, "op", "test"
                )
            self.log.append(f"operator {op} r{r} -> {result.applied}")
            if not result.applied:
                return
            if op == "cancel":
                self.cancel_pending[r] = True
            else:
                self.control[r] = result.control_state

        # -- invariants ----------------------------------------------------------------------

        @invariant()
        def one_believed_holder(self) -> None:
            if not self.workers:
                return
            for r in range(N_RUNS):
                believers = [w for w in self.workers if r in w.leases and w.leases[r].believed()]
                assert len(believers) <= 1, (
                    f"(a) two workers believe they hold run {r}: "
                    f"{[(w.worker_id, w.leases[r].claim.lease_epoch) for w in believers]}"
                )
                holder = self.holder[r]
                for w in believers:
                    c = w.leases[r].claim
                    assert holder is not None and (holder.worker_id, holder.lease_epoch) == (
                        c.worker_id,
                        c.lease_epoch,
                    ), (
                        f"(a) {w.worker_id} believes it holds run {r} under epoch "
                        f"{c.lease_epoch}, but the database's holder is "
                        f"{holder and holder.worker_id} epoch {holder and holder.lease_epoch}"
                    )

        @invariant()
        def database_agrees(self) -> None:
            """The row is as the statements' results said: holder, epoch, operator intents."""
            for r, run_id in enumerate(self.run_ids):
                row = db.run(engine, run_id)
                holder = self.holder[r]
                if holder is None:
                    assert row["status"] != "RUNNING", (r, row["status"], row["worker_id"])
                else:
                    assert (row["status"], row["worker_id"], row["lease_epoch"]) == (
                        "RUNNING",
                        holder.worker_id,
                        holder.lease_epoch,
                    )
                assert row["lease_epoch"] == max(self.epochs[r]), (
                    f"(d) run {r}'s lease epoch is {row['lease_epoch']}, claims saw "
                    f"{self.epochs[r]}"
                )
                assert row["control_state"] == self.control[r], (
                    f"(c) run {r}'s control_state is {row['control_state']}, the operator "
                    f"last set {self.control[r]}"
                )
                if self.cancel_pending[r]:
                    # The reaper fails a run whose crash budget ran out, cancelled or not:
                    # E-LEASE-001 then replaces the cancel's code (no worker wrote it).
                    code = "E-LEASE-001" if r in self.exhausted else "E-SAGA-002"
                    assert (row["saga_status"], row["failure_code"]) == ("CANCELLING", code), (
                        f"(c) run {r}'s acknowledged cancel was lost: "
                        f"{row['saga_status']} {row['failure_code']}"
                    )

    return LeaseProtocol


def _run(
    engine: Engine,
    project: dict,
    settings: Settings,
    watch_dead_after: float,
    **overrides: object,
) -> None:
    options: dict[str, object] = {
        "max_examples": 100,
        "stateful_step_count": 60,
        "deadline": None,
        "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    }
    options.update(overrides)
    run_state_machine_as_test(
        machine(engine, project["project_id"], settings, watch_dead_after),
        settings=hsettings(**options),  # type: ignore[arg-type]
    )


def test_random_interleavings_of_the_real_statements_keep_the_lease_invariants(
    engine, project, settings
):
    assert timing.liveness_problems(LIVENESS_INTERVAL, DEAD_AFTER, MARGIN) == []
    assert timing.renewals_fit(TTL, INTERVAL)
    _run(engine, project, settings, DEAD_AFTER)


class Drawn:
    """Stands for hypothesis's ``data`` in a scripted run of the machine's rules."""

    def __init__(self, *values: object) -> None:
        self.values = list(values)

    def draw(self, strategy: object) -> object:
        return self.values.pop(0)


# The timing rule broken: the reaper judges a worker dead before its belief
# (dead_after - margin = 15 s) has ended.
SHORT_WATCH = timing.belief_lasts(DEAD_AFTER, MARGIN) - 5.0


def test_a_short_watch_takes_the_run_of_a_cut_off_worker_that_still_believes(
    engine, project, settings
):
    """Negative control, scripted: the example hypothesis shrinks the search's find to."""
    state = machine(engine, project["project_id"], settings, SHORT_WATCH)()
    try:
        state.start(rates=[1.0] * (N_WORKERS + 2), max_attempts=2)
        state.claim(Drawn(0, 0))
        state.tick(0.5)
        state.partition(0, 20.0)
        state.wait(10.0)
        with pytest.raises(AssertionError, match=r"\(a\) .* believes it holds run 0"):
            state.one_believed_holder()
    finally:
        state.teardown()


def test_a_late_claim_reply_does_not_outlast_the_lease(engine, project, settings):
    """A claim answered 5.5 s late (within the worker's statement timeout, scaled), a keeper
    whose renewals stall (its beats go on), the database's clock 1 % fast and the worker's
    1 % slow: the database expires the lease at 60 s of its clock; the worker's belief,
    counted from before the claim was sent, ends at 54 s of its own (``ttl - interval``)."""
    state = machine(engine, project["project_id"], settings, DEAD_AFTER)()
    try:
        state.start(rates=[1 + RHO, 1.0, 1 - RHO, 1.0, 1.0], max_attempts=2)
        state.claim_slow_reply(Drawn(0, 0), "later")
        state.stall(0, "renewals", 100.0)
        state.tick(5.5)
        state.claim_reply(Drawn(0), True)
        for _ in range(5):
            state.tick(10.0)
        state.tick(4.0)  # 59.5 s: the database's clock is past 60, the worker's at 58.9
        state.reaper_pass()
        state.one_believed_holder()
    finally:
        state.teardown()
