"""Workflows of the chaos suite, registered the documented way a deployment adds its own:
``AWOOOP_WORKFLOW_MODULES=tests.chaos.workflows`` in every process's environment.

``chaos-saga`` v1 — four steps, three of them side effects that POST to the recorder
(``AWOOOP_CHAOS_RECORDER_URL``, set by the harness) with the step's ``effect_id`` as
``Idempotency-Key``:

- ``reserve``: an effect; compensated by ``release`` (an effect with the compensation's
  effect id);
- ``work``: the slow step — waits ``event["slow"]`` seconds (0 by default) on the lease, then
  makes its effect; stops early (raises) when the lease is lost, as a long handler should;
  compensated by ``undo_work``;
- ``decide``: raises :class:`Reject` when ``event["reject"]`` is true: the saga compensates
  ``work`` then ``reserve``;
- ``report``: an effect.

``chaos-timers`` v1 — a workflow made of durable timers (scenario 6), every handler call
recorded at the recorder under ``exec:<run>:<phase>:<step>:<attempt>`` (an execution, so a
wake-up that ran twice shows as a key seen twice), effects under their ``effect_id``:

- ``flaky``: fails transiently (``ConnectionError``) on its first ``event["fail_times"]``
  attempts, then makes its effect — each failure is a retry timer (short back-off);
- ``unsure``: makes its effect, then raises :class:`Unknown`; its resolver answers Unknown on
  its first ``event["unknown_polls"]`` polls, then settles it — each poll is a resolver timer;
- ``done``: an effect.

A run has ``fail_times + 1 + unknown_polls`` timers (:func:`timer_ids`).

``chaos-cooperative`` v1 — a long handler that acts only while it holds the run (scenarios 9
and 10), then a report:

- ``act``: for ``event["act_for"]`` seconds, every ``event["tick"]`` seconds, reads
  ``ctx.lease_held`` and, while it is true, makes a side effect at the recorder (``what`` =
  ``tick``, a key of its own per call: each is a separate act, timed by the recorder); stops
  (raises) as soon as it reads false;
- ``report``: an effect.

A recorder call that gets a 5xx or no answer raises (a transient failure: the step is
retried with back-off). The event payload comes from the API channel (``POST …/runs``);
other channels' payloads work too (no ``slow``, no ``reject``).

Only the standard library and :mod:`awooop.domain` are imported: this module is loaded by
the worker processes.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from typing import Any

from awooop.domain.workflow import (
    Reject,
    Resolver,
    RetryPolicy,
    Step,
    StepContext,
    Unknown,
    Workflow,
)
from awooop.workflows.registry import register

RECORDER_ENV = "AWOOOP_CHAOS_RECORDER_URL"
NAME = "chaos-saga"
# Steps whose forward phase makes an effect at the recorder.
EFFECT_STEPS = ("reserve", "work", "report")
# Compensations that make one.
COMPENSATION_EFFECT_STEPS = ("reserve", "work")
# A step hit by a dead recorder or a dropped connection is retried, not failed.
RETRY = RetryPolicy(max_retries=6, base_delay=0.2, factor=2.0, max_delay=3.0, jitter=0.3)


class LeaseLostStop(RuntimeError):
    """The lease was lost while the slow step waited: stop (nothing we return is kept)."""


def _event(ctx: StepContext) -> dict[str, Any]:
    event = ctx.input.get("event")
    return event if isinstance(event, dict) else {}


def effect(ctx: StepContext, what: str, key: str | None = None) -> dict[str, Any]:
    """POST one effect to the recorder (under ``key``, by default the step's effect id);
    raises on anything but 2xx (the step is retried)."""
    url = os.environ.get(RECORDER_ENV)
    if not url:
        raise RuntimeError(f"{RECORDER_ENV} is not set")
    body = json.dumps(
        {
            "run_id": ctx.run_id,
            "step": ctx.step,
            "phase": ctx.phase,
            "what": what,
            "attempt": ctx.attempt,
            "command_id": ctx.command_id,
            "pid": os.getpid(),
        }
    ).encode()
    request = urllib.request.Request(
        f"{url}/effects",
        data=body,
        method="POST",
        headers={"Idempotency-Key": key or ctx.effect_id, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback
        return json.loads(response.read())


def _reserve(ctx: StepContext) -> dict[str, Any]:
    return {"reserved": effect(ctx, "reserve")["key"]}


def _release(ctx: StepContext) -> None:
    effect(ctx, "release")


def _work(ctx: StepContext) -> dict[str, Any]:
    slow = float(_event(ctx).get("slow", 0) or 0)
    if slow > 0 and ctx.lease_lost.wait(slow):
        raise LeaseLostStop("lease lost during the slow step")
    return {"worked": effect(ctx, "work")["key"], "slow": slow}


def _undo_work(ctx: StepContext) -> None:
    effect(ctx, "undo_work")


def _decide(ctx: StepContext) -> dict[str, Any]:
    if _event(ctx).get("reject"):
        raise Reject("the change was refused")
    return {"decided": True}


def _report(ctx: StepContext) -> dict[str, Any]:
    return {"reported": effect(ctx, "report")["key"]}


SAGA = register(
    Workflow(
        NAME,
        1,
        [
            Step("reserve", _reserve, compensate=_release, retry=RETRY),
            Step("work", _work, compensate=_undo_work, retry=RETRY),
            Step("decide", _decide),
            Step("report", _report, retry=RETRY),
        ],
        # A run may be caught by several kills; the crash budget is per segment.
        max_attempts=5,
        description="chaos suite: effects at the recorder, a slow step, a compensation",
    )
)


# --- chaos-timers (scenario 6) ----------------------------------------------------------

TIMERS_NAME = "chaos-timers"
EXECUTION_PREFIX = "exec:"
# Steps whose forward phase makes an effect (under its effect id).
TIMER_EFFECT_STEPS = ("flaky", "unsure", "done")
FLAKY_RETRY = RetryPolicy(max_retries=6, base_delay=0.3, factor=1.5, max_delay=2.0, jitter=0.3)
POLL_INTERVAL = 0.5


def execution_key(run_id: str, phase: str, step: str, attempt: int) -> str:
    return f"{EXECUTION_PREFIX}{run_id}:{phase}:{step}:{attempt}"


def _executed(ctx: StepContext) -> None:
    effect(ctx, "execution", execution_key(ctx.run_id, ctx.phase, ctx.step, ctx.attempt))


def _flaky(ctx: StepContext) -> dict[str, Any]:
    _executed(ctx)
    if ctx.attempt <= int(_event(ctx).get("fail_times", 0) or 0):
        raise ConnectionError(f"attempt {ctx.attempt}: upstream unavailable")
    return {"flaky": effect(ctx, "flaky")["key"], "attempt": ctx.attempt}


def _unsure(ctx: StepContext) -> None:
    _executed(ctx)
    effect(ctx, "unsure")
    raise Unknown("the call timed out: did it happen?")


def _resolve_unsure(ctx: StepContext) -> dict[str, Any]:
    _executed(ctx)  # ctx.attempt is the poll's number
    if ctx.attempt <= int(_event(ctx).get("unknown_polls", 0) or 0):
        raise Unknown("still checking")
    return {"settled_at_poll": ctx.attempt}


def _done(ctx: StepContext) -> dict[str, Any]:
    return {"done": effect(ctx, "done")["key"]}


TIMERS = register(
    Workflow(
        TIMERS_NAME,
        1,
        [
            Step("flaky", _flaky, retry=FLAKY_RETRY),
            Step(
                "unsure",
                _unsure,
                retry=RETRY,
                resolver=Resolver(
                    _resolve_unsure, budget=POLL_INTERVAL * 20, poll_interval=POLL_INTERVAL
                ),
            ),
            Step("done", _done, retry=RETRY),
        ],
        description="chaos suite: retry and resolver timers",
    )
)


def timer_ids(run_id: str, fail_times: int, unknown_polls: int) -> set[str]:
    """The timers a ``chaos-timers`` run sets (ids as ``awooop.store.segments`` names them):
    one retry wake-up per failure of ``flaky``; the first resolver poll (named by the unknown
    forward attempt), then one per poll that could not tell."""
    ids = {f"{run_id}:forward:flaky:retry:{a}" for a in range(1, fail_times + 1)}
    ids.add(f"{run_id}:forward:unsure:retry:1")
    ids |= {f"{run_id}:resolve:unsure:retry:{p}" for p in range(1, unknown_polls + 1)}
    return ids


def executions(run_id: str, fail_times: int, unknown_polls: int) -> set[str]:
    """The handler calls a ``chaos-timers`` run makes, each exactly once."""
    keys = {execution_key(run_id, "forward", "flaky", a) for a in range(1, fail_times + 2)}
    keys.add(execution_key(run_id, "forward", "unsure", 1))
    keys |= {execution_key(run_id, "resolve", "unsure", p) for p in range(1, unknown_polls + 2)}
    return keys


# --- chaos-cooperative (scenarios 9 and 10) -----------------------------------------------

COOPERATIVE_NAME = "chaos-cooperative"
TICK = "tick"


def _act(ctx: StepContext) -> dict[str, Any]:
    event = _event(ctx)
    act_for = float(event.get("act_for", 0) or 0)
    tick = float(event.get("tick", 0.2) or 0.2)
    started = time.monotonic()
    acts = 0
    while True:
        if not ctx.lease_held:
            raise LeaseLostStop(f"lease lost after {acts} acts: no further side effect")
        effect(ctx, TICK, f"{ctx.run_id}:{TICK}:{os.getpid()}:{ctx.attempt}:{acts}")
        acts += 1
        if time.monotonic() - started >= act_for:
            return {"acts": acts}
        ctx.lease_lost.wait(tick)


COOPERATIVE = register(
    Workflow(
        COOPERATIVE_NAME,
        1,
        [
            Step("act", _act, retry=RETRY),
            Step("report", _report, retry=RETRY),
        ],
        max_attempts=5,
        description="chaos suite: a long handler that checks its lease before each side effect",
    )
)
