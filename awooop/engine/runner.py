"""Driving one run segment under a lease: claim, then check → run → record, step by step.

The saga's decisions are :mod:`awooop.domain.saga`'s; this module runs handlers and writes
what was decided, each write one statement fenced by the claim's lease. A recorded outcome
is never re-executed after a crash: the journal says what is done. A segment ends when the
run completes, fails after compensation, waits for a retry, needs a person, or the lease is
lost (then nothing more is written).

Someone else may record an intent while a step runs — an operator's cancel, the run
deadline. Every write here is a compare-and-set on where this worker last saw the run
(:data:`awooop.store.leases.FENCE`), so such a write matches no row instead of replacing the
intent; the runner then reads the run back, keeps the step's outcome in the journal and
decides again from the intent (DESIGN §9.2).
"""

from __future__ import annotations

import enum
import functools
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine

from awooop import db, logs, metrics
from awooop.config import Settings
from awooop.domain import saga, states
from awooop.domain.workflow import Halt, Reject, StepContext, Unknown, Workflow
from awooop.engine import approvals, fenced, identity, lease
from awooop.engine.lease import Lease
from awooop.outbound import messages
from awooop.store import leases, segments
from awooop.workflows import registry

log = logging.getLogger("awooop.engine.runner")

WORKFLOW_UNAVAILABLE_RETRY_SECONDS = 60.0


class Outcome(enum.Enum):
    NOT_CLAIMED = "not_claimed"  # someone else holds it, or it is not claimable (a duplicate nudge)
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


# How a segment ends, by the decision that ended it.
_SEGMENT_ENDS = {
    "complete": Outcome.COMPLETED,
    "compensated": Outcome.FAILED,
    "retry": Outcome.RETRY_SCHEDULED,
    "escalate": Outcome.ESCALATED,
    "wait_tool": Outcome.WAITING_TOOL,
    "resolve": Outcome.RESOLVING,
    "wait_approval": Outcome.WAITING_APPROVAL,
}
# The run's status after a segment that ended it.
_FINAL_STATUS = {
    Outcome.COMPLETED: states.COMPLETED,
    Outcome.FAILED: states.FAILED,
    Outcome.CANCELLED: states.CANCELLED,
}

# Sends the outbox messages a segment queued (after their statement committed).
Notify = Callable[[list[uuid.UUID]], object]
_T = TypeVar("_T")


def execute(
    engine: Engine,
    settings: Settings,
    run_id: uuid.UUID | str | None,
    notify: Notify | None = None,
) -> Outcome:
    """Claim ``run_id`` (or the oldest claimable run) and drive it as far as it goes.
    ``notify`` is given the ids of outbox messages to send now (the outbox sweep sends any
    it misses)."""
    me = identity.worker_id()
    try:
        # After a database restart the first statement may meet a connection the server
        # closed: retry the claim once on a fresh one (a claim is a compare-and-set; if the
        # first one committed, the retry finds nothing to claim and the lease expires).
        claim = db.retry_on_disconnect(
            engine, lambda conn: leases.claim(conn, me, settings.lease_ttl_seconds, run_id)
        )
    except leases.UnloadableRun as unloadable:
        with engine.connect() as conn:
            if leases.fail_unloadable(conn, unloadable):
                metrics.RUNS_FINISHED.labels(states.FAILED).inc()
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
    with logs.bound(**_fields(claim), traceparent=claim.traceparent):
        return _drive(engine, settings, claim, notify)


def _drive(
    engine: Engine, settings: Settings, claim: leases.Claim, notify: Notify | None
) -> Outcome:
    fields = _fields(claim)
    log.info(
        "run claimed",
        extra={
            **fields,
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
        log.error(
            "workflow definition missing or changed in this worker; run handed back",
            extra={
                **fields,
                "action": "workflow_unavailable",
                "workflow": f"{claim.workflow_name}:v{claim.workflow_version}",
            },
        )
        with engine.connect() as conn:
            leases.release(conn, claim, WORKFLOW_UNAVAILABLE_RETRY_SECONDS, "workflow_unavailable")
        return Outcome.RELEASED

    lease_ttl = workflow.lease_ttl_seconds or settings.lease_ttl_seconds
    held = Lease(engine, claim, lease_ttl, settings.heartbeat_interval_seconds)
    if lease_ttl != settings.lease_ttl_seconds and not held.renew_now():
        return Outcome.LEASE_LOST
    keeper = lease.keeper()
    keeper.hold(held)
    try:
        return _run_steps(engine, claim, workflow, held, _Segment(engine, settings, notify, held))
    except fenced.GaveUp as gave_up:
        if held.lost.is_set():  # nothing to give back: the run is someone else's now
            log.warning(
                "lease lost while the database refused a write",
                extra={**_fields(claim), "action": "lease_lost", "reason": str(gave_up)},
            )
            return Outcome.LEASE_LOST
        return _give_back(engine, claim, gave_up)
    finally:
        keeper.drop(held)


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


class _Segment:
    """What writing a segment's decisions needs beyond the claim."""

    def __init__(
        self, engine: Engine, settings: Settings, notify: Notify | None, held: Lease
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.notify = notify
        self.held = held

    def write(self, statement: Callable[[Connection], _T], what: str) -> tuple[_T, bool]:
        """One fenced statement, retried on transient errors while the lease may still be
        held: (its result, retried)."""
        return fenced.write(self.engine, self.settings, statement, what, self.held.lost.is_set)

    def send(self, message_ids: list[uuid.UUID]) -> None:
        if message_ids and self.notify is not None:
            self.notify(message_ids)


def _run_steps(
    engine: Engine, claim: leases.Claim, workflow: Workflow, held: Lease, segment: _Segment
) -> Outcome:
    fields = _fields(claim)
    journal = list(claim.saga_steps)
    steering = segments.Steering.of(claim.saga_status, claim.failure_code, claim.paused)
    while True:
        entry: dict[str, Any] | None = None
        if steering.cancelling and saga.frozen_plan(journal) is None:
            # An operator cancelled, or the deadline passed: turn back over what succeeded
            # (no step runs first).
            code = steering.cause or saga.CANCELLED
            reason = (
                "the run deadline passed" if code == saga.DEADLINE else "cancelled by an operator"
            )
            decision = saga.cancel(workflow, journal, code, reason)
            nxt = None
        elif steering.paused:
            lease.keeper().drop(held)  # no renewal in flight races the segment's last write
            paused, retried = segment.write(
                functools.partial(segments.pause_release, c=claim), "pause_release"
            )
            if not paused and retried:
                paused = _landed(segment, claim, 0, ends_segment=True) is not None
            if not paused:
                lease.keeper().hold(held)
                moved = _moved_meanwhile(segment, claim, held)
                if moved is None:
                    return Outcome.LEASE_LOST
                claim, steering = moved
                continue
            log.info("run paused at a step boundary", extra={**fields, "action": "run_paused"})
            return Outcome.PAUSED
        else:
            nxt = saga.next_step(workflow, journal)
            if nxt is None:
                # Finishing statements record the last outcome themselves, so a claimed run
                # always has something left to do.
                raise AssertionError(f"run {claim.run_id} claimed with nothing left to do")
            if nxt.phase == saga.FORWARD and not nxt.step.is_tool:
                # Always armed: the step's own timeout, else the deployment's default.
                arm = functools.partial(
                    segments.arm_step_timeout,
                    c=claim,
                    step=nxt.step.name,
                    attempt=nxt.attempt,
                    timeout=nxt.step.timeout or segment.settings.step_timeout_seconds,
                )
                armed, _ = segment.write(arm, "arm_step_timeout")
                if not armed:
                    moved = _moved_meanwhile(segment, claim, held)
                    if moved is None:
                        return Outcome.LEASE_LOST
                    claim, steering = moved
                    continue
            entry = _attempt(claim, nxt, journal, held)
            if held.lost.is_set():
                log.warning(
                    "lease lost during step; result not recorded",
                    extra={**fields, "action": "lease_lost", "step": nxt.step.name},
                )
                return Outcome.LEASE_LOST
            decision = saga.decide(workflow, journal, nxt, entry)
        if not decision.continues:
            lease.keeper().drop(held)  # no renewal in flight races the segment's last write
        write = functools.partial(
            _write,
            claim=claim,
            workflow=workflow,
            journal=journal,
            nxt=nxt,
            d=decision,
            segment=segment,
        )
        written, retried = segment.write(write, decision.kind)
        if written is None and retried:
            # An earlier try may have committed before its reply was lost.
            done = _landed(segment, claim, len(decision.entries), not decision.continues)
            if done is not None:
                written = segments.Steering.of(done.saga_status, done.failure_code, done.paused)
        if written is None:
            if not decision.continues:
                lease.keeper().hold(held)  # the segment may go on: keep renewing
            moved = _moved_meanwhile(segment, claim, held)
            if moved is None:
                return Outcome.LEASE_LOST
            claim, steering = moved
            if entry is not None:
                # The step ran: keep what it did (not the plan it led to), then act on the
                # new intent.
                kept = [e for e in decision.entries if e.get("phase") != saga.PLAN]
                recorded = _keep_outcome(segment, claim, workflow, journal, kept)
                if recorded is None:
                    _lost_on_write(held)
                    return Outcome.LEASE_LOST
                claim, steering = recorded
                journal += kept
            continue
        journal += decision.entries
        claim = claim.advanced(len(decision.entries), written.saga_status)
        steering = written
        if not decision.continues:
            outcome = _SEGMENT_ENDS[decision.kind]
            if decision.failure_code == saga.CANCELLED:
                outcome = Outcome.CANCELLED
            if outcome in _FINAL_STATUS:
                metrics.RUNS_FINISHED.labels(_FINAL_STATUS[outcome]).inc()
            log.info(
                "run segment ended",
                extra={
                    **fields,
                    "action": f"run_{outcome.value}",
                    "failure_code": decision.failure_code,
                },
            )
            return outcome


def _landed(
    segment: _Segment, claim: leases.Claim, appended: int, ends_segment: bool
) -> leases.Position | None:
    done, _ = segment.write(
        lambda conn: leases.landed(conn, claim, appended, ends_segment), "landed"
    )
    return done


def _moved_meanwhile(
    segment: _Segment, claim: leases.Claim, held: Lease
) -> tuple[leases.Claim, segments.Steering] | None:
    """A fenced write matched no row. If the lease is still ours, someone recorded an intent
    meanwhile (the saga status moved): the claim as it is now and what it asks. None: the
    lease is gone (or the run changed in a way no intent explains) — stop."""
    now, _ = segment.write(lambda conn: leases.position(conn, claim), "position")
    if (
        now is None
        or now.journal_length != claim.journal_length
        or (now.saga_status, now.paused) == (claim.saga_status, claim.paused)
    ):
        _lost_on_write(held)
        log.warning(
            "lease lost; result discarded", extra={**_fields(claim), "action": "lease_lost"}
        )
        return None
    log.info(
        "intent recorded while the step ran; deciding again",
        extra={
            **_fields(claim),
            "action": "intent_noticed",
            "saga_status": now.saga_status,
            "failure_code": now.failure_code,
        },
    )
    moved = replace(
        claim, saga_status=now.saga_status, failure_code=now.failure_code, paused=now.paused
    )
    return moved, segments.Steering.of(now.saga_status, now.failure_code, now.paused)


def _keep_outcome(
    segment: _Segment,
    claim: leases.Claim,
    workflow: Workflow,
    journal: list[dict[str, Any]],
    entries: list[dict[str, Any]],
) -> tuple[leases.Claim, segments.Steering] | None:
    """Record a step's outcome as a plain step record, when the decision it led to can no
    longer be written because of an intent recorded meanwhile. None: the lease is gone."""
    upcoming = saga.next_step(workflow, [*journal, *entries])
    steering, retried = segment.write(
        lambda conn: segments.record_step(
            conn, claim, entries, next_step=upcoming.step.name if upcoming else None
        ),
        "record",
    )
    if steering is None and retried:
        done = _landed(segment, claim, len(entries), ends_segment=False)
        if done is not None:
            steering = segments.Steering.of(done.saga_status, done.failure_code, done.paused)
    if steering is None:
        return None
    return claim.advanced(len(entries), steering.saga_status), steering


def _lost_on_write(held: Lease) -> None:
    """A fenced write matched no row: the lease is gone (counted once, where noticed first)."""
    if not held.lost.is_set():
        held.lost.set()
        metrics.LEASE_LOSSES.labels("write").inc()


def _attempt(
    claim: leases.Claim, nxt: saga.Next, journal: list[dict[str, Any]], held: Lease
) -> dict[str, Any]:
    """Run the handler once; the journal entry describing what happened."""
    # A resolver asks about the forward call's effect: it gets that call's effect id.
    effect_phase = saga.FORWARD if nxt.phase == saga.RESOLVE else nxt.phase
    effect_id = f"{claim.run_id}:{nxt.step.name}:{effect_phase}"
    ctx = StepContext(
        run_id=str(claim.run_id),
        project_id=claim.project_id,
        input=claim.input,
        outputs=saga.forward_outputs(journal),
        step=nxt.step.name,
        attempt=nxt.attempt,
        effect_id=effect_id,
        command_id=f"{effect_id}:{nxt.attempt}:{claim.lease_epoch}",
        phase=nxt.phase,
        _heartbeat=held.renew_now,
        _lease_held=lambda: not held.lost.is_set(),
        lease_lost=held.lost,
    )
    entry: dict[str, Any] = {
        "step": nxt.step.name,
        "index": nxt.index,
        "phase": nxt.phase,
        "attempt": nxt.attempt,
        "claim": claim.attempt_count,
        "lease_epoch": claim.lease_epoch,
        "worker_id": claim.worker_id,
        "effect_id": ctx.effect_id,
        "command_id": ctx.command_id,
    }
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
        output = handler(ctx)
    except Reject as exc:
        entry.update(status=saga.REJECTED, error=str(exc) or "rejected")
    except Halt as exc:
        entry.update(status=saga.HALTED, error=str(exc) or "halted")
    except Unknown as exc:
        entry.update(status=saga.UNKNOWN, error=str(exc) or "outcome unknown")
    except Exception as exc:
        entry.update(status=saga.FAILED, error=f"{type(exc).__name__}: {exc}"[:1000])
        policy = nxt.step.retry if nxt.phase == saga.FORWARD else nxt.step.compensation_retry
        if not policy.retries(exc):
            entry["retryable"] = False
    else:
        unstorable = _not_json(output)
        if unstorable is not None:
            # The handler returned, so its effect happened: running it again would repeat
            # the effect, so this is not a transient failure. Stop the step with its own code.
            entry.update(
                status=saga.FAILED,
                retryable=False,
                failure_code=saga.OUTPUT_NOT_JSON,
                error=f"the step's return value cannot be stored as JSON: {unstorable}"[:1000],
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
        entry.update(status=saga.DISPATCHED if dispatched else saga.SUCCEEDED, output=output)
        if dispatched:
            entry["late_result"] = nxt.step.late_result
    elapsed = time.monotonic() - started
    entry["duration_ms"] = round(elapsed * 1000, 3)
    metrics.STEP_DURATION.labels(
        claim.workflow_name, nxt.step.name, nxt.phase, entry["status"]
    ).observe(elapsed)
    return entry


def _not_json(output: Any) -> str | None:
    """Why ``output`` cannot go into the journal (JSON), or None when it can."""
    try:
        json.dumps(output, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _write(
    conn: Connection,
    claim: leases.Claim,
    workflow: Workflow,
    journal: list[dict[str, Any]],
    nxt: saga.Next | None,
    d: saga.Decision,
    segment: _Segment,
) -> segments.Steering | None:
    """Write ``d`` in one fenced statement; None when it matched no row (the lease is gone,
    or an intent was recorded meanwhile)."""
    after = [*journal, *d.entries]
    upcoming = saga.next_step(workflow, after)
    if d.kind == "record":
        return segments.record_step(
            conn, claim, d.entries, next_step=upcoming.step.name if upcoming else None
        )
    if d.kind == "wait_approval":
        assert nxt is not None
        sent = approvals.request(conn, claim, nxt.step, nxt.attempt, d.entries, segment.settings)
        if sent is None:
            return None
        segment.send(sent)
        return segments.Steering()
    report = any(s.is_approval for s in workflow.steps)
    if not _write_change(conn, claim, upcoming, nxt, d, report):
        return None
    # Only turning back continues the segment; it leaves the saga compensating.
    return segments.Steering(saga_status="COMPENSATING" if d.kind == "turn_back" else None)


def _outcome_messages(claim: leases.Claim, status: str, code: str | None) -> list[Any]:
    """A run that asked people for approval tells them how it ended."""
    targets = messages.reply_targets(claim.input)
    return messages.outcome_messages(
        targets, run_id=str(claim.run_id), status=status, failure_code=code
    )


def _write_change(
    conn: Connection,
    claim: leases.Claim,
    upcoming: saga.Next | None,
    nxt: saga.Next | None,
    d: saga.Decision,
    report: bool,
) -> bool:
    if d.kind == "turn_back":
        assert upcoming is not None
        return segments.turn_back(
            conn, claim, d.entries, upcoming.step.name, d.failure_code or "", d.failure_reason or ""
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
        )
    if d.kind == "retry":
        assert nxt is not None
        return segments.retry_later(
            conn, claim, d.entries, d.delay, nxt.step.name, nxt.phase, nxt.attempt
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
        )
    if d.kind == "wait_tool":
        assert nxt is not None
        return segments.wait_for_tool(conn, claim, d.entries, nxt.step.name, nxt.attempt, d.delay)
    if d.kind == "escalate":
        return segments.escalate(
            conn, claim, d.entries, d.failure_code or "", d.failure_reason or ""
        )
    raise AssertionError(f"unknown decision {d.kind}")


def _fields(claim: leases.Claim) -> dict[str, Any]:
    return {
        "run_id": str(claim.run_id),
        "project_id": claim.project_id,
        "worker_id": claim.worker_id,
        "lease_epoch": claim.lease_epoch,
    }
