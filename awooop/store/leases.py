"""The lease: claiming a run, renewing and releasing it, and the
fence every write of a lease holder carries.

A claim bumps ``lease_epoch``, the fencing token. Renewals carry :data:`LEASE_HELD`
(``worker_id``, ``lease_epoch``, ``status = 'RUNNING'``). A release carries :data:`HELD_AT`,
which adds the journal's length as the holder last saw it. A segment write carries
:data:`FENCE`, which adds the saga status the holder last saw too, so it is a compare-and-set
that:

- never replaces an intent someone else recorded while the worker ran (an operator's cancel,
  the run deadline: both move ``saga_status`` to CANCELLING);
- applied twice is applied once, so a write whose reply was lost can be retried.

Each segment write stamps its own identity (:data:`STAMP`, ``last_write_id``). When one
matched no row, :func:`after_miss` reads the run back once and says which of three things
happened: the write committed after all, on a try whose reply was lost (:class:`Applied`,
recognised by its identity, never by the journal's length); an intent was recorded meanwhile
while the lease is still the holder's (:class:`Intent`); or the lease is gone (:class:`Lost`).
All times are the database's ``now()``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, text

from awooop import ids
from awooop.domain import states
from awooop.store import jsonb
from awooop.store.literals import status_of_named_row
from awooop.store.prepared import PreparedStatement

states.check_transition(states.PENDING, states.RUNNING)
states.check_transition(states.RESUMED, states.RUNNING)
states.check_transition(states.RUNNING, states.PENDING)
states.check_transition(states.RUNNING, states.FAILED)

_CLAIM_TEMPLATE = """
WITH candidate AS (
    SELECT run_id, status
    FROM awooop_run_state
    WHERE status IN ('PENDING', 'RESUMED')
      AND (lease_until IS NULL OR lease_until < now())
      AND available_at <= now()
      AND control_state = 'ACTIVE'
      {choice}
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE awooop_run_state r
    SET status = 'RUNNING',
        lease_until = now() + make_interval(secs => :lease_ttl),
        heartbeat_at = now(),
        attempt_count = r.attempt_count + 1,
        lease_epoch = r.lease_epoch + 1,
        worker_id = :worker_id,
        version = r.version + 1,
        updated_at = now()
    FROM candidate c
    WHERE r.run_id = c.run_id
    RETURNING r.run_id, r.project_id, r.workflow_name, r.workflow_version, r.workflow_digest,
              -- decoded here, so a value too deep to decode fails the run, not the worker
              CAST(r.input AS text) AS input_text, CAST(r.saga_steps AS text) AS journal_text,
              r.attempt_count, r.max_attempts, r.lease_epoch,
              r.lease_until, r.saga_status, r.control_state, r.version, r.failure_code,
              r.traceparent,
              c.status AS from_status,
              -- claim latency: since the run's message was sent (or its retry fell due)
              GREATEST(0, extract(epoch FROM now() - r.enqueued_at))::float8 AS waited,
              -- since the run's admission (its duration, once it ends)
              GREATEST(0, extract(epoch FROM now() - r.created_at))::float8 AS age
), history AS (
    INSERT INTO awooop_run_event
        (run_id, kind, from_status, to_status, trigger, trigger_id, actor, detail)
    SELECT run_id, 'lease', from_status, 'RUNNING', 'worker', 'claim:' || lease_epoch,
           :worker_id, jsonb_build_object('attempt', attempt_count, 'lease_epoch', lease_epoch)
    FROM claimed
)
SELECT * FROM claimed
"""
# The run a message names, read by its primary key. Never ordered: with ORDER BY and LIMIT the
# planner may walk the claimable index in order, filtering for the one run — a cost that grows
# with the backlog (planned on stale statistics, it did: ~20 ms with 2,700 runs pending).
_CLAIM_BY_ID = PreparedStatement(
    "awooop_claim_by_id", _CLAIM_TEMPLATE.format(choice="AND run_id = :run_id")
)
# The oldest claimable run, through the claimable index in its order.
_CLAIM_OLDEST = PreparedStatement(
    "awooop_claim_oldest",
    _CLAIM_TEMPLATE.format(choice="ORDER BY available_at, created_at\n    LIMIT 1"),
)


@dataclass(frozen=True)
class Claim:
    """A held lease: who holds it (``worker_id``), the fencing token (``lease_epoch``), and
    where the holder last saw the run (``saga_status``, ``journal_length``): every segment
    write is a compare-and-set on all four (:data:`FENCE`). After each write the holder
    moves on with :meth:`advanced`."""

    run_id: uuid.UUID
    project_id: str
    workflow_name: str
    workflow_version: int
    workflow_digest: str
    input: dict[str, Any]
    saga_steps: list[dict[str, Any]]
    attempt_count: int
    max_attempts: int
    lease_epoch: int
    worker_id: str
    saga_status: str = "RUNNING"
    version: int = 0
    failure_code: str | None = None
    # The W3C trace context the run was admitted with (for log lines), if any.
    traceparent: str | None = None
    # Seconds between the run's message being sent (or its retry falling due) and this claim.
    waited_seconds: float = 0.0
    # Seconds between the run's admission and this claim, by the database clock.
    age_seconds: float = 0.0
    # Entries in the journal as the holder last wrote or read it.
    journal_length: int = 0
    paused: bool = False

    @property
    def position(self) -> Position:
        """Where the holder last saw the run."""
        return Position(self.saga_status, self.failure_code, self.paused, self.journal_length)

    def advanced(self, now: Position) -> Claim:
        """The claim once the holder saw the run at ``now``: after its own write (where the
        write left the run), or after reading an intent recorded meanwhile."""
        return replace(
            self,
            saga_status=now.saga_status,
            failure_code=now.failure_code,
            paused=now.paused,
            journal_length=now.journal_length,
        )


@dataclass(frozen=True)
class Position:
    """Where a held run is: its saga status, what operators (or the run deadline) asked of
    it — a pause; a cancel and its cause in ``failure_code`` — and the journal's length. Every
    segment write returns it (no extra query); :func:`after_miss` reads it back."""

    saga_status: str
    failure_code: str | None
    paused: bool
    journal_length: int

    @property
    def cancelling(self) -> bool:
        return self.saga_status == "CANCELLING"

    @property
    def cause(self) -> str | None:
        """Why it is cancelling: E-SAGA-002 (an operator) or E-SAGA-003 (the run deadline)."""
        return self.failure_code


class UnloadableRun(Exception):
    """The claimed run's stored input or journal cannot be decoded by this process."""

    def __init__(
        self,
        run_id: uuid.UUID,
        worker_id: str,
        lease_epoch: int,
        reason: str,
        workflow_name: str = "",
        age_seconds: float = 0.0,
    ) -> None:
        super().__init__(f"run {run_id}: {reason}")
        self.run_id = run_id
        self.worker_id = worker_id
        self.lease_epoch = lease_epoch
        self.reason = reason
        self.workflow_name = workflow_name
        self.age_seconds = age_seconds


def claim(
    conn: Connection, worker_id: str, lease_ttl: float, run_id: uuid.UUID | str | None = None
) -> Claim | None:
    """Take the lease on ``run_id`` (or the oldest claimable run); None if nothing is claimable.
    :class:`UnloadableRun` when the run was claimed but cannot be loaded (the lease is held:
    give it to :func:`fail_unloadable`)."""
    params = {"worker_id": worker_id, "lease_ttl": lease_ttl}
    if run_id is None:
        row = _CLAIM_OLDEST.execute(conn, params).first()
    else:
        row = _CLAIM_BY_ID.execute(conn, {**params, "run_id": run_id}).first()
    if row is None:
        return None
    try:
        run_input, journal = jsonb.loads(row.input_text), jsonb.loads(row.journal_text)
    except jsonb.Undecodable as exc:
        raise UnloadableRun(
            row.run_id, worker_id, row.lease_epoch, str(exc), row.workflow_name, row.age
        ) from exc
    return Claim(
        run_id=row.run_id,
        project_id=row.project_id,
        workflow_name=row.workflow_name,
        workflow_version=row.workflow_version,
        workflow_digest=row.workflow_digest,
        input=run_input,
        saga_steps=journal,
        attempt_count=row.attempt_count,
        max_attempts=row.max_attempts,
        lease_epoch=row.lease_epoch,
        worker_id=worker_id,
        saga_status=row.saga_status,
        version=row.version,
        failure_code=row.failure_code,
        traceparent=row.traceparent,
        waited_seconds=row.waited,
        age_seconds=row.age,
        journal_length=len(journal),
        paused=row.control_state == "PAUSED",
    )


# The lease is still this holder's (the run read by its primary key: status_of_named_row).
LEASE_HELD = (
    "run_id = :run_id AND worker_id = :worker_id AND lease_epoch = :lease_epoch"
    f" AND {status_of_named_row(['RUNNING'])}"
)
# ... and the journal is as long as the holder last saw it: nothing appended since by anyone,
# this holder's own writes included.
HELD_AT = f"{LEASE_HELD} AND jsonb_array_length(saga_steps) = :journal_length"
# ... and no intent recorded by someone else since (the saga status the holder last saw).
FENCE = f"{HELD_AT} AND saga_status = :seen_saga_status"
# The SET clause of every segment write: the identity that write carries.
STAMP = "last_write_id = :write_id"


def lease_params(c: Claim) -> dict[str, Any]:
    return {"run_id": c.run_id, "worker_id": c.worker_id, "lease_epoch": c.lease_epoch}


def fence_params(c: Claim, write_id: uuid.UUID | None = None) -> dict[str, Any]:
    """The parameters of :data:`FENCE` and :data:`STAMP`; ``write_id`` is the write's
    identity (a fresh one when the caller will never ask for it)."""
    return {
        **lease_params(c),
        "seen_saga_status": c.saga_status,
        "journal_length": c.journal_length,
        "write_id": write_id or ids.uuid4(),
    }


_RENEW = PreparedStatement(
    "awooop_renew",
    f"""
UPDATE awooop_run_state
SET lease_until = now() + make_interval(secs => :lease_ttl),
    heartbeat_at = now()
WHERE {LEASE_HELD}
""",
)


def renew(conn: Connection, c: Claim, lease_ttl: float) -> bool:
    """Heartbeat. False: the lease was reaped or re-claimed — stop."""
    return _RENEW.execute(conn, {**lease_params(c), "lease_ttl": lease_ttl}).rowcount == 1


@dataclass(frozen=True)
class Applied:
    """The write committed — on this try, or (``after_lost_reply``) on an earlier one whose
    reply was lost."""

    position: Position
    after_lost_reply: bool = False


@dataclass(frozen=True)
class Intent:
    """The write did not commit: the lease is still the holder's, and an operator or a timer
    recorded an intent meanwhile (``position``: the run now)."""

    position: Position


@dataclass(frozen=True)
class Lost:
    """The write did not commit and the lease is not the holder's to go on with. ``held``:
    the lease row is still the holder's, but the run moved in a way no intent explains —
    the holder hands it back (:func:`release`) rather than leave it to the reaper."""

    held: Position | None = None


_AFTER_MISS = text(
    """
SELECT status, worker_id, lease_epoch, saga_status, failure_code, control_state,
       jsonb_array_length(saga_steps) AS journal_length, last_write_id
FROM awooop_run_state
WHERE run_id = :run_id
"""
)


def after_miss(
    conn: Connection, c: Claim, write_id: uuid.UUID, ends_segment: bool
) -> Applied | Intent | Lost:
    """A segment write (identity ``write_id``, fenced by ``c``) matched no row: which of
    :class:`Applied`, :class:`Intent` or :class:`Lost` happened. A write that continues the
    segment counts as applied only while the lease is still the holder's."""
    row = conn.execute(_AFTER_MISS, {"run_id": c.run_id}).first()
    if row is None:
        return Lost()
    now = Position(
        row.saga_status, row.failure_code, row.control_state == "PAUSED", row.journal_length
    )
    held = (row.status, row.worker_id, row.lease_epoch) == ("RUNNING", c.worker_id, c.lease_epoch)
    if str(row.last_write_id) == str(write_id) and (held or ends_segment):
        return Applied(now, after_lost_reply=True)
    if not held:
        return Lost()
    if now.journal_length == c.journal_length and (now.saga_status, now.paused) != (
        c.saga_status,
        c.paused,
    ):
        return Intent(now)
    return Lost(held=now)


_RELEASE = text(
    f"""
WITH released AS (
    UPDATE awooop_run_state
    SET status = 'PENDING',
        lease_until = NULL,
        worker_id = NULL,
        attempt_count = attempt_count - CAST(:refund AS int),
        available_at = now() + make_interval(secs => :delay),
        enqueued_at = now() + make_interval(secs => :delay),
        version = version + 1,
        updated_at = now()
    WHERE {HELD_AT}
    RETURNING run_id
)
INSERT INTO awooop_run_event
    (run_id, kind, from_status, to_status, trigger, trigger_id, actor, detail)
SELECT run_id, 'lease', 'RUNNING', 'PENDING', 'worker', 'release:' || CAST(:lease_epoch AS text),
       :worker_id, jsonb_build_object('reason', CAST(:reason AS text))
FROM released
"""
)


def release(
    conn: Connection, c: Claim, delay_seconds: float, reason: str, refund: bool = True
) -> bool:
    """Hand the run back, claimable after ``delay_seconds``, fenced by :data:`HELD_AT` (the
    lease, and the journal as long as ``c`` saw it; an intent recorded meanwhile stays for
    the next holder). ``refund``: the claim does not count against the crash budget."""
    params = {
        **lease_params(c),
        "journal_length": c.journal_length,
        "delay": delay_seconds,
        "reason": reason,
        "refund": int(refund),
    }
    return conn.execute(_RELEASE, params).rowcount == 1


# A held run no worker can go on with fails at once with its own code (``:failure_code``),
# instead of being retried by the reaper until its crash budget runs out: one that cannot be
# loaded (E-RUN-001), one whose workflow definition stayed unavailable (E-RUN-003).
_FAIL_CLAIMED = text(
    f"""
WITH failed AS (
    UPDATE awooop_run_state
    SET status = 'FAILED',
        failure_code = :failure_code,
        failure_reason = :reason,
        lease_until = NULL,
        finished_at = now(),
        version = version + 1,
        updated_at = now()
    WHERE {LEASE_HELD}
    RETURNING run_id
)
INSERT INTO awooop_run_event
    (run_id, kind, from_status, to_status, trigger, trigger_id, actor, detail)
SELECT run_id, 'transition', 'RUNNING', 'FAILED', 'worker',
       :cause || ':' || CAST(:lease_epoch AS text), :worker_id,
       jsonb_build_object('failure_code', CAST(:failure_code AS text),
                          'reason', CAST(:reason AS text))
FROM failed
"""
)

UNLOADABLE = "E-RUN-001"
WORKFLOW_UNAVAILABLE = "E-RUN-003"
_CAUSES = {UNLOADABLE: "unloadable", WORKFLOW_UNAVAILABLE: "workflow_unavailable"}


def fail_claimed(
    conn: Connection,
    run_id: uuid.UUID,
    worker_id: str,
    lease_epoch: int,
    failure_code: str,
    reason: str,
) -> bool:
    """End a claimed run no worker can go on with: FAILED ``failure_code`` (E-RUN-001 or
    E-RUN-003), fenced by its lease, with its event (``<cause>:<lease_epoch>``). Nothing is
    compensated: no handler of the run can be called."""
    params = {
        "run_id": run_id,
        "worker_id": worker_id,
        "lease_epoch": lease_epoch,
        "failure_code": failure_code,
        "cause": _CAUSES[failure_code],
        "reason": reason,
    }
    return conn.execute(_FAIL_CLAIMED, params).rowcount == 1


def fail_unloadable(conn: Connection, unloadable: UnloadableRun) -> bool:
    """End a claimed run that cannot be loaded: FAILED ``E-RUN-001``, fenced by its lease."""
    return fail_claimed(
        conn,
        unloadable.run_id,
        unloadable.worker_id,
        unloadable.lease_epoch,
        UNLOADABLE,
        unloadable.reason,
    )


# How long the run has been unavailable: since the first of its current unbroken series of
# hand-backs for want of its workflow definition. The series is broken by anything the run
# did besides being claimed and handed back, so a run that went on after a worker with its
# definition came back starts a fresh series if it is stranded again: a wait or an
# operator's action (an event of another kind than 'lease'), and a journal entry (a step
# recorded writes no event; every entry carries its ``recorded_at``, and the last one is the
# latest). Measured here rather than from ``updated_at`` (every claim and hand-back moves
# it), from rows the hand-backs wrote (durable, whichever worker wrote them), by the
# database's clock, never a worker's.
_UNAVAILABLE_FOR = text(
    """
SELECT GREATEST(0, extract(epoch FROM now() - min(e.at)))::float8 AS seconds
FROM awooop_run_event e
WHERE e.run_id = :run_id
  AND e.kind = 'lease' AND e.detail->>'reason' = 'workflow_unavailable'
  AND e.seq > COALESCE(
      (SELECT max(o.seq) FROM awooop_run_event o WHERE o.run_id = :run_id AND o.kind <> 'lease'),
      0)
  AND e.at > COALESCE(
      (SELECT (r.saga_steps -> -1 ->> 'recorded_at')::timestamptz
       FROM awooop_run_state r WHERE r.run_id = :run_id),
      '-infinity')
"""
)


def unavailable_for(conn: Connection, run_id: uuid.UUID) -> float:
    """Seconds since the run was first handed back for want of its workflow definition, in
    its current series of such hand-backs (0 when this is the first)."""
    seconds = conn.execute(_UNAVAILABLE_FOR, {"run_id": run_id}).scalar()
    return 0.0 if seconds is None else float(seconds)
