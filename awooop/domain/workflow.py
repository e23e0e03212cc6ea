"""Declaring workflows: a name, a version, ordered steps with handlers.

::

    def restart(ctx: StepContext) -> dict:
        response = http.post(url, headers={"Idempotency-Key": ctx.effect_id})
        if response.status_code == 409:
            raise Reject("service is locked")        # business no: compensate
        response.raise_for_status()                   # anything else: retried
        return {"restarted": True}

    def undo_restart(ctx: StepContext) -> None: ...

    WORKFLOW = Workflow("restart", version=1, steps=[
        Step("restart", restart, compensate=undo_restart,
             retry=RetryPolicy(max_retries=3, base_delay=2.0)),
    ])

A handler receives a :class:`StepContext` and returns something JSON-serialisable. Its
outcome is what it does: return → SUCCEEDED; raise :class:`Reject` → business rejection,
compensation of the steps that succeeded, in reverse order; raise :class:`Halt` → manual
intervention; any other exception → transient: retried with back-off by the step's
:class:`RetryPolicy`, a rejection once retries are exhausted. A handler may run more than once
(work is at-least-once): ``ctx.effect_id`` is the idempotency key for anything it changes
elsewhere — the same across retries and crashes of this step in this phase. A handler may tag
the run (``ctx.tag(service="db-1")``) so that people can find it later.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from awooop import events
from awooop.domain import schedule as cron
from awooop.domain import tags as run_tags
from awooop.domain.timing import RENEWALS_PER_TTL, renewals_fit

DEFAULT_MAX_ATTEMPTS = 3


class LeaseTooShort(ValueError):
    """A workflow's lease TTL is shorter than three renewal intervals: one slow renewal
    would lose it."""


# What a handler is called for: running its step, undoing it, or (a resolver) finding out
# whether its effect happened.
Phase = Literal["forward", "compensate", "resolve"]


@dataclass(frozen=True)
class StepContext:
    run_id: str
    project_id: str
    input: Mapping[str, Any]
    # Outputs of the steps that already succeeded, by step name.
    outputs: Mapping[str, Any]
    step: str
    # This step's attempt in this phase: 1, then 2 after a retry (a crash re-runs the same).
    attempt: int
    # Stable across retries of this step: the idempotency key for downstream calls.
    effect_id: str
    # Unique per attempt.
    command_id: str
    # This attempt's trace context as a W3C traceparent (its span, when AwoooP makes spans:
    # AWOOOP_TRACING), for a handler's own outgoing calls; None when tracing is off.
    traceparent: str | None = None
    # "forward"; "compensate" when undoing a step that succeeded; "resolve" when a resolver
    # asks whether the forward call's effect happened.
    phase: Phase = "forward"
    _heartbeat: Callable[[], bool] = field(repr=False, default=lambda: True)
    _lease_held: Callable[[], bool] = field(repr=False, default=lambda: True)
    # Set when the lease is lost (reaped, re-claimed, or not renewed for ttl - interval):
    # a long handler can wait on it (``ctx.lease_lost.wait(timeout)``) instead of polling,
    # and should stop — nothing it returns afterwards is recorded.
    lease_lost: threading.Event = field(repr=False, default_factory=threading.Event)
    # The run's tags before this attempt (from its journal), and the ones this attempt set:
    # they go into the attempt's journal entry, written with its record.
    run_tags: Mapping[str, str] = field(repr=False, default_factory=dict)
    tags_set: dict[str, str] = field(repr=False, default_factory=dict)

    def tag(self, tags: Mapping[str, str] | None = None, /, **more: str) -> None:
        """Tag the run so that people can find it: ``ctx.tag(service="db-1", host="x")``
        (or a mapping, for keys that are not Python names: ``ctx.tag({"k8s.ns": "web"})``).
        Recorded with this attempt's outcome, whatever it is, and only if the worker still
        holds the run then; a later value of a key replaces the earlier one. At most
        16 tags per run, keys identifiers of up to 64 characters, values strings of up to
        256: anything else raises :class:`~awooop.domain.tags.TagError` here (the step
        then fails without retries)."""
        given = {**(tags or {}), **more}
        self.tags_set.update(run_tags.checked(given, {**self.run_tags, **self.tags_set}))

    def heartbeat(self) -> bool:
        """Renew the lease now (long steps); False when the lease is lost — stop then."""
        return self._heartbeat()

    @property
    def lease_held(self) -> bool:
        return not self.lease_lost.is_set() and self._lease_held()

    @property
    def channel(self) -> events.Channel:
        """Where the run's event came from."""
        return events.run_input(self)["channel"]

    @property
    def event(self) -> events.ChannelEvent:
        """The event as its provider sent it, whatever the channel. A step written for one
        channel reads it typed, checked against the run's channel, with that channel's helper:
        :func:`awooop.events.alertmanager_event` and its siblings."""
        return events.run_input(self)["event"]

    @property
    def meta(self) -> events.RunMeta:
        """Channel facts that are not in the event (the Gitea event type, LINE's
        destination)."""
        return events.run_input(self)["meta"]


Handler = Callable[[StepContext], Any]


class Reject(Exception):
    """The step said no (a business rejection): compensate what succeeded, then fail."""


class Halt(Exception):
    """Stop and hand the run to a person (manual intervention)."""


class Unknown(Exception):
    """The step cannot tell whether its effect happened: resolve it (the step's resolver),
    or hand it to a person when there is none."""


@dataclass(frozen=True)
class Resolver:
    """Finds out what happened to a step whose outcome is unknown.

    ``check(ctx)`` returns the step's output if the effect happened, raises :class:`Reject` if
    it did not (then the saga compensates), or raises :class:`Unknown` to be asked again in
    ``poll_interval`` seconds, at most ``budget`` seconds in all (counted in polls, so no clock
    is needed); then a person decides.
    """

    check: Callable[[StepContext], Any]
    budget: float = 300.0
    poll_interval: float = 10.0

    @property
    def max_polls(self) -> int:
        return max(1, int(self.budget // max(self.poll_interval, 0.001)))


APPROVAL_REJECT_POLICIES = ("compensate", "continue")
DEFAULT_APPROVAL_TTL_SECONDS = 900.0  # an approval token lives 15 minutes


@dataclass(frozen=True)
class Approval:
    """A person must approve before the saga goes on.

    The step's handler builds the prompt: it returns the text to show (a string), or None
    when this run needs no approval (the step then succeeds at once with
    ``{"needed": false}``). Otherwise the run waits in WAITING_APPROVAL, its lease released,
    until someone decides:

    - ``roles``: API token roles that may decide through ``POST …/approvals/{token}``;
    - ``chat_users``: Telegram / LINE user ids that may press the buttons, on top of the
      project's ``approvers`` configuration (``{"telegram": [...], "line": [...]}``);
    - ``ttl_seconds``: after this the approval expires and the run fails (E-APPROVAL-002)
      after compensating;
    - ``on_reject``: "compensate" (the default: undo what succeeded, fail E-APPROVAL-001) or
      "continue" (the step succeeds with ``{"approved": false}`` and later steps decide).
    """

    action: str
    ttl_seconds: float = DEFAULT_APPROVAL_TTL_SECONDS
    roles: tuple[str, ...] = ("operator", "admin")
    chat_users: tuple[str, ...] = ()
    on_reject: str = "compensate"

    def __post_init__(self) -> None:
        if self.on_reject not in APPROVAL_REJECT_POLICIES:
            raise ValueError(f"approval on_reject must be one of {APPROVAL_REJECT_POLICIES}")
        if self.ttl_seconds <= 0 or not self.action or len(self.action) > 128:
            raise ValueError(f"invalid approval: {self}")


@dataclass(frozen=True)
class RetryPolicy:
    """Transient failures: up to ``max_retries`` more attempts, exponential back-off.

    The n-th retry waits ``min(max_delay, base_delay * factor**(n-1))``, spread by ±``jitter``
    (a fraction) so that runs failing together do not retry together.
    """

    max_retries: int = 0
    base_delay: float = 1.0
    factor: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.1
    # Only these exceptions are retried; any other fails the step at once (then compensates).
    retry_on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        if (
            self.max_retries < 0
            or self.base_delay < 0
            or self.factor < 1
            or not (0 <= self.jitter < 1)
        ):
            raise ValueError(f"invalid retry policy: {self}")

    def retries(self, exc: BaseException) -> bool:
        return isinstance(exc, self.retry_on)

    def describe(self) -> dict[str, Any]:
        shape: dict[str, Any] = {k: v for k, v in vars(self).items() if k != "retry_on"}
        shape["retry_on"] = sorted(_name(t) or "" for t in self.retry_on)
        return shape

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        base = min(self.max_delay, self.base_delay * self.factor ** (retry - 1))
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return max(0.0, base * (1 + spread))


WAIT_TIMEOUT_POLICIES = ("fail", "continue")
MAX_SIGNAL_NAME_LENGTH = 64


def check_signal_name(name: str) -> str:
    """A signal name: 1 to 64 letters, digits, ``_``, ``-`` or ``.`` (it appears in URLs)."""
    if not (
        0 < len(name) <= MAX_SIGNAL_NAME_LENGTH
        and name.isascii()
        and all(c.isalnum() or c in "_-." for c in name)
    ):
        raise ValueError(
            f"signal name {name!r}: 1 to {MAX_SIGNAL_NAME_LENGTH} letters, digits, _ - or ."
        )
    return name


@dataclass(frozen=True)
class Wait:
    """A step that waits without holding a worker or a lease: for the signal ``signal`` at
    most ``seconds`` — or, with no signal, a durable sleep of ``seconds``. Build one with
    :func:`sleep` or :func:`wait_for_signal`.

    ``on_timeout`` (signal waits): "fail" — the step is rejected (E-STEP-005) and the saga
    compensates — or "continue": the step succeeds with ``{"received": false}``."""

    seconds: float
    signal: str | None = None
    on_timeout: str = "fail"

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError(f"a wait needs a positive duration, not {self.seconds!r}")
        if self.signal is not None:
            check_signal_name(self.signal)
        if self.on_timeout not in WAIT_TIMEOUT_POLICIES:
            raise ValueError(f"on_timeout must be one of {WAIT_TIMEOUT_POLICIES}")


NO_RETRY = RetryPolicy()
LATE_RESULT_POLICIES = ("accept", "ignore", "compensate")
# Compensations must not give up easily: their own, larger budget.
COMPENSATION_RETRY = RetryPolicy(max_retries=4, base_delay=1.0)


def _name(fn: Callable[..., Any] | None) -> str | None:
    return None if fn is None else f"{fn.__module__}.{fn.__qualname__}"


@dataclass(frozen=True)
class Step:
    name: str
    handler: Handler
    compensate: Handler | None = None
    retry: RetryPolicy = NO_RETRY
    compensation_retry: RetryPolicy = COMPENSATION_RETRY
    # A tool step: ``handler`` dispatches an asynchronous call (with ``ctx.effect_id`` as its
    # correlation id) and the run waits — WAITING_TOOL, worker released — for the result
    # (``POST …/runs/{run_id}/tool-results``) at most this many seconds; a missing result
    # is a transient failure (retried by ``retry``: the call is dispatched again).
    tool_timeout: float | None = None
    # A tool step's success that arrives after the run stopped waiting for it. While the step
    # waits to be retried, "accept" and "compensate" take it as the step's result (no new
    # dispatch) and "ignore" dispatches again. Once the saga has moved past the step,
    # "compensate" undoes the late effect in a follow-up run; the others only record it.
    late_result: str = "accept"
    resolver: Resolver | None = None
    # After this many seconds (None: AWOOOP_STEP_TIMEOUT_SECONDS) the due-timer sweep takes
    # the run from its worker (fencing its late writes) and the outcome is UNKNOWN: resolved
    # by ``resolver``, or a person decides. Not for tool steps (``tool_timeout`` bounds the
    # wait for their result).
    timeout: float | None = None
    # An approval step: ``handler`` returns the prompt; the run waits for a person.
    approval: Approval | None = None
    # A wait step (:func:`sleep`, :func:`wait_for_signal`): no handler runs.
    wait: Wait | None = None

    def __post_init__(self) -> None:
        if self.wait is not None and (
            self.is_tool or self.resolver or self.timeout or self.approval or self.compensate
        ):
            raise ValueError(
                f"step {self.name}: a wait step cannot be a tool or an approval, time out, "
                "or have a resolver or a compensation"
            )
        if self.approval is not None and (self.is_tool or self.resolver or self.timeout):
            raise ValueError(f"step {self.name}: an approval step cannot be a tool or time out")
        if self.late_result not in LATE_RESULT_POLICIES:
            raise ValueError(f"step {self.name}: late_result must be one of {LATE_RESULT_POLICIES}")
        if self.late_result == "compensate" and self.compensate is None:
            raise ValueError(f"step {self.name}: late_result 'compensate' needs a compensation")

    @property
    def is_tool(self) -> bool:
        return self.tool_timeout is not None

    @property
    def is_approval(self) -> bool:
        return self.approval is not None

    @property
    def is_wait(self) -> bool:
        return self.wait is not None

    def describe(self) -> dict[str, Any]:
        shape: dict[str, Any] = {
            "name": self.name,
            "handler": _name(self.handler),
            "compensate": _name(self.compensate),
            "retry": self.retry.describe(),
            "compensation_retry": self.compensation_retry.describe(),
            "tool_timeout": self.tool_timeout,
            "late_result": self.late_result,
            "timeout": self.timeout,
            "resolver": None
            if self.resolver is None
            else {
                "check": _name(self.resolver.check),
                "budget": self.resolver.budget,
                "poll_interval": self.resolver.poll_interval,
            },
        }
        if self.approval is not None:  # only then: digests of other steps stay as they were
            shape["approval"] = vars(self.approval)
        if self.wait is not None:
            shape["wait"] = vars(self.wait)
        return shape


def _waits(ctx: StepContext) -> None:
    """The handler of a wait step: never called (the runner waits instead)."""
    raise AssertionError(f"step {ctx.step} is a wait step; its handler does not run")


def sleep(name: str, seconds: float) -> Step:
    """A step that sleeps ``seconds`` durably: the run releases its worker and its lease,
    and a timer resumes it. Its output is ``{"slept_seconds": seconds}``."""
    return Step(name, _waits, wait=Wait(seconds))


def wait_for_signal(name: str, signal: str, timeout: float, on_timeout: str = "fail") -> Step:
    """A step that waits for the signal ``signal`` (``POST …/runs/{run_id}/signals/{signal}``,
    or a correlated event) at most ``timeout`` seconds, holding no worker and no lease. A
    signal sent before the step began is kept for it. Its output is ``{"signal": signal,
    "received": true, "signal_id": …, "payload": {…}}``; on timeout, see
    :class:`Wait`'s ``on_timeout``."""
    return Step(name, _waits, wait=Wait(timeout, signal, on_timeout))


@dataclass(frozen=True)
class Correlation:
    """Where a later event belongs: the open run of the same workflow and project with this
    ``key`` gets it as the signal ``signal`` instead of a new run starting."""

    key: str
    signal: str

    def __post_init__(self) -> None:
        if not (0 < len(self.key) <= 256):
            raise ValueError("a correlation key must be 1 to 256 characters")
        check_signal_name(self.signal)


# Given a run's input (``{"channel", "event", …}``), the event's correlation, or None for an
# event that always starts a run.
Correlate = Callable[[Mapping[str, Any]], Correlation | None]


@dataclass(frozen=True)
class Workflow:
    name: str
    version: int
    steps: tuple[Step, ...]
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    # None: the deployment's AWOOOP_LEASE_TTL_SECONDS.
    lease_ttl_seconds: float | None = None
    description: str = ""
    # Seconds from admission after which a run still going forward is turned back
    # (compensated) and fails with E-SAGA-003. None: no deadline.
    deadline_seconds: float | None = None
    # Admission-time properties (not part of the digest: runs in flight are unaffected).
    # Events with the key of an open run are delivered to it as a signal.
    correlate: Correlate | None = None
    # A cron expression of five fields, in UTC: the workflow is started once per tick in
    # each project that allows it (awooop.domain.schedule); checked here.
    schedule: str | None = None

    def __init__(
        self,
        name: str,
        version: int,
        steps: list[Step] | tuple[Step, ...],
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        lease_ttl_seconds: float | None = None,
        description: str = "",
        deadline_seconds: float | None = None,
        correlate: Correlate | None = None,
        schedule: str | None = None,
    ) -> None:
        if not steps:
            raise ValueError(f"workflow {name!r} has no steps")
        names = [s.name for s in steps]
        if len(set(names)) != len(names):
            raise ValueError(f"workflow {name!r} has duplicate step names: {names}")
        if max_attempts < 1:
            raise ValueError(f"workflow {name!r}: max_attempts must be >= 1")
        if lease_ttl_seconds is not None and lease_ttl_seconds <= 0:
            raise ValueError(f"workflow {name!r}: lease_ttl_seconds must be positive")
        if schedule is not None:
            try:
                cron.check(schedule)
            except cron.InvalidSchedule as exc:
                raise cron.InvalidSchedule(f"workflow {name!r}: {exc}") from None
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "steps", tuple(steps))
        object.__setattr__(self, "max_attempts", max_attempts)
        object.__setattr__(self, "lease_ttl_seconds", lease_ttl_seconds)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "deadline_seconds", deadline_seconds)
        object.__setattr__(self, "correlate", correlate)
        object.__setattr__(self, "schedule", schedule)

    @functools.cached_property
    def digest(self) -> str:
        """SHA-256 over the structure and policies; a run keeps the digest it started with."""
        shape = {
            "name": self.name,
            "version": self.version,
            "max_attempts": self.max_attempts,
            "lease_ttl_seconds": self.lease_ttl_seconds,
            "deadline_seconds": self.deadline_seconds,
            "steps": [s.describe() for s in self.steps],
        }
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()

    def check_lease(self, renewal_interval: float) -> None:
        """Refuse a lease TTL shorter than three renewal intervals (``LeaseTooShort``)."""
        ttl = self.lease_ttl_seconds
        if ttl is not None and not renewals_fit(ttl, renewal_interval):
            raise LeaseTooShort(
                f"workflow {self.name} v{self.version}: lease_ttl_seconds={ttl:g} is shorter "
                f"than {RENEWALS_PER_TTL} renewal intervals of "
                f"AWOOOP_HEARTBEAT_INTERVAL_SECONDS={renewal_interval:g}; use at least "
                f"{renewal_interval * RENEWALS_PER_TTL:g} or renew more often"
            )

    def step_index(self, name: str) -> int:
        for i, step in enumerate(self.steps):
            if step.name == name:
                return i
        raise KeyError(name)


def check_leases(workflows: Iterable[Workflow], renewal_interval: float) -> None:
    """:meth:`Workflow.check_lease` for each (a worker's start-up check)."""
    for workflow in workflows:
        workflow.check_lease(renewal_interval)
