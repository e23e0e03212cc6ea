"""Driving one run segment under a lease: claim, then check → run → record, step by step.

The saga's decisions are :mod:`awooop.domain.saga`'s; this module runs handlers and writes
what was decided, each write one statement fenced by the claim's lease. A recorded outcome
is never re-executed after a crash: the journal says what is done. A segment ends when the
run completes, fails after compensation, waits for a retry, needs a person, or the lease is
lost (then nothing more is written).

Someone else may record an intent while a step runs — an operator's pause or cancel, the
run deadline. Every write here is a compare-and-set on where this worker last saw the run
(:data:`awooop.store.leases.FENCE`), so such a write matches no row instead of replacing the
intent. Each goes through one segment commit (:meth:`_Segment.commit`), which says what
happened: the write was applied (on this try, or an earlier one whose reply was lost —
known by the identity the write carries); an intent was recorded meanwhile (the runner
keeps the step's outcome in the journal and decides again from the intent);
or the lease is lost. A miss that no intent explains while the lease is still held, and a
worker that stopped believing in its lease, hand the run back at once. A write the database
refuses for good (not a transient error) sends the run to a person at once (E-RUN-002).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

from sqlalchemy import Connection, Engine, exc

from awooop import db, ids, logs, metrics, telemetry
from awooop.config import Settings
from awooop.domain import saga, states
from awooop.domain import tags as run_tags
from awooop.domain.workflow import Halt, Phase, Reject, StepContext, Unknown, Workflow
from awooop.engine import approvals, fenced, identity, lease, unavailable
from awooop.engine.finisher import Finisher
from awooop.engine.lease import Lease
from awooop.outbound import messages
from awooop.store import approvals as approval_rows
from awooop.store import jsonb, leases, segments, signals
from awooop.workflows import registry

log = logging.getLogger("awooop.engine.runner")

# The run's failure code when the database refused one of its worker's writes for good.
WRITE_REFUSED = "E-RUN-002"


class Outcome(enum.Enum):
    NOT_CLAIMED = "not_claimed"  # someone else holds it, or it is not claimable (a duplicate nudge)
    UNREACHABLE = "database_unreachable"  # the claim's database did not answer: send it again
    COMPLETED = "completed"
    FAILED = "failed"  # compensated (or nothing to compensate) and failed
    CANCELLED = "cancelled"  # an operator cancelled it; compensated
    RETRY_SCHEDULED = "retry_scheduled"  # released until its retry timer
    PAUSED = "paused"  # an operator paused it; handed back at a step boundary
    WAITING_TOOL = "waiting_tool"  # a tool call is out; released until its result
    RESOLVING = "resolving"  # outcome unknown; released until the next resolver poll
    ESCALATED = "escalated"  # waiting for a person (manual intervention)
    WAITING_APPROVAL = "waiting_approval"  # a person must approve; released until then
    LEASE_LOST = "lease_lost"  # reaped or re-claimed while we ran: stopped without writing
    RELEASED = "released"  # this worker cannot run the workflow; handed back for another
    WAITING = "waiting"  # a wait step: released until its signal or its time
    WOKEN = "woken"  # a wait step found its signal as it began to wait: send the run again
    FINISHING = "finishing"  # the last write is the finisher's; it reports how the run ended
    HANDED_BACK = "handed_back"  # an intent met the finish: released at once, send it again


# How a segment ends, by the decision that ended it.
_SEGMENT_ENDS = {
    "complete": Outcome.COMPLETED,
    "compensated": Outcome.FAILED,
    "retry": Outcome.RETRY_SCHEDULED,
    "escalate": Outcome.ESCALATED,
    "wait_tool": Outcome.WAITING_TOOL,
    "resolve": Outcome.RESOLVING,
    "wait_approval": Outcome.WAITING_APPROVAL,
    "wait": Outcome.WAITING,
}
# The run's status after a segment that ended it.
_FINAL_STATUS = {
    Outcome.COMPLETED: states.COMPLETED,
    Outcome.FAILED: states.FAILED,
    Outcome.CANCELLED: states.CANCELLED,
}

# Sends the outbox messages a segment queued (after their statement committed).
Notify = Callable[[list[uuid.UUID]], object]
# The decisions a finisher may write after the task returned (they end the run).
_FINISHES = frozenset({"complete", "compensated"})
# One fenced segment statement: given the claim it is fenced by and its identity, where it
# left the run, or None when it matched no row.
Statement = Callable[[Connection, leases.Claim, uuid.UUID], leases.Position | None]
Committed = leases.Applied | leases.Intent | leases.Lost


def execute(
    engine: Engine,
    settings: Settings,
    run_id: uuid.UUID | str | None,
    notify: Notify | None = None,
    finisher: Finisher | None = None,
) -> Outcome:
    """Claim ``run_id`` (or the oldest claimable run) and drive it as far as it goes.
    ``notify`` is given the ids of outbox messages to send now (the outbox sweep sends any
    it misses). With a ``finisher``, the write that ends the run is left to it
    (:data:`Outcome.FINISHING`), and it reports the run's outcome."""
    me = identity.worker_id()
    # The lease runs from the claim statement's execution: the holder counts it from before
    # the statement was sent (a slow reply must not lengthen its belief).
    claim_sent_at = time.monotonic()
    claim_sent_ns = time.time_ns()  # where the segment's span starts
    # The claim and the segment's writes go through one connection.
    held_conn = db.HeldConnection(engine)
    try:
        return _claim_and_drive(
            engine, held_conn, settings, run_id, notify, finisher, me, claim_sent_at, claim_sent_ns
        )
    finally:
        held_conn.close()


def _claim_and_drive(
    engine: Engine,
    held_conn: db.HeldConnection,
    settings: Settings,
    run_id: uuid.UUID | str | None,
    notify: Notify | None,
    finisher: Finisher | None,
    me: str,
    claim_sent_at: float,
    claim_sent_ns: int,
) -> Outcome:
    try:
        # After a database restart the first statement may meet a connection the server
        # closed: retry the claim once on a fresh one (a claim is a compare-and-set; if the
        # first one committed, the retry finds nothing to claim and the lease expires).
        claim = db.retry_on_disconnect(
            held_conn, lambda conn: leases.claim(conn, me, settings.lease_ttl_seconds, run_id)
        )
    except exc.DBAPIError as error:
        if not fenced.is_transient(error):
            raise
        log.warning(
            "database did not answer the claim; the run's message goes back on the queue",
            extra={
                "action": "claim_unreachable",
                "run_id": str(run_id),
                "worker_id": me,
                "error": type(error.orig).__name__,
            },
        )
        return Outcome.UNREACHABLE
    except leases.UnloadableRun as unloadable:
        with engine.connect() as conn:
            failed = leases.fail_unloadable(conn, unloadable)
        if failed:
            metrics.RUNS_FINISHED.labels(states.FAILED).inc()
            metrics.run_finished(
                unloadable.workflow_name,
                states.FAILED,
                leases.UNLOADABLE,
                unloadable.age_seconds + (time.monotonic() - claim_sent_at),
            )
        log.error(
            "run cannot be loaded; failed",
            extra={
                "action": "run_unloadable",
                "run_id": str(unloadable.run_id),
                "worker_id": me,
                "failure_code": "E-RUN-001",
                "reason": unloadable.reason,
            },
        )
        return Outcome.FAILED
    if claim is None:
        log.info(
            "run not claimable",
            extra={"action": "claim_skipped", "run_id": str(run_id), "worker_id": me},
        )
        return Outcome.NOT_CLAIMED
    metrics.CLAIM_LATENCY.observe(claim.waited_seconds)
    # Every line logged while this worker drives the run — the step handlers' included —
    # carries the run's ids and the trace context it was admitted with.
    # Its span joins the trace the run was admitted in, whichever worker runs it, whenever.
    with (
        logs.bound(**_fields(claim), traceparent=claim.traceparent),
        telemetry.segment(
            claim.workflow_name, claim.traceparent, _span_fields(claim), claim_sent_ns
        ) as span,
    ):
        outcome = _drive(engine, held_conn, settings, claim, notify, finisher, claim_sent_at)
        span.set(outcome=outcome.value)
        return outcome


def _span_fields(claim: leases.Claim) -> dict[str, Any]:
    return {
        **_fields(claim),
        "workflow": claim.workflow_name,
        "workflow_version": claim.workflow_version,
        # claims of the run since it last made progress (counted against max_attempts)
        "claim_attempt": claim.attempt_count,
    }


def _drive(
    engine: Engine,
    held_conn: db.HeldConnection,
    settings: Settings,
    claim: leases.Claim,
    notify: Notify | None,
    finisher: Finisher | None,
    claim_sent_at: float,
) -> Outcome:
    # At DEBUG: a segment's one line at INFO is the one that says how it ended.
    log.debug(
        "run claimed",
        extra={
            **_fields(claim),
            "action": "run_claimed",
            "attempt": claim.attempt_count,
            "waited_s": round(claim.waited_seconds, 3),
        },
    )

    try:
        workflow = registry.get(claim.workflow_name, claim.workflow_version)
    except registry.UnknownWorkflow:
        workflow = None
    if workflow is None or workflow.digest != claim.workflow_digest:
        # handed back, or failed E-RUN-003 once unavailable for too long
        return Outcome(unavailable.hand_back_or_fail(engine, settings, claim))

    lease_ttl = workflow.lease_ttl_seconds or settings.lease_ttl_seconds
    held = Lease(
        engine, claim, lease_ttl, settings.heartbeat_interval_seconds, granted_at=claim_sent_at
    )
    if lease_ttl != settings.lease_ttl_seconds and not held.renew_now():
        return Outcome.LEASE_LOST
    keeper = lease.keeper()
    keeper.hold(held)
    segment = _Segment(engine, held_conn, settings, notify, held, claim, finisher)
    try:
        return _run_steps(workflow, segment)
    except fenced.GaveUp as gave_up:
        return _gave_up(segment, gave_up)
    finally:
        keeper.drop(held)


def _gave_up(segment: _Segment, gave_up: fenced.GaveUp) -> Outcome:
    """The database kept failing a write: hand the run back."""
    if not segment.held.believed():
        log.warning(
            "lease lost while the database refused a write",
            extra={**_fields(segment.claim), "action": "lease_lost", "reason": str(gave_up)},
        )
        # the lease may still be ours if only our belief in it expired (one try: the
        # database has just failed this worker's write again and again)
        fenced.hand_back(segment.engine, segment.settings, segment.claim, "lease_lost", retry=False)
        return Outcome.LEASE_LOST
    return _give_back(segment.engine, segment.claim, gave_up)


def _give_back(engine: Engine, claim: leases.Claim, gave_up: fenced.GaveUp) -> Outcome:
    """The database kept failing a fenced write: hand the run back (fenced) so another worker
    can claim it at once rather than after the lease expires and the reaper passes. If even
    that fails, the lease and the reaper recover it."""
    fields = _fields(claim)
    try:
        with engine.connect() as conn:
            released = leases.release(conn, claim, 0.0, "database_unavailable", refund=False)
    except Exception:
        released = False
        log.exception("could not hand the run back", extra={**fields, "action": "release_failed"})
    log.error(
        "database unavailable; run handed back",
        extra={**fields, "action": "run_released", "reason": str(gave_up), "released": released},
    )
    return Outcome.RELEASED


class _WriteRefused(Exception):
    """The database refused a fenced write for good (not a transient error)."""

    def __init__(self, what: str, error: exc.DBAPIError) -> None:
        super().__init__(f"{what}: {type(error.orig).__name__}: {error.orig}")
        self.what = what
        self.error = error


class _Segment:
    """The segment being driven: the claim as the holder last saw the run, and what
    committing a write needs beyond it."""

    def __init__(
        self,
        engine: Engine,
        held_conn: db.HeldConnection,
        settings: Settings,
        notify: Notify | None,
        held: Lease,
        claim: leases.Claim,
        finisher: Finisher | None = None,
    ) -> None:
        self.engine = engine
        self.held_conn = held_conn  # the segment's writes
        self.finisher = finisher
        self.settings = settings
        self.notify = notify
        self.held = held
        self.claim = claim
        # A wait step's release found its signal already there: the run wants a new message.
        self.woken = False
        self.claimed_at = time.monotonic()

    def run_age(self) -> float:
        """Seconds since the run's admission: its age at the claim (the database's clock),
        plus the time this segment has taken since."""
        return self.claim.age_seconds + (time.monotonic() - self.claimed_at)

    def commit(self, statement: Statement, what: str, ends_segment: bool) -> Committed:
        """Commit one fenced write under a fresh identity, retried on transient errors while
        the lease may still be held, and say what happened:

        - :class:`~awooop.store.leases.Applied`: it committed (on this try, or an earlier one
          whose reply was lost); the claim moves to where it left the run;
        - :class:`~awooop.store.leases.Intent`: the lease is still ours and an operator or a
          timer recorded an intent meanwhile; the claim moves to the run as it is now;
        - :class:`~awooop.store.leases.Lost`: the lease is gone — or still ours but the run
          moved in a way no intent explains, and then the run is handed back at once.

        ``ends_segment``: no renewal is in flight while it runs (so none races it into a
        false "lease lost"); renewals start again if an intent lets the segment go on.
        :class:`_WriteRefused` when the database refused the write for good."""
        claim, write_id = self.claim, ids.uuid4()
        if ends_segment:
            lease.keeper().drop(self.held)
        try:
            written, _ = fenced.run_with_retries(
                self.held_conn,
                self.settings,
                lambda conn: statement(conn, claim, write_id),
                what,
                self.held.unbelieved,
            )
            result: Committed
            if written is not None:
                result = leases.Applied(written)
            else:
                result, _ = fenced.run_with_retries(
                    self.held_conn,
                    self.settings,
                    lambda conn: leases.after_miss(conn, claim, write_id, ends_segment),
                    "after_miss",
                    self.held.unbelieved,
                )
        except exc.DBAPIError as error:  # transient errors were retried (or gave up)
            raise _WriteRefused(what, error) from error
        if isinstance(result, leases.Lost):
            self._stop(result)
            return result
        if isinstance(result, leases.Intent):
            log.info(
                "intent recorded while the step ran; deciding again",
                extra={
                    **_fields(claim),
                    "action": "intent_noticed",
                    "saga_status": result.position.saga_status,
                    "failure_code": result.position.failure_code,
                    "paused": result.position.paused,
                },
            )
            if ends_segment:
                lease.keeper().hold(self.held)  # the segment goes on: keep renewing
        self.claim = claim.advanced(result.position)
        # The keeper's view of the claim follows, so a release it makes is fenced where the
        # runner last saw the run.
        self.held.claim = self.claim
        return result

    def _stop(self, lost: leases.Lost) -> None:
        """A write matched no row and the lease is not ours to go on with (counted once,
        where noticed first). A lease row still ours is handed back now."""
        if not self.held.lost.is_set():
            self.held.lost.set()
            metrics.LEASE_LOSSES.labels("write").inc()
        if lost.held is not None:
            fenced.hand_back(
                self.engine, self.settings, self.claim.advanced(lost.held), "unexplained_change"
            )
        log.warning(
            "lease lost; result discarded", extra={**_fields(self.claim), "action": "lease_lost"}
        )

    def send(self, message_ids: list[uuid.UUID]) -> None:
        if message_ids and self.notify is not None:
            self.notify(message_ids)


def _run_steps(workflow: Workflow, segment: _Segment) -> Outcome:
    fields = _fields(segment.claim)
    journal = list(segment.claim.saga_steps)
    entry: dict[str, Any] | None = None
    # The step after the last decision's entries, when deciding worked it out.
    planned: saga.Next | None = None
    try:
        while True:
            entry = None
            upcoming, planned = planned, None
            claim = segment.claim
            # An operator cancelled, or the deadline passed: settle a step in doubt (poll
            # its resolver, wait for its tool result, or ask a person), then turn back over
            # what happened. No other step runs first.
            cancelling = None
            if claim.position.cancelling and saga.frozen_plan(journal) is None:
                cancelling = saga.Cancel.of(claim.position.cause)
            settling = saga.next_step(workflow, journal, cancelling) if cancelling else None
            if cancelling is not None and settling is None:
                decision = saga.cancel(workflow, journal, cancelling.code, cancelling.reason)
                nxt = None
            elif claim.paused:
                paused = segment.commit(_pause_release, "pause_release", ends_segment=True)
                if isinstance(paused, leases.Lost):
                    return Outcome.LEASE_LOST
                if isinstance(paused, leases.Intent):  # resumed, or cancelled, meanwhile
                    continue
                log.info("run paused at a step boundary", extra={**fields, "action": "run_paused"})
                return Outcome.PAUSED
            else:
                nxt = settling or upcoming or saga.next_step(workflow, journal)
                if nxt is None:
                    # Finishing statements record the last outcome themselves, so a claimed
                    # run always has something left to do.
                    raise AssertionError(f"run {claim.run_id} claimed with nothing left to do")
                runs_handler = not (nxt.step.is_tool or nxt.step.is_wait)
                if nxt.phase == saga.FORWARD and nxt.step.timeout and runs_handler:
                    arm = functools.partial(
                        _arm_step_timeout,
                        step=nxt.step.name,
                        attempt=nxt.attempt,
                        timeout=nxt.step.timeout,
                    )
                    armed = segment.commit(arm, "arm_step_timeout", ends_segment=False)
                    if isinstance(armed, leases.Lost):
                        return Outcome.LEASE_LOST
                    if isinstance(armed, leases.Intent):
                        continue
                if nxt.phase == saga.FORWARD and not nxt.step.timeout and runs_handler:
                    # The deployment's default timeout, armed by the keeper if the step runs long.
                    timeout = segment.settings.step_timeout_seconds
                    segment.held.running(nxt.step.name, nxt.attempt, timeout)
                try:
                    with _step_span(nxt) as span:
                        if nxt.step.is_wait:
                            entry = _attempt_wait(segment, nxt, journal)
                        else:
                            entry = _attempt(
                                segment.claim, nxt, journal, segment.held, span.traceparent
                            )
                        _end_step_span(span, entry)
                finally:
                    segment.held.step_ended()
                if not segment.held.believed():
                    log.warning(
                        "lease lost during step; result not recorded",
                        extra={**fields, "action": "lease_lost", "step": nxt.step.name},
                    )
                    # Only this worker's belief may have expired: if the lease row is still
                    # its own, hand the run back now rather than after the lease expires.
                    fenced.hand_back(segment.engine, segment.settings, segment.claim, "lease_lost")
                    return Outcome.LEASE_LOST
                decision = saga.decide(workflow, journal, nxt, entry, cancelling=cancelling)
            if segment.finisher is not None and decision.kind in _FINISHES:
                finish = functools.partial(
                    _finish, workflow, segment, list(journal), nxt, decision, entry
                )
                segment.finisher.submit(segment.claim.run_id, finish)
                return Outcome.FINISHING
            done = _commit_decision(
                workflow, segment, journal, nxt, decision, ends_segment=not decision.continues
            )
            if isinstance(done, leases.Lost):
                return Outcome.LEASE_LOST
            if isinstance(done, leases.Intent):
                if entry is not None:
                    # The step ran: keep what it did, then act on the new intent.
                    kept = _keep_step(segment, workflow, journal, decision)
                    if kept is None:
                        return Outcome.LEASE_LOST
                    journal += kept
                continue
            if decision.kind == "wait_approval" and done.after_lost_reply:
                _send_unsent_prompts(segment)
            journal += decision.entries
            planned = decision.upcoming
            if not decision.continues:
                return _ended(segment, decision)
    except _WriteRefused as refused:
        return _escalate_refused(segment, entry, refused)


def _commit_decision(
    workflow: Workflow,
    segment: _Segment,
    journal: list[dict[str, Any]],
    nxt: saga.Next | None,
    decision: saga.Decision,
    ends_segment: bool,
) -> Committed:
    """Write ``decision`` (the step's outcome and what it leads to) under the fence."""
    record = functools.partial(
        _record_decision, workflow=workflow, journal=journal, nxt=nxt, d=decision, segment=segment
    )
    return segment.commit(record, decision.kind, ends_segment=ends_segment)


def _keep_step(
    segment: _Segment,
    workflow: Workflow,
    journal: list[dict[str, Any]],
    decision: saga.Decision,
) -> list[dict[str, Any]] | None:
    """An intent kept ``decision`` from being written: record what the step did (not the plan
    it led to). The entries kept, or None: the lease is gone."""
    kept = [e for e in decision.entries if e.get("phase") != saga.PLAN]
    return kept if _keep_outcome(segment, workflow, journal, kept) else None


def _ended(segment: _Segment, decision: saga.Decision) -> Outcome:
    """The segment's decision ``decision`` committed and ended it: count and log how."""
    outcome = _SEGMENT_ENDS[decision.kind]
    if decision.kind == "wait" and segment.woken:
        outcome = Outcome.WOKEN
    if outcome is Outcome.FAILED and decision.failure_code == saga.CANCELLED:
        outcome = Outcome.CANCELLED
    if outcome in _FINAL_STATUS:
        metrics.RUNS_FINISHED.labels(_FINAL_STATUS[outcome]).inc()
        metrics.run_finished(
            segment.claim.workflow_name,
            _FINAL_STATUS[outcome],
            decision.failure_code,
            segment.run_age(),
        )
    log.info(
        "run segment ended",
        extra={
            **_fields(segment.claim),
            "action": f"run_{outcome.value}",
            "failure_code": decision.failure_code,
            "workflow": segment.claim.workflow_name,
            "attempt": segment.claim.attempt_count,
            "waited_s": round(segment.claim.waited_seconds, 3),
            "took_s": round(time.monotonic() - segment.claimed_at, 3),
        },
    )
    return outcome


def _finish(
    workflow: Workflow,
    segment: _Segment,
    journal: list[dict[str, Any]],
    nxt: saga.Next | None,
    decision: saga.Decision,
    entry: dict[str, Any] | None,
    conn: db.HeldConnection,
) -> Outcome:
    """The finisher's part of a segment: the write that ends the run, on the finisher's
    connection and thread, after the task returned. An intent recorded meanwhile keeps the
    step's outcome and hands the run back at once (:data:`Outcome.HANDED_BACK`)."""
    segment.held_conn = conn
    claim = segment.claim
    with logs.bound(**_fields(claim), traceparent=claim.traceparent):
        try:
            try:
                done = _commit_decision(
                    workflow, segment, journal, nxt, decision, ends_segment=True
                )
                if isinstance(done, leases.Lost):
                    return Outcome.LEASE_LOST
                if isinstance(done, leases.Applied):
                    return _ended(segment, decision)
                if entry is not None and _keep_step(segment, workflow, journal, decision) is None:
                    return Outcome.LEASE_LOST
            except _WriteRefused as refused:
                return _escalate_refused(segment, entry, refused)
            lease.keeper().drop(segment.held)
            fenced.hand_back(segment.engine, segment.settings, segment.claim, "intent_noticed")
            return Outcome.HANDED_BACK
        except fenced.GaveUp as gave_up:
            return _gave_up(segment, gave_up)
        finally:
            lease.keeper().drop(segment.held)


def _send_unsent_prompts(segment: _Segment) -> None:
    """An approval request committed but its reply was lost, and with it the prompt's
    message ids: send the run's unsent prompts now (the outbox sweep sends them otherwise)."""
    try:
        with segment.engine.connect() as conn:
            segment.send(approval_rows.unsent_prompts(conn, segment.claim.run_id))
    except exc.DBAPIError:
        log.warning(
            "could not look up the approval prompt to send; the outbox sweep sends it",
            exc_info=True,
            extra={**_fields(segment.claim), "action": "prompt_lookup_failed"},
        )


def _pause_release(
    conn: Connection, claim: leases.Claim, write_id: uuid.UUID
) -> leases.Position | None:
    return segments.pause_release(conn, claim, write_id=write_id)


def _arm_step_timeout(
    conn: Connection,
    claim: leases.Claim,
    write_id: uuid.UUID,
    *,
    step: str,
    attempt: int,
    timeout: float,
) -> leases.Position | None:
    return segments.arm_step_timeout(conn, claim, step, attempt, timeout, write_id=write_id)


def _keep_outcome(
    segment: _Segment,
    workflow: Workflow,
    journal: list[dict[str, Any]],
    entries: list[dict[str, Any]],
) -> bool:
    """Record a step's outcome as a plain step record, when the decision it led to can no
    longer be written because of an intent recorded meanwhile (again after each further
    intent). False: the lease is gone."""
    upcoming = saga.next_step(workflow, [*journal, *entries])

    def record(
        conn: Connection, claim: leases.Claim, write_id: uuid.UUID
    ) -> leases.Position | None:
        return segments.record_step(
            conn,
            claim,
            entries,
            next_step=upcoming.step.name if upcoming else None,
            write_id=write_id,
        )

    while True:
        kept = segment.commit(record, "record", ends_segment=False)
        if not isinstance(kept, leases.Intent):
            return isinstance(kept, leases.Applied)


# What an escalated attempt's journal entry keeps of the outcome the database refused.
_ATTEMPT_IDENTITY = (
    "step",
    "index",
    "phase",
    "attempt",
    "claim",
    "lease_epoch",
    "worker_id",
    "effect_id",
    "command_id",
)


def _escalate_refused(
    segment: _Segment, entry: dict[str, Any] | None, refused: _WriteRefused
) -> Outcome:
    """The database refused a write for good: retrying it would fail the same way, so the run
    goes to a person at once, under its fence (E-RUN-002). The attempt whose outcome could
    not be recorded is journaled HALTED (its identity stays taken); a person's retry runs it
    again."""
    claim = segment.claim
    reason = _storable(f"the database refused to record {refused}")[:1000]
    log.error(
        "the database refused a write; run escalated",
        extra={**_fields(claim), "action": "write_refused", "failure_code": WRITE_REFUSED},
    )
    entries = []
    if entry is not None:
        halted = {k: entry[k] for k in _ATTEMPT_IDENTITY if k in entry}
        entries = [{**halted, "status": saga.HALTED, "error": reason}]

    def escalate(conn: Connection, c: leases.Claim, write_id: uuid.UUID) -> leases.Position | None:
        return segments.escalate(conn, c, entries, WRITE_REFUSED, reason, write_id=write_id)

    while True:
        try:
            escalated = segment.commit(escalate, "escalate", ends_segment=True)
        except _WriteRefused:
            raise refused.error from None
        if isinstance(escalated, leases.Applied):
            return Outcome.ESCALATED
        if isinstance(escalated, leases.Lost):
            return Outcome.LEASE_LOST


def _identity(claim: leases.Claim, nxt: saga.Next) -> dict[str, Any]:
    """The journal entry of an attempt, before its outcome: who made it, under which lease."""
    return saga.attempt_identity(
        claim.run_id,
        nxt,
        claim=claim.attempt_count,
        lease_epoch=claim.lease_epoch,
        worker_id=claim.worker_id,
    )


def _attempt_wait(
    segment: _Segment, nxt: saga.Next, journal: list[dict[str, Any]]
) -> dict[str, Any]:
    """A wait step's attempt: take its signal if it came, end the wait if its time is up,
    or wait (again) — timed by the database's clock."""
    wait = nxt.step.wait
    assert wait is not None
    after = saga.signals_taken(journal, wait.signal) if wait.signal else 0
    found, _ = fenced.run_with_retries(
        segment.engine,
        segment.settings,
        lambda conn: signals.next_for_wait(conn, segment.claim.run_id, wait.signal, after),
        "wait_lookup",
        segment.held.unbelieved,
    )
    entry = _identity(segment.claim, nxt)
    entry.update(saga.wait_outcome(journal, nxt, found.signal, found.now))
    return entry


def _step_span(nxt: saga.Next) -> contextlib.AbstractContextManager[telemetry.Span]:
    """The span of one step attempt (inert when tracing is off)."""
    return telemetry.step(
        nxt.step.name, {"step": nxt.step.name, "phase": nxt.phase, "step_attempt": nxt.attempt}
    )


def _end_step_span(span: telemetry.Span, entry: dict[str, Any]) -> None:
    status = entry.get("status")  # as the journal says it: SUCCEEDED, FAILED, REJECTED, ...
    span.set(outcome=status, effect_id=entry.get("effect_id"))
    if status in (saga.FAILED, saga.HALTED):
        span.fail(str(entry.get("error") or status))


def _attempt(
    claim: leases.Claim,
    nxt: saga.Next,
    journal: list[dict[str, Any]],
    held: Lease,
    traceparent: str | None = None,
) -> dict[str, Any]:
    """Run the handler once; the journal entry describing what happened. ``traceparent``:
    the step's span, handed to the handler as ``ctx.traceparent``."""
    entry = jsonb.JournalEntry(_identity(claim, nxt))
    ctx = StepContext(
        run_id=str(claim.run_id),
        project_id=claim.project_id,
        input=claim.input,
        outputs=saga.forward_outputs(journal),
        step=nxt.step.name,
        attempt=nxt.attempt,
        effect_id=entry["effect_id"],
        command_id=entry["command_id"],
        phase=cast(Phase, nxt.phase),
        traceparent=traceparent,
        _heartbeat=held.renew_now,
        _lease_held=held.believed,
        lease_lost=held.lost,
        run_tags=run_tags.of_journal(journal),
    )
    if nxt.step.is_approval and nxt.phase == saga.FORWARD:
        decided = saga.approval_decision(journal, nxt)
        if decided is not None:  # a person (or the expiry timer) decided this attempt
            entry.update(approvals.outcome_entry(nxt.step, decided))
            return entry
    if nxt.step.is_tool and nxt.phase == saga.FORWARD:
        delivered = saga.tool_result(journal, nxt)
        if delivered is not None:  # the call's result came in: it is this attempt's outcome
            entry.update(status=delivered["status"], tool_event_id=delivered.get("event_id"))
            entry.update({k: delivered[k] for k in ("output", "error") if k in delivered})
            return entry
        if saga.dispatched(journal, nxt):  # the call is out: wait for it, never send it twice
            entry.update(status=saga.DISPATCHED, late_result=nxt.step.late_result)
            return entry
    handler = {
        saga.FORWARD: nxt.step.handler,
        saga.COMPENSATE: nxt.step.compensate,
        saga.RESOLVE: nxt.step.resolver.check if nxt.step.resolver else None,
    }[nxt.phase]
    if handler is None:  # only a resolve without a resolver (an operator's retry)
        entry.update(status=saga.UNKNOWN, error="this step has no resolver")
        return entry
    started = time.monotonic()
    try:
        output = _tagged(entry, ctx, handler)
    except Reject as exc:
        entry.update(status=saga.REJECTED, error=_storable(str(exc) or "rejected"))
    except Halt as exc:
        entry.update(status=saga.HALTED, error=_storable(str(exc) or "halted"))
    except Unknown as exc:
        entry.update(status=saga.UNKNOWN, error=_storable(str(exc) or "outcome unknown"))
    except Exception as exc:
        entry.update(status=saga.FAILED, error=_storable(f"{type(exc).__name__}: {exc}")[:1000])
        policy = nxt.step.retry if nxt.phase == saga.FORWARD else nxt.step.compensation_retry
        if isinstance(exc, run_tags.TagError) or not policy.retries(exc):
            entry["retryable"] = False
    else:
        try:
            output_text = _json_text(output)
        except _NotStorable as unstorable:
            # The handler returned, so its effect happened: running it again would repeat
            # the effect, so this is not a transient failure. Stop the step with its own code.
            entry.update(
                status=saga.FAILED,
                retryable=False,
                failure_code=saga.OUTPUT_NOT_JSON,
                error=_storable(f"the step's return value cannot be stored as JSON: {unstorable}")[
                    :1000
                ],
            )
            return entry
        dispatched = nxt.step.is_tool and nxt.phase == saga.FORWARD
        if nxt.step.is_approval and nxt.phase == saga.FORWARD and output is None:
            entry.update(status=saga.SUCCEEDED, output={"needed": False})
            return entry
        if nxt.step.is_approval and nxt.phase == saga.FORWARD:  # the handler wrote the prompt
            prompt = output if isinstance(output, str) else json.dumps(output)
            entry.update(status=saga.REQUESTED, output={"prompt": prompt[:4000]})
            return entry
        entry["status"] = saga.DISPATCHED if dispatched else saga.SUCCEEDED
        entry.set_output(output, output_text)  # written as this text: encoded once
        if dispatched:
            entry["late_result"] = nxt.step.late_result
    elapsed = time.monotonic() - started
    entry["duration_ms"] = round(elapsed * 1000, 3)
    metrics.STEP_DURATION.labels(
        claim.workflow_name, nxt.step.name, nxt.phase, entry["status"]
    ).observe(elapsed)
    return entry


def _tagged(entry: dict[str, Any], ctx: StepContext, handler: Callable[[StepContext], Any]) -> Any:
    """Call ``handler``; the tags it set go into the attempt's journal entry whatever it
    returned or raised, so they are written with the attempt's record — by the same fenced
    statement, so a worker that lost the run writes no tag."""
    try:
        return handler(ctx)
    finally:
        if ctx.tags_set:
            entry["tags"] = dict(ctx.tags_set)


# A NUL escape in JSON text: ``\u0000`` after an even run of backslashes (an odd run of
# backslashes before "u0000" is an escape, not an escaped backslash followed by text).
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class _NotStorable(ValueError):
    """A step's return value the journal (PostgreSQL's jsonb) cannot hold; says why."""


def _json_text(output: Any) -> str:
    """``output`` as JSON text jsonb can hold; :class:`_NotStorable` when it is not JSON at
    all, or text jsonb refuses — the character U+0000, a lone surrogate."""
    try:
        text = json.dumps(output, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise _NotStorable(f"{type(exc).__name__}: {exc}") from None
    # The regular expression costs about four times the encoding (it looks behind at every
    # character): it is asked only of a text that holds the escape at all.
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise _NotStorable("it holds the character U+0000, which PostgreSQL cannot store")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _NotStorable("it holds a lone surrogate, which PostgreSQL cannot store") from None
    return text


def _storable(text: str) -> str:
    """``text`` with what PostgreSQL cannot store in text or jsonb spelled out: U+0000 as
    ``\\u0000``, a lone surrogate as its escape."""
    return text.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def _record_decision(
    conn: Connection,
    claim: leases.Claim,
    write_id: uuid.UUID,
    workflow: Workflow,
    journal: list[dict[str, Any]],
    nxt: saga.Next | None,
    d: saga.Decision,
    segment: _Segment,
) -> leases.Position | None:
    """Record ``d`` in one fenced statement of identity ``write_id``: where it left the run,
    or None when it matched no row."""
    after = [*journal, *d.entries]
    upcoming = d.upcoming or saga.next_step(workflow, after)
    if d.kind == "record":
        return segments.record_step(
            conn,
            claim,
            d.entries,
            next_step=upcoming.step.name if upcoming else None,
            write_id=write_id,
        )
    if d.kind == "wait_approval":
        assert nxt is not None
        asked = approvals.request(
            conn, claim, nxt.step, nxt.attempt, d.entries, segment.settings, write_id
        )
        if asked is None:
            return None
        waiting, prompts = asked
        segment.send(prompts)
        return waiting
    if d.kind == "wait":
        assert nxt is not None and nxt.step.wait is not None
        signal = nxt.step.wait.signal
        taken = saga.signals_taken(journal, signal) if signal else 0
        waited = segments.wait(
            conn,
            claim,
            d.entries,
            nxt.step.name,
            nxt.attempt,
            d.delay,
            signal,
            taken,
            write_id=write_id,
        )
        if waited is None:
            return None
        position, segment.woken = waited
        return position
    report = any(s.is_approval for s in workflow.steps)
    return _change_state(conn, claim, write_id, upcoming, nxt, d, report)


def _outcome_messages(claim: leases.Claim, status: str, code: str | None) -> list[Any]:
    """A run that asked people for approval tells them how it ended."""
    targets = messages.reply_targets(claim.input)
    return messages.outcome_messages(
        targets, run_id=str(claim.run_id), status=status, failure_code=code
    )


def _change_state(
    conn: Connection,
    claim: leases.Claim,
    write_id: uuid.UUID,
    upcoming: saga.Next | None,
    nxt: saga.Next | None,
    d: saga.Decision,
    report: bool,
) -> leases.Position | None:
    """The statement of a decision that changes the run's state: turn back, finish, release
    until a retry or a resolver poll, wait for a tool, escalate."""
    if d.kind == "turn_back":
        assert upcoming is not None
        return segments.turn_back(
            conn,
            claim,
            d.entries,
            upcoming.step.name,
            d.failure_code or "",
            d.failure_reason or "",
            write_id=write_id,
        )
    if d.kind == "complete":
        return segments.finish(
            conn,
            claim,
            d.entries,
            to_status=states.COMPLETED,
            saga_status="COMPLETED",
            output=d.output,
            messages=_outcome_messages(claim, states.COMPLETED, None) if report else [],
            write_id=write_id,
        )
    if d.kind == "compensated":
        cancelled = d.failure_code == saga.CANCELLED
        to_status = states.CANCELLED if cancelled else states.FAILED
        return segments.finish(
            conn,
            claim,
            d.entries,
            messages=_outcome_messages(claim, to_status, d.failure_code) if report else [],
            to_status=to_status,
            saga_status="COMPENSATED",
            failure_code=d.failure_code,
            failure_reason=d.failure_reason,
            write_id=write_id,
        )
    if d.kind == "retry":
        assert nxt is not None
        return segments.retry_later(
            conn,
            claim,
            d.entries,
            d.delay,
            nxt.step.name,
            nxt.phase,
            nxt.attempt,
            write_id=write_id,
        )
    if d.kind == "resolve":
        assert nxt is not None
        # The wake-up for the next resolver poll, named by the attempt that asked for it:
        # the forward attempt whose outcome was unknown, or the poll that could not tell.
        return segments.retry_later(
            conn,
            claim,
            d.entries,
            d.delay,
            nxt.step.name,
            nxt.phase,
            nxt.attempt,
            saga_status="WAITING_RESOLUTION",
            write_id=write_id,
        )
    if d.kind == "wait_tool":
        assert nxt is not None
        return segments.wait_for_tool(
            conn, claim, d.entries, nxt.step.name, nxt.attempt, d.delay, write_id=write_id
        )
    if d.kind == "escalate":
        return segments.escalate(
            conn,
            claim,
            d.entries,
            d.failure_code or "",
            d.failure_reason or "",
            write_id=write_id,
        )
    raise AssertionError(f"unknown decision {d.kind}")


def _fields(claim: leases.Claim) -> dict[str, Any]:
    return {
        "run_id": str(claim.run_id),
        "project_id": claim.project_id,
        "worker_id": claim.worker_id,
        "lease_epoch": claim.lease_epoch,
    }
