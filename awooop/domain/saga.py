"""What a saga does next, decided from its workflow and its step journal alone.

The journal (``saga_steps``) is an append-only list of entries:

- ``phase: "forward"`` / ``"compensate"`` — one per recorded attempt of a step, with its
  ``status`` (SUCCEEDED, FAILED, REJECTED, HALTED), ``attempt`` (the attempt's identity:
  1, 2, 3 … within the step and phase, never repeated in a run — operator resets included),
  output or error;
- ``phase: "plan"`` — the frozen compensation plan: the steps to undo, in order, and the
  cause. Written once, when the saga turns backwards; never recomputed.
- ``phase: "reset"`` — an operator's "retry compensation" or "retry resolution": attempts
  before it no longer count against the retry budgets (their identities stay taken).
- ``phase: "resolve"`` — one per resolver poll of a step whose outcome was UNKNOWN; when
  the resolver settles it, a forward entry with the settled status follows.
- an approval step's attempt has a ``status: "REQUESTED"`` forward entry when its prompt
  went out, then a ``phase: "approval"`` entry with the ``decision`` (approved, rejected,
  expired); the next worker turns that decision into the attempt's outcome.
- a tool step's attempt has a ``status: "DISPATCHED"`` forward entry when its call went
  out, then a ``phase: "tool_result"`` entry when the result (or its timeout) came in; the
  next worker turns that result into the attempt's outcome.
- a wait step's attempt (a sleep, or a wait for a signal) has a ``status: "WAITING"``
  forward entry each time the run was released to wait, the first one saying ``until`` when
  (the database's clock, epoch seconds) the wait ends; the outcome follows once the signal
  came (its ``seq`` in the output: a signal is taken once) or the time is up.

The runner asks :func:`next_step`, runs the handler, and asks :func:`decide` what to write.
While a cancel (an operator's, or the run deadline's) waits to turn the saga back, it asks
:func:`next_step` with the :class:`Cancel`: a step whose effect is in doubt is settled first
(its resolver polled, its tool result awaited, or a person asked), and :func:`cancel` then
freezes the plan over the steps that happened. Nothing here touches the database or the clock.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from awooop.domain.workflow import Step, Workflow

FORWARD = "forward"
COMPENSATE = "compensate"
PLAN = "plan"
RESET = "reset"
RESOLVE = "resolve"

SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"  # transient: may be retried
REJECTED = "REJECTED"
HALTED = "HALTED"
UNKNOWN = "UNKNOWN"  # the effect may or may not have happened: resolve it
DISPATCHED = "DISPATCHED"  # a tool call went out; not an outcome
REQUESTED = "REQUESTED"  # an approval prompt went out; not an outcome
WAITING = "WAITING"  # a wait step released the run until a signal or a time; not an outcome
TOOL_RESULT = "tool_result"
APPROVAL = "approval"
# Entries that say something is awaited rather than what happened.
_AWAITING = (DISPATCHED, REQUESTED, WAITING)
# A forward step's latest entries that leave its effect in doubt: a cancel settles them first.
_IN_DOUBT = (UNKNOWN, HALTED, DISPATCHED)

# Run failure codes (``failure_code``).
STEP_REJECTED = "E-STEP-001"
RETRIES_EXHAUSTED = "E-STEP-002"
OUTCOME_UNKNOWN = "E-STEP-003"  # unresolved: a person must decide
OUTPUT_NOT_JSON = "E-STEP-004"  # the handler returned something the journal cannot hold
SIGNAL_TIMEOUT = "E-STEP-005"  # a wait for a signal ended without it (on_timeout="fail")
MANUAL_INTERVENTION = "E-SAGA-001"
CANCELLED = "E-SAGA-002"  # an operator cancelled the run
DEADLINE = "E-SAGA-003"  # the workflow's run deadline passed
CONFLICT = "E-SAGA-004"  # two different outcomes were reported for one attempt
APPROVAL_REJECTED = "E-APPROVAL-001"  # a person said no
APPROVAL_EXPIRED = "E-APPROVAL-002"  # nobody decided within the approval's TTL

Journal = Sequence[dict[str, Any]]


@dataclass(frozen=True)
class Cancel:
    """A cancel waiting to turn the saga back: its failure code and reason."""

    code: str
    reason: str

    @classmethod
    def of(cls, cause: str | None) -> Cancel:
        """The cancel a CANCELLING run's ``failure_code`` stands for: the run deadline's
        (E-SAGA-003) or, by default, an operator's (E-SAGA-002)."""
        code = cause or CANCELLED
        reason = "the run deadline passed" if code == DEADLINE else "cancelled by an operator"
        return cls(code, reason)


@dataclass(frozen=True)
class Next:
    """The attempt to make now.

    ``attempt`` is its identity — timer ids, effect and command ids, tool-result and
    approval lookups rest on it, so it never repeats within a run. ``tries`` counts the
    attempts since the last operator reset, this one included: the retry budgets use it.
    """

    step: Step
    index: int
    phase: str
    attempt: int
    tries: int


def attempt_identity(
    run_id: object, nxt: Next, *, claim: int, lease_epoch: int, worker_id: str
) -> dict[str, Any]:
    """The journal entry of an attempt, before its outcome: who made it, under which lease,
    and the ids its handler gets — ``effect_id`` stable across the step's retries in a
    phase (a resolver asks about the forward call's effect, so it gets that call's), and
    ``command_id`` unique per attempt and lease."""
    effect_phase = FORWARD if nxt.phase == RESOLVE else nxt.phase
    effect_id = f"{run_id}:{nxt.step.name}:{effect_phase}"
    return {
        "step": nxt.step.name,
        "index": nxt.index,
        "phase": nxt.phase,
        "attempt": nxt.attempt,
        "claim": claim,
        "lease_epoch": lease_epoch,
        "worker_id": worker_id,
        "effect_id": effect_id,
        "command_id": f"{effect_id}:{nxt.attempt}:{lease_epoch}",
    }


def forward_outputs(journal: Journal) -> dict[str, Any]:
    """Outputs of the forward steps recorded as SUCCEEDED, by step name."""
    return {
        e["step"]: e.get("output")
        for e in journal
        if e.get("phase") == FORWARD and e.get("status") == SUCCEEDED
    }


def _outcomes(journal: Journal, step: str, phase: str) -> list[dict[str, Any]]:
    """Recorded outcomes of ``step`` in ``phase`` (not the entries saying one is awaited)."""
    return [
        e
        for e in journal
        if e.get("phase") == phase and e.get("step") == step and e.get("status") not in _AWAITING
    ]


def recorded_attempts(journal: Journal, step: str, phase: str) -> int:
    """Attempts of ``step`` in ``phase`` since the last operator reset (the budget's count)."""
    resets = [i for i, e in enumerate(journal) if e.get("phase") == RESET]
    since = resets[-1] + 1 if resets else 0
    return len(_outcomes(journal[since:], step, phase))


def latest_attempt(journal: Journal, step: str, phase: str) -> int:
    """The identity of the last recorded attempt of ``step`` in ``phase`` (0: none).

    The highest recorded, not a count: a journal written before identities stopped
    restarting at resets still gets identities no earlier attempt used.
    """
    return max((int(e.get("attempt") or 0) for e in _outcomes(journal, step, phase)), default=0)


def _next(workflow: Workflow, journal: Journal, step: Step, phase: str) -> Next:
    return Next(
        step=step,
        index=workflow.step_index(step.name),
        phase=phase,
        attempt=latest_attempt(journal, step.name, phase) + 1,
        tries=recorded_attempts(journal, step.name, phase) + 1,
    )


def _unsettled(journal: Journal, step: str) -> bool:
    """Whether the step's latest forward outcome is UNKNOWN (so it must be resolved)."""
    outcomes = _outcomes(journal, step, FORWARD)
    return bool(outcomes) and outcomes[-1].get("status") == UNKNOWN


def tool_result(journal: Journal, nxt: Next) -> dict[str, Any] | None:
    """The result delivered for this attempt of a tool step, if any."""
    return next(
        (
            e
            for e in journal
            if e.get("phase") == TOOL_RESULT
            and e.get("step") == nxt.step.name
            and e.get("attempt") == nxt.attempt
        ),
        None,
    )


def approval_decision(journal: Journal, nxt: Next) -> dict[str, Any] | None:
    """The decision taken on this attempt of an approval step, if any."""
    return next(
        (
            e
            for e in journal
            if e.get("phase") == APPROVAL
            and e.get("step") == nxt.step.name
            and e.get("attempt") == nxt.attempt
        ),
        None,
    )


def signals_taken(journal: Journal, name: str) -> int:
    """The highest ``seq`` of the signals named ``name`` that wait steps took (0: none): a
    wait takes the first signal of its name after it."""
    return max(
        (
            int(e["output"]["seq"])
            for e in journal
            if e.get("phase") == FORWARD
            and e.get("status") == SUCCEEDED
            and isinstance(e.get("output"), dict)
            and e["output"].get("signal") == name
            and e["output"].get("received")
        ),
        default=0,
    )


def wait_outcome(
    journal: Journal, nxt: Next, signal: dict[str, Any] | None, now: float
) -> dict[str, Any]:
    """A wait step's attempt: the entry's status and what goes with it.

    ``signal``: the first signal of the step's name after those taken (``seq``,
    ``signal_id``, ``payload``), or None; ``now``: the database's clock (epoch seconds).
    The signal is taken at once if it is there; otherwise the wait ends when the ``until`` of
    the attempt's first WAITING entry is past, and until then the run waits again."""
    wait = nxt.step.wait
    assert wait is not None, f"step {nxt.step.name} is not a wait step"
    if wait.signal is not None and signal is not None:
        output = {"signal": wait.signal, "received": True, **signal}
        return {"status": SUCCEEDED, "output": output}
    began = next(
        (
            e
            for e in journal
            if e.get("phase") == FORWARD
            and e.get("step") == nxt.step.name
            and e.get("attempt") == nxt.attempt
            and e.get("status") == WAITING
        ),
        None,
    )
    until = float(began["until"]) if began is not None else now + wait.seconds
    if began is None or now < until:
        return {"status": WAITING, "signal": wait.signal, "until": until, "delay": until - now}
    if wait.signal is None:
        return {"status": SUCCEEDED, "output": {"slept_seconds": wait.seconds}}
    if wait.on_timeout == "continue":
        return {"status": SUCCEEDED, "output": {"signal": wait.signal, "received": False}}
    return {
        "status": REJECTED,
        "retryable": False,
        "failure_code": SIGNAL_TIMEOUT,
        "error": f"no {wait.signal!r} signal within {wait.seconds:g} s",
    }


def frozen_plan(journal: Journal) -> dict[str, Any] | None:
    return next((e for e in journal if e.get("phase") == PLAN), None)


def freeze_plan(workflow: Workflow, journal: Journal) -> list[str]:
    """Succeeded forward steps that have a compensation, most recent first."""
    succeeded = forward_outputs(journal)
    return [s.name for s in reversed(workflow.steps) if s.name in succeeded and s.compensate]


def dispatched(journal: Journal, nxt: Next) -> bool:
    """Whether this attempt of a tool step has already sent its call."""
    return any(
        e.get("phase") == FORWARD
        and e.get("step") == nxt.step.name
        and e.get("attempt") == nxt.attempt
        and e.get("status") == DISPATCHED
        for e in journal
    )


def _in_doubt(workflow: Workflow, journal: Journal) -> Next | None:
    """The forward step whose effect may or may not have happened — its latest forward entry
    UNKNOWN, HALTED or DISPATCHED — as the attempt that settles it, or None.

    UNKNOWN or HALTED: a resolver poll (a step without a resolver gets one that cannot
    tell, and goes to a person). DISPATCHED: the tool call's attempt, whose result (or
    timeout) becomes its outcome. Forward steps run in order, so only the first one not
    succeeded can be in doubt."""
    done = forward_outputs(journal)
    step = next((s for s in workflow.steps if s.name not in done), None)
    if step is None:
        return None
    entries = [e for e in journal if e.get("phase") == FORWARD and e.get("step") == step.name]
    if not entries or entries[-1].get("status") not in _IN_DOUBT:
        return None
    if entries[-1].get("status") == DISPATCHED:
        return _next(workflow, journal, step, FORWARD)
    return _next(workflow, journal, step, RESOLVE)


def next_step(
    workflow: Workflow, journal: Journal, cancelling: Cancel | None = None
) -> Next | None:
    """The step to run now: the first forward step not yet succeeded or, once a plan is
    frozen, the first planned compensation not yet succeeded. None: nothing is left.

    ``cancelling`` (a cancel not yet turned into a plan): only the attempt that settles a
    step in doubt; None: every step that ran has a known outcome, :func:`cancel` now."""
    plan = frozen_plan(journal)
    if plan is None and cancelling is not None:
        return _in_doubt(workflow, journal)
    if plan is None:
        done = forward_outputs(journal)
        candidates = [(s, FORWARD) for s in workflow.steps if s.name not in done]
        if candidates and _unsettled(journal, candidates[0][0].name):
            return _next(workflow, journal, candidates[0][0], RESOLVE)
    else:
        undone = {
            e["step"]
            for e in journal
            if e.get("phase") == COMPENSATE and e.get("status") == SUCCEEDED
        }
        by_name = {s.name: s for s in workflow.steps}
        candidates = [(by_name[n], COMPENSATE) for n in plan["steps"] if n not in undone]
    if not candidates:
        return None
    step, phase = candidates[0]
    return _next(workflow, journal, step, phase)


@dataclass(frozen=True)
class Decision:
    """What to write after one attempt.

    ``kind``:
      - ``record``: append the entry, carry on with the next step (same lease);
      - ``turn_back``: append the entry and the frozen plan, saga COMPENSATING, carry on;
      - ``retry``: append the entry, release the run until ``delay`` seconds from now;
      - ``complete``: append the entry, run COMPLETED;
      - ``compensated``: append the entry (and an empty plan when nothing needs undoing),
        run FAILED with ``failure_code``, saga COMPENSATED;
      - ``escalate``: append the entry, run WAITING_APPROVAL, saga MANUAL_INTERVENTION;
      - ``wait_tool``: append the dispatch entry, run WAITING_TOOL until the result;
      - ``wait_approval``: append the request entry, run WAITING_APPROVAL until a person
        decides or ``delay`` (the approval's TTL) passes;
      - ``wait``: append the WAITING entry, release the run (PENDING, no lease) until its
        signal comes or ``delay`` seconds pass;
      - ``resolve``: append the entry, saga WAITING_RESOLUTION, poll the resolver after
        ``delay`` seconds.
    """

    kind: str
    entries: list[dict[str, Any]]
    delay: float = 0.0
    failure_code: str | None = None
    failure_reason: str | None = None
    output: Any = None
    # ``record`` after a forward step succeeded: the step after ``entries``, worked out while
    # deciding (it is what told ``record`` from ``complete``), so nobody works it out again.
    upcoming: Next | None = None

    @property
    def continues(self) -> bool:
        return self.kind in ("record", "turn_back")


def _retryable(entry: dict[str, Any]) -> bool:
    return bool(entry.get("retryable", True))


def decide(
    workflow: Workflow,
    journal: Journal,
    nxt: Next,
    entry: dict[str, Any],
    rng: random.Random | None = None,
    cancelling: Cancel | None = None,
) -> Decision:
    """The decision for ``entry``, the outcome of running ``nxt`` (not yet in ``journal``).

    ``cancelling``: ``nxt`` was the attempt settling a step in doubt before a cancel turns
    the saga back (:func:`next_step` with the cancel)."""
    if cancelling is not None and frozen_plan(journal) is None:
        return _decide_settling(workflow, journal, nxt, entry, cancelling)
    status = entry["status"]
    after = [*journal, entry]
    if status == DISPATCHED:
        return Decision("wait_tool", [entry], delay=nxt.step.tool_timeout or 0.0)
    if status == REQUESTED:
        assert nxt.step.approval is not None
        return Decision("wait_approval", [entry], delay=nxt.step.approval.ttl_seconds)
    if status == WAITING:
        return Decision("wait", [entry], delay=float(entry["delay"]))
    if nxt.phase == RESOLVE:
        return _decide_resolution(workflow, journal, nxt, entry, rng)
    if status == UNKNOWN:
        resolver = nxt.step.resolver
        if resolver is None:
            return Decision(
                "escalate",
                [entry],
                failure_code=OUTCOME_UNKNOWN,
                failure_reason=f"step {nxt.step.name}: outcome unknown "
                f"({entry.get('error')}) and no resolver",
            )
        return Decision("resolve", [entry], delay=resolver.poll_interval)
    if nxt.phase == COMPENSATE:
        return _decide_compensation(journal, nxt, entry, after, rng)
    if status == SUCCEEDED:
        upcoming = next_step(workflow, after)
        if upcoming is None:
            return Decision("complete", [entry], output=entry.get("output"))
        return Decision("record", [entry], upcoming=upcoming)
    if status == HALTED:
        return Decision(
            "escalate",
            [entry],
            failure_code=MANUAL_INTERVENTION,
            failure_reason=f"step {nxt.step.name} halted: {entry.get('error')}",
        )
    if status == FAILED and _retryable(entry) and nxt.tries <= nxt.step.retry.max_retries:
        return Decision("retry", [entry], delay=nxt.step.retry.delay(nxt.tries, rng))
    # A rejection, or a transient failure with no retry left: undo what succeeded.
    code = entry.get("failure_code") or (STEP_REJECTED if status == REJECTED else RETRIES_EXHAUSTED)
    reason = f"step {nxt.step.name}: {entry.get('error')}"
    plan = {
        "phase": PLAN,
        "steps": freeze_plan(workflow, after),
        "cause": {"step": nxt.step.name, "code": code, "reason": reason},
    }
    if not plan["steps"]:
        return Decision("compensated", [entry, plan], failure_code=code, failure_reason=reason)
    return Decision("turn_back", [entry, plan], failure_code=code, failure_reason=reason)


def _decide_resolution(
    workflow: Workflow,
    journal: Journal,
    nxt: Next,
    entry: dict[str, Any],
    rng: random.Random | None,
) -> Decision:
    """A resolver poll: settle the step (as if it had just run), poll again, or escalate."""
    status = entry["status"]
    resolver = nxt.step.resolver
    if status in (SUCCEEDED, REJECTED):
        # The settled outcome is the unknown forward attempt's: same identity, same try.
        settled = _settled_forward(journal, nxt, entry)
        tries = recorded_attempts(journal, nxt.step.name, FORWARD)
        forward = Next(nxt.step, nxt.index, FORWARD, settled["attempt"], tries)
        follow = decide(workflow, [*journal, entry], forward, settled, rng)
        return Decision(
            follow.kind,
            [entry, *follow.entries],
            delay=follow.delay,
            failure_code=follow.failure_code,
            failure_reason=follow.failure_reason,
            output=follow.output,
        )
    if resolver is not None and nxt.tries < resolver.max_polls:
        return Decision("resolve", [entry], delay=resolver.poll_interval)
    return Decision(
        "escalate",
        [entry],
        failure_code=OUTCOME_UNKNOWN,
        failure_reason=f"step {nxt.step.name}: outcome still unknown after "
        f"{nxt.tries} resolver polls",
    )


def _settled_forward(journal: Journal, nxt: Next, entry: dict[str, Any]) -> dict[str, Any]:
    """A resolver's verdict as the outcome of the forward attempt it was asked about (same
    identity)."""
    settled = {k: v for k, v in entry.items() if k not in ("phase", "attempt")}
    settled.update(
        phase=FORWARD, attempt=latest_attempt(journal, nxt.step.name, FORWARD), resolved=True
    )
    return settled


def _decide_settling(
    workflow: Workflow, journal: Journal, nxt: Next, entry: dict[str, Any], cancelling: Cancel
) -> Decision:
    """A step in doubt while a cancel waits: once its outcome is known, turn back over what
    happened (it is compensated if it did). Until then: wait for the tool's result, poll the
    resolver again within its budget, or hand the run to a person — never a retry of the
    step itself."""
    status = entry["status"]
    step = nxt.step
    if status == DISPATCHED:  # the call is out: its result (or its timeout) settles it
        return Decision("wait_tool", [entry], delay=step.tool_timeout or 0.0)
    settled = [entry]  # a tool call's result: the attempt's outcome
    if nxt.phase == RESOLVE:
        if status not in (SUCCEEDED, REJECTED):
            return _settle_later(nxt, entry, cancelling)
        settled.append(_settled_forward(journal, nxt, entry))
    turn = cancel(workflow, [*journal, *settled], cancelling.code, cancelling.reason)
    return Decision(
        turn.kind,
        [*settled, *turn.entries],
        failure_code=turn.failure_code,
        failure_reason=turn.failure_reason,
    )


def _settle_later(nxt: Next, entry: dict[str, Any], cancelling: Cancel) -> Decision:
    """A resolver poll that could not tell, while a cancel waits: poll again (the saga stays
    CANCELLING) or, past the resolver's budget or without a resolver, ask a person. The
    escalation keeps the cancel's failure code, so an operator's retry resolution resumes
    the cancel rather than the saga."""
    resolver = nxt.step.resolver
    if resolver is not None and nxt.tries < resolver.max_polls:
        return Decision("retry", [entry], delay=resolver.poll_interval)
    why = (
        f"still unknown after {nxt.tries} resolver polls"
        if resolver is not None
        else "unknown and it has no resolver"
    )
    return Decision(
        "escalate",
        [entry],
        failure_code=cancelling.code,
        failure_reason=f"{cancelling.reason}, but whether step {nxt.step.name} happened is "
        f"{why}: a person must settle it before compensating",
    )


def _decide_compensation(
    journal: Journal,
    nxt: Next,
    entry: dict[str, Any],
    after: list[dict[str, Any]],
    rng: random.Random | None,
) -> Decision:
    plan = frozen_plan(journal)
    assert plan is not None, "compensating without a frozen plan"
    status = entry["status"]
    if status == SUCCEEDED:
        remaining = [
            n
            for n in plan["steps"]
            if n
            not in {
                e["step"]
                for e in after
                if e.get("phase") == COMPENSATE and e.get("status") == SUCCEEDED
            }
        ]
        if not remaining:
            cause = plan["cause"]
            return Decision(
                "compensated", [entry], failure_code=cause["code"], failure_reason=cause["reason"]
            )
        return Decision("record", [entry])
    if (
        status == FAILED
        and _retryable(entry)
        and nxt.tries <= nxt.step.compensation_retry.max_retries
    ):
        return Decision("retry", [entry], delay=nxt.step.compensation_retry.delay(nxt.tries, rng))
    return Decision(
        "escalate",
        [entry],
        failure_code=MANUAL_INTERVENTION,
        failure_reason=f"compensation of {nxt.step.name} needs a person: {entry.get('error')}",
    )


def cancel(workflow: Workflow, journal: Journal, code: str, reason: str) -> Decision:
    """Turn back on a cancel (an operator's, or the run deadline's): freeze the plan over
    what happened so far — the forward steps that succeeded, a step in doubt included once
    its resolver settled it as happened. Called when :func:`next_step` with the cancel has
    nothing left to settle."""
    plan = {
        "phase": PLAN,
        "steps": freeze_plan(workflow, journal),
        "cause": {"step": None, "code": code, "reason": reason},
    }
    kind = "turn_back" if plan["steps"] else "compensated"
    return Decision(kind, [plan], failure_code=code, failure_reason=reason)
