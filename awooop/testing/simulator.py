"""Running a workflow in memory: the saga engine's own decisions, a journal in a list, and a
fake clock — no PostgreSQL, no Redis, no worker, no sleeping.

::

    sim = Simulator(RESTART, {"service": "web"})
    sim.outcome("restart", reject="locked")       # instead of calling the handler
    assert sim.run() == "FAILED"
    assert sim.failure_code == "E-STEP-001"
    assert sim.compensated == ["stop"]

What it shares with the real worker (:mod:`awooop.engine.runner`): what to run next and what
an outcome leads to are :func:`awooop.domain.saga.next_step`, :func:`~awooop.domain.saga.decide`
and :func:`~awooop.domain.saga.cancel`; an attempt's identity (effect and command ids) is
:func:`~awooop.domain.saga.attempt_identity`; a handler's call and what it returned or raised
become a journal entry through the runner's own ``_attempt`` (so a rejection, a halt, an
unknown outcome, a transient failure, an output that is not JSON, an approval prompt and a tool
dispatch are written exactly as the worker writes them); a wait step's outcome is
:func:`~awooop.domain.saga.wait_outcome`; an approval's decision becomes an outcome through
:func:`awooop.engine.approvals.outcome_entry`. What the database's statements do around them
— a tool result's or a decision's journal entry, a timer's effect, a cancel's — is repeated
here in a few lines each, with the same entry shapes.

What it does not model, because the real behaviour lives in the database or in processes:

- leases, fencing and write identities: one simulated worker holds the run, never loses it,
  never crashes; a segment's claim is always the first (``claim`` 1) and each segment gets
  the next ``lease_epoch``, so ``command_id`` differs per segment as in production;
- intents recorded *while* a handler runs: a cancel arrives at a step boundary
  (:meth:`Simulator.cancel_at`) or while the run waits (:meth:`Simulator.cancel`); pause and
  resume are not simulated;
- step timeouts (``Step.timeout``): handlers return at once here, so a step never overruns —
  inject ``unknown=`` to see what a timeout leads to;
- an operator's retry compensation, retry resolution and manual close: a run handed to a
  person stays ``WAITING`` for ``"person"``;
- the late-compensation follow-up run a late tool success starts under
  ``late_result="compensate"`` (the late result is listed in :attr:`Simulator.late_results`),
  conflicting results, the outbox (approval prompts, chat replies), quotas, admission and
  correlation of events to runs, the run's ``max_attempts`` (a crash loop).
"""

from __future__ import annotations

import dataclasses
import json
import random
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from awooop.domain import saga, states
from awooop.domain import tags as run_tags
from awooop.domain.workflow import (
    Halt,
    Reject,
    Resolver,
    Step,
    StepContext,
    Unknown,
    Workflow,
    check_signal_name,
)
from awooop.engine import runner, tools
from awooop.engine.lease import Lease
from awooop.store import leases

# The clock starts here (epoch seconds), like the database's clock the real waits use.
DEFAULT_START = 1_700_000_000.0
WORKER_ID = "simulator"
# A run that keeps becoming claimable at once without finishing (a zero back-off retrying
# forever) stops the simulator rather than hanging the test.
MAX_SEGMENTS = 10_000

_PHASES = (saga.FORWARD, saga.COMPENSATE, saga.RESOLVE)
_FINISHED = {states.COMPLETED, states.FAILED, states.CANCELLED}
_NO_OUTPUT = object()


def run_input(
    event: Mapping[str, Any] | None = None,
    *,
    channel: str = "api",
    project: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
    provider_event_id: str | None = None,
) -> dict[str, Any]:
    """A run's input as the ingress admits it: the event's payload, its channel and provider
    event id, the channel's metadata, and the project's configuration when it arrived
    (``ctx.input["project"]``: ``actions_url``, ``approvers`` …)."""
    return {
        "channel": channel,
        "provider_event_id": provider_event_id or uuid.uuid4().hex,
        "event": dict(event or {}),
        "meta": dict(meta or {}),
        "project": dict(project or {}),
    }


class SimulatedFailure(Exception):
    """A transient failure injected with ``fail="…"`` (retried when the step's policy retries
    any exception; pass an exception instance to match a narrower ``retry_on``)."""


@dataclass(frozen=True)
class Call:
    """A handler the simulator called: the step, the phase, the attempt, and the context
    it was given (``ctx.effect_id``, ``ctx.outputs`` …)."""

    step: str
    phase: str
    attempt: int
    ctx: StepContext


@dataclass(frozen=True)
class Waiting:
    """What the run waits for.

    ``kind``: ``retry`` (a back-off before the step's next attempt), ``resolver`` (the next
    poll of an unknown step's resolver), ``sleep``, ``signal`` (``signal`` names it), ``tool``
    (a tool step's result), ``approval`` (a person's decision) or ``person`` (manual
    intervention). ``until``: the simulated time at which time alone moves the run on (the
    back-off, the sleep, the signal's or the tool result's timeout, the approval's expiry);
    None when only the test can."""

    kind: str
    step: str | None
    until: float | None = None
    signal: str | None = None


@dataclass(frozen=True)
class _Injected:
    """An outcome given instead of calling a handler."""

    kind: str  # output, fail, reject, halt, unknown
    value: Any

    def happen(self) -> Any:
        if self.kind == "output":
            return self.value
        if self.kind == "fail":
            raise (
                self.value
                if isinstance(self.value, BaseException)
                else SimulatedFailure(self.value)
            )
        raise {"reject": Reject, "halt": Halt, "unknown": Unknown}[self.kind](self.value)


@dataclass(frozen=True)
class _Timer:
    due: float
    kind: str  # tool_timeout, approval_expiry, deadline
    step: str | None = None
    attempt: int | None = None


class _Held:
    """The lease as a handler sees it: held, always (see the module's docstring)."""

    def __init__(self) -> None:
        self.lost = threading.Event()

    def renew_now(self) -> bool:
        return True

    def believed(self) -> bool:
        return True


class Simulator:
    """One run of ``workflow`` on ``event``, driven in memory (see the module's docstring).

    :meth:`run` drives it until it finishes or waits for something only the test provides —
    time (:meth:`advance`), a signal, a tool result, an approval — then returns
    :attr:`status`; the test acts and calls :meth:`run` again.

    ``outcomes``: step name → the outcomes of its forward attempts 1, 2, … (each a mapping
    of :meth:`outcome`'s keywords, or None to call the handler). ``input``: the whole run
    input instead of one built by :func:`run_input` from ``event``, ``channel`` and
    ``project``. ``seed``: the retry jitter's and the run id's randomness."""

    def __init__(
        self,
        workflow: Workflow,
        event: Mapping[str, Any] | None = None,
        *,
        channel: str = "api",
        project: Mapping[str, Any] | None = None,
        project_id: str = "test",
        input: Mapping[str, Any] | None = None,
        outcomes: Mapping[str, Sequence[Mapping[str, Any] | None]] | None = None,
        seed: int = 0,
        start: float = DEFAULT_START,
    ) -> None:
        ids = random.Random(f"awooop-simulator:{seed}")
        self.workflow = workflow
        self.run_id = uuid.UUID(int=ids.getrandbits(128), version=4)
        self.project_id = project_id
        self.input = (
            dict(input)
            if input is not None
            else run_input(
                event,
                channel=channel,
                project=project,
                provider_event_id=f"sim-{ids.getrandbits(64):016x}",
            )
        )
        self.now = start
        self.started_at = start
        self.journal: list[dict[str, Any]] = []
        self.calls: list[Call] = []
        self.late_results: list[dict[str, Any]] = []
        self.run_status = states.PENDING
        self.saga_status = "RUNNING"
        self.failure_code: str | None = None
        self.failure_reason: str | None = None
        self.output: Any = None
        self.waiting: Waiting | None = None
        self.lease_epoch = 0
        self._rng = random.Random(seed)
        self._claimable_at: float | None = start
        self._timers: list[_Timer] = []
        self._injected: dict[tuple[str, str, int], _Injected] = {}
        self._cancel_at: set[str] = set()
        self._approval: tuple[str, int] | None = None
        self._signals: list[dict[str, Any]] = []
        self._tool_events: dict[str, dict[str, Any]] = {}
        if workflow.deadline_seconds is not None:
            self._timers.append(_Timer(start + workflow.deadline_seconds, "deadline"))
        for step, listed in (outcomes or {}).items():
            for attempt, given in enumerate(listed, start=1):
                if given is not None:
                    self.outcome(step, attempt=attempt, **given)

    # --- what the test reads -------------------------------------------------------------

    @property
    def status(self) -> str:
        """COMPLETED, FAILED or CANCELLED once finished; WAITING (see :attr:`waiting`);
        PENDING before :meth:`run`."""
        if self.run_status in _FINISHED:
            return self.run_status
        return "WAITING" if self.waiting is not None else states.PENDING

    @property
    def finished(self) -> bool:
        return self.run_status in _FINISHED

    @property
    def outputs(self) -> dict[str, Any]:
        """The forward steps' outputs, by step name."""
        return saga.forward_outputs(self.journal)

    @property
    def tags(self) -> dict[str, str]:
        """The run's tags as its steps set them (``ctx.tag``), a later value of a key
        replacing an earlier one — what the worker records on the run."""
        return run_tags.of_journal(self.journal)

    @property
    def compensated(self) -> list[str]:
        """The steps whose compensation succeeded, in the order they were undone."""
        return [
            e["step"]
            for e in self.journal
            if e.get("phase") == saga.COMPENSATE and e.get("status") == saga.SUCCEEDED
        ]

    def trace(self) -> list[tuple[str, str, str]]:
        """The journal as (step, phase, status) — what a test compares with the real
        runner's journal (a frozen plan is ``("", "plan", "")``)."""
        return [(e.get("step") or "", e["phase"], e.get("status") or "") for e in self.journal]

    # --- what the test injects --------------------------------------------------------------

    def outcome(
        self,
        step: str,
        *,
        output: Any = _NO_OUTPUT,
        fail: str | BaseException | None = None,
        reject: str | None = None,
        halt: str | None = None,
        unknown: str | None = None,
        phase: str = saga.FORWARD,
        attempt: int | None = None,
    ) -> Simulator:
        """Give one attempt of ``step`` in ``phase`` (forward, compensate, or resolve: a
        resolver's poll) an outcome instead of calling its handler: succeed with ``output``,
        fail transiently (``fail``: a message, or the exception to raise), reject, halt, or
        be unknown. ``attempt``: which one (1, 2 …); by default the next one not yet given
        an outcome, so consecutive calls describe consecutive attempts."""
        self.workflow.step_index(step)  # KeyError for a step the workflow does not have
        if phase not in _PHASES:
            raise ValueError(f"phase must be one of {_PHASES}")
        given: dict[str, Any] = {"fail": fail, "reject": reject, "halt": halt, "unknown": unknown}
        chosen = [k for k, v in given.items() if v is not None]
        if output is not _NO_OUTPUT:
            chosen.append("output")
            given["output"] = output
        if len(chosen) != 1:
            raise ValueError("give exactly one of output, fail, reject, halt, unknown")
        if attempt is None:
            taken = [a for (s, p, a) in self._injected if (s, p) == (step, phase)]
            attempt = max([saga.latest_attempt(self.journal, step, phase), *taken]) + 1
        self._injected[(step, phase, attempt)] = _Injected(chosen[0], given[chosen[0]])
        return self

    def verdict(self, step: str, happened: bool | None, output: Any = None) -> Simulator:
        """The next resolver poll of ``step`` (whose outcome was unknown), instead of its
        resolver: it happened (the step succeeds with ``output``), it did not (a rejection:
        the saga compensates), or still unknown (None: polled again)."""
        if happened is None:
            return self.outcome(step, phase=saga.RESOLVE, unknown="still unknown (simulated)")
        if happened:
            return self.outcome(step, phase=saga.RESOLVE, output=output)
        return self.outcome(step, phase=saga.RESOLVE, reject="it did not happen (simulated)")

    def cancel_at(self, step: str) -> Simulator:
        """An operator's cancel, recorded while the step before ``step`` ran: the run turns
        back when it reaches ``step`` (forward), which does not run."""
        self.workflow.step_index(step)
        self._cancel_at.add(step)
        return self

    def cancel(self, code: str = saga.CANCELLED) -> Simulator:
        """An operator's cancel now (or, with ``code`` E-SAGA-003, the run deadline's), as
        the cancel operation applies it: refused (ValueError) unless the saga is going
        forward. A run waiting for a tool result keeps waiting for it."""
        if self.finished or self.saga_status not in ("RUNNING", "WAITING_RESOLUTION"):
            raise ValueError(f"cannot cancel a run that is {self.run_status} / {self.saga_status}")
        self.saga_status = "CANCELLING"
        self.failure_code = code
        self.failure_reason = saga.Cancel.of(code).reason
        if self.run_status == states.WAITING_APPROVAL:
            self._approval = None  # superseded
            self._resume(states.RESUMED)
        elif self.run_status != states.WAITING_TOOL:
            self._resume(self.run_status)
        return self

    def signal(
        self, name: str, payload: Mapping[str, Any] | None = None, signal_id: str | None = None
    ) -> str:
        """Send the signal ``name``, before or during a wait for it: ``delivered`` (the run
        waited for it and is claimable now), ``kept`` (for a wait to come), ``duplicate`` /
        ``conflict`` (this ``signal_id`` was sent before, with the same / another content),
        ``finished``."""
        check_signal_name(name)
        body = dict(payload or {})
        sid = signal_id or f"sim-signal-{len(self._signals) + 1}"
        known = next((s for s in self._signals if s["signal_id"] == sid), None)
        if known is not None:
            same = (known["name"], known["payload"]) == (name, body)
            return "duplicate" if same else "conflict"
        if self.finished:
            return "finished"
        self._signals.append(
            {"seq": len(self._signals) + 1, "signal_id": sid, "name": name, "payload": body}
        )
        last = next((e for e in reversed(self.journal) if e.get("phase") == saga.FORWARD), None)
        if (
            self.run_status == states.PENDING
            and self.saga_status == "RUNNING"
            and last is not None
            and last.get("status") == saga.WAITING
            and last.get("signal") == name
        ):
            self._resume(states.PENDING)
            return "delivered"
        return "kept"

    def tool_result(
        self,
        step: str,
        output: Any = None,
        *,
        status: str = "succeeded",
        error: str | None = None,
        event_id: str | None = None,
    ) -> str:
        """Deliver a tool step's result (``status``: succeeded, failed, rejected), as
        ``POST …/tool-results`` does: ``accepted`` (it is the waiting attempt's outcome, or a
        late success the step's ``late_result`` policy takes for its retry), ``duplicate``
        (this ``event_id`` was delivered before), or ``late`` (kept in
        :attr:`late_results` only)."""
        if status not in tools.RESULT_STATUSES:
            raise ValueError(f"status must be one of {sorted(tools.RESULT_STATUSES)}")
        result: dict[str, Any] = {"status": tools.RESULT_STATUSES[status]}
        if status == "succeeded":
            result["output"] = output
        else:
            result["error"] = (error or status)[:1000]
        event_id = event_id or f"sim-tool-{len(self._tool_events) + 1}"
        if event_id in self._tool_events:
            return "duplicate"
        self._tool_events[event_id] = result
        entry = {"phase": saga.TOOL_RESULT, "step": step, "event_id": event_id, **result}
        attempt = self._tool_attempt(step, result["status"])
        if attempt is None:
            self.late_results.append(entry)
            return "late"
        late = self.run_status != states.WAITING_TOOL
        self.journal.append({**entry, "attempt": attempt, "late": late})
        self._resume(states.PENDING)
        return "accepted"

    def approve(
        self, step: str | None = None, *, actor: str = "tester", comment: str | None = None
    ) -> Simulator:
        """A person approves the approval the run waits for."""
        return self._decide("approved", step, actor, comment)

    def reject_approval(
        self, step: str | None = None, *, actor: str = "tester", comment: str | None = None
    ) -> Simulator:
        """A person rejects the approval the run waits for (the step's ``on_reject``
        decides what follows). To let it expire, :meth:`advance` past its TTL."""
        return self._decide("rejected", step, actor, comment)

    def advance(self, seconds: float) -> Simulator:
        """Move the clock on by ``seconds``, firing the timers that fall due on the way (a
        tool result's timeout, an approval's expiry, the run deadline). A back-off, a sleep
        or a wait that ends meanwhile makes the run claimable; :meth:`run` drives it."""
        if seconds < 0:
            raise ValueError("time does not go backwards")
        until = self.now + seconds
        while True:
            due = sorted((t for t in self._timers if t.due <= until), key=lambda t: t.due)
            if not due:
                break
            timer = due[0]
            self._timers.remove(timer)
            self.now = max(self.now, timer.due)
            self._fire(timer)
        self.now = until
        return self

    # --- driving --------------------------------------------------------------------------

    def run(self) -> str:
        """Drive the run until it finishes or waits for the test; :attr:`status`."""
        for _ in range(MAX_SEGMENTS):
            if self.finished or self._claimable_at is None or self._claimable_at > self.now:
                return self.status
            self._segment()
        raise RuntimeError(f"the run did not settle in {MAX_SEGMENTS} segments")

    def _segment(self) -> None:
        """One claim: steps run until a decision ends the segment (the runner's
        ``_run_steps``, without its database)."""
        self.lease_epoch += 1
        self.run_status = states.RUNNING
        self.waiting = None
        self._claimable_at = None
        claim = leases.Claim(
            run_id=self.run_id,
            project_id=self.project_id,
            workflow_name=self.workflow.name,
            workflow_version=self.workflow.version,
            workflow_digest=self.workflow.digest,
            input=self.input,
            saga_steps=self.journal,
            attempt_count=1,
            max_attempts=self.workflow.max_attempts,
            lease_epoch=self.lease_epoch,
            worker_id=WORKER_ID,
        )
        while True:
            cancelling = None
            if self.saga_status == "CANCELLING" and saga.frozen_plan(self.journal) is None:
                cancelling = saga.Cancel.of(self.failure_code)
            settling = (
                saga.next_step(self.workflow, self.journal, cancelling) if cancelling else None
            )
            nxt: saga.Next | None = None
            if cancelling is not None and settling is None:
                decision = saga.cancel(
                    self.workflow, self.journal, cancelling.code, cancelling.reason
                )
            else:
                nxt = settling or saga.next_step(self.workflow, self.journal)
                assert nxt is not None, "a claimed run always has something left to do"
                if (
                    cancelling is None
                    and nxt.phase == saga.FORWARD
                    and nxt.step.name in self._cancel_at
                ):
                    self._cancel_at.discard(nxt.step.name)
                    self.cancel()
                    self.run_status = states.RUNNING
                    self._claimable_at = None
                    continue
                entry = self._attempt(claim, nxt)
                decision = saga.decide(
                    self.workflow, self.journal, nxt, entry, self._rng, cancelling=cancelling
                )
            if self._apply(nxt, decision):
                return

    def _attempt(self, claim: leases.Claim, nxt: saga.Next) -> dict[str, Any]:
        if nxt.step.is_wait:  # the runner's _attempt_wait, with the simulator's signals
            wait = nxt.step.wait
            assert wait is not None
            after = saga.signals_taken(self.journal, wait.signal) if wait.signal else 0
            found = next(
                (
                    {k: s[k] for k in ("seq", "signal_id", "payload")}
                    for s in self._signals
                    if s["name"] == wait.signal and s["seq"] > after
                ),
                None,
            )
            entry = saga.attempt_identity(
                self.run_id, nxt, claim=1, lease_epoch=self.lease_epoch, worker_id=WORKER_ID
            )
            entry.update(saga.wait_outcome(self.journal, nxt, found, self.now))
            return entry
        held = cast(Lease, _Held())
        return runner._attempt(claim, self._instrumented(nxt), self.journal, held)

    def _instrumented(self, nxt: saga.Next) -> saga.Next:
        """``nxt`` with its handler for this phase recording the call, or giving the
        injected outcome instead."""
        step = nxt.step
        handlers: dict[str, Callable[[StepContext], Any] | None] = {
            saga.FORWARD: step.handler,
            saga.COMPENSATE: step.compensate,
            saga.RESOLVE: step.resolver.check if step.resolver else None,
        }
        original = handlers[nxt.phase]
        if original is None:
            return nxt
        key = (step.name, nxt.phase, nxt.attempt)

        def call(ctx: StepContext) -> Any:
            injected = self._injected.pop(key, None)
            if injected is not None:
                return injected.happen()
            self.calls.append(Call(ctx.step, ctx.phase, ctx.attempt, ctx))
            return original(ctx)

        changed: Step
        if nxt.phase == saga.FORWARD:
            changed = dataclasses.replace(step, handler=call)
        elif nxt.phase == saga.COMPENSATE:
            changed = dataclasses.replace(step, compensate=call)
        else:
            assert step.resolver is not None
            resolver: Resolver = dataclasses.replace(step.resolver, check=call)
            changed = dataclasses.replace(step, resolver=resolver)
        return dataclasses.replace(nxt, step=changed)

    def _apply(self, nxt: saga.Next | None, d: saga.Decision) -> bool:
        """Write ``d`` as the segment's statement would; True when the segment ends."""
        self.journal.extend(json.loads(json.dumps(d.entries)))  # stored as jsonb would be
        if d.failure_code is not None:
            self.failure_code, self.failure_reason = d.failure_code, d.failure_reason
        step = nxt.step.name if nxt is not None else None
        if d.kind == "record":
            if self.saga_status == "WAITING_RESOLUTION":
                self.saga_status = "RUNNING"
            return False
        if d.kind == "turn_back":
            self.saga_status = "COMPENSATING"
            return False
        if d.kind == "complete":
            self.run_status, self.saga_status, self.output = (
                states.COMPLETED,
                "COMPLETED",
                d.output,
            )
            return True
        if d.kind == "compensated":
            cancelled = d.failure_code == saga.CANCELLED
            self.run_status = states.CANCELLED if cancelled else states.FAILED
            self.saga_status = "COMPENSATED"
            return True
        assert nxt is not None
        if d.kind in ("retry", "resolve"):
            if d.kind == "resolve":
                self.saga_status = "WAITING_RESOLUTION"
            kind = "resolver" if d.kind == "resolve" or nxt.phase == saga.RESOLVE else "retry"
            self._release(Waiting(kind, step, self.now + d.delay))
        elif d.kind == "wait":
            assert nxt.step.wait is not None
            signal = nxt.step.wait.signal
            self._release(
                Waiting("signal" if signal else "sleep", step, self.now + d.delay, signal)
            )
        elif d.kind == "wait_tool":
            self.run_status = states.WAITING_TOOL
            self.waiting = Waiting("tool", step, self.now + d.delay)
            self._timers.append(_Timer(self.now + d.delay, "tool_timeout", step, nxt.attempt))
        elif d.kind == "wait_approval":
            self.run_status = states.WAITING_APPROVAL
            self.waiting = Waiting("approval", step, self.now + d.delay)
            self._approval = (nxt.step.name, nxt.attempt)
            self._timers.append(_Timer(self.now + d.delay, "approval_expiry", step, nxt.attempt))
        elif d.kind == "escalate":
            self.run_status, self.saga_status = states.WAITING_APPROVAL, "MANUAL_INTERVENTION"
            self.waiting = Waiting("person", step)
        else:
            raise AssertionError(f"unknown decision {d.kind}")
        return True

    def _release(self, waiting: Waiting) -> None:
        """PENDING, no worker, claimable when the wait ends."""
        self.run_status = states.PENDING
        self.waiting = waiting
        self._claimable_at = waiting.until

    def _resume(self, run_status: str) -> None:
        """Claimable now (a result, a decision, a signal, a cancel or a timer came)."""
        self.run_status = run_status
        self._claimable_at = self.now

    def _decide(
        self, decision: str, step: str | None, actor: str, comment: str | None
    ) -> Simulator:
        if self._approval is None or self.run_status != states.WAITING_APPROVAL:
            raise ValueError("the run is not waiting for an approval")
        waiting_step, attempt = self._approval
        if step is not None and step != waiting_step:
            raise ValueError(f"the run waits for the approval of {waiting_step}, not {step}")
        self._approval = None
        self.journal.append(
            {
                "phase": saga.APPROVAL,
                "step": waiting_step,
                "attempt": attempt,
                "decision": decision,
                "actor": actor,
                "via": "api",
                "comment": comment,
            }
        )
        self._resume(states.RESUMED)
        return self

    def _tool_attempt(self, step: str, status: str) -> int | None:
        """The attempt a tool result belongs to, or None when it is late (the tool-results
        statement's rule)."""
        dispatches = [
            e for e in self.journal if e.get("step") == step and e.get("status") == saga.DISPATCHED
        ]
        if not dispatches:
            return None
        dispatch = max(dispatches, key=lambda e: int(e["attempt"]))
        current = saga.next_step(self.workflow, self.journal)
        if current is None or current.step.name != step:
            return None
        if self.run_status == states.WAITING_TOOL:
            return int(dispatch["attempt"])
        answered_later = any(
            e.get("phase") == saga.TOOL_RESULT
            and e.get("step") == step
            and int(e["attempt"]) > int(dispatch["attempt"])
            for e in self.journal
        )
        if (
            status == saga.SUCCEEDED
            and self.run_status == states.PENDING
            and self.saga_status == "RUNNING"
            and dispatch.get("late_result") in ("accept", "compensate")
            and not answered_later
        ):
            return int(dispatch["attempt"]) + 1
        return None

    def _fire(self, timer: _Timer) -> None:
        """A timer's effect, when the run still waits for it (else it is stale)."""
        if timer.kind == "deadline":
            if not self.finished and self.saga_status in ("RUNNING", "WAITING_RESOLUTION"):
                self.cancel(saga.DEADLINE)
            return
        if timer.kind == "approval_expiry" and self._approval == (timer.step, timer.attempt):
            self._approval = None
            self.journal.append(
                {
                    "phase": saga.APPROVAL,
                    "step": timer.step,
                    "attempt": timer.attempt,
                    "decision": "expired",
                    "actor": "timer",
                }
            )
            self._resume(states.RESUMED)
            return
        if timer.kind == "tool_timeout" and self.run_status == states.WAITING_TOOL:
            latest = max(
                int(e["attempt"])
                for e in self.journal
                if e.get("step") == timer.step and e.get("status") == saga.DISPATCHED
            )
            if latest == timer.attempt:
                self.journal.append(
                    {
                        "phase": saga.TOOL_RESULT,
                        "step": timer.step,
                        "attempt": timer.attempt,
                        "status": saga.FAILED,
                        "error": "no tool result within the timeout",
                    }
                )
                self._resume(states.PENDING)
