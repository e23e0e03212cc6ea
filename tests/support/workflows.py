"""Workflows used only by tests (``AWOOOP_WORKFLOW_MODULES=tests.support.workflows``).

``test-gated``: its ``wait`` step blocks on an in-process gate named by the run input, then
records whether its lease is still held — for fencing tests in one process.
``test-crash``: its ``block`` step, when its marker file does not exist yet, writes it and
sleeps, so a test can SIGKILL the worker process mid-step.
``test-fail``: a step that raises.
``test-slow``: its ``work`` step appends a line to the run input's ``log`` file, then sleeps
``seconds`` — a long step under a live worker.
``test-cooperative``: its ``act`` step checks ``ctx.lease_held`` before each side effect
(a line in the input's ``log`` file) for ``seconds``.
``test-speaking``: its step logs a line with no fields of its own (log context tests).
``test-traced``: its steps call the project's automation endpoint and keep the
``ctx.traceparent`` each handler saw (tracing tests).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from awooop.channels import alertmanager
from awooop.domain.workflow import (
    Approval,
    Halt,
    Reject,
    Resolver,
    RetryPolicy,
    Step,
    StepContext,
    Unknown,
    Workflow,
    sleep,
    wait_for_signal,
)
from awooop.workflows import actions
from awooop.workflows.registry import register

GATES: dict[str, threading.Event] = {}
LEASE_HELD_AFTER_GATE: dict[str, bool] = {}


def _noop(ctx: StepContext) -> dict[str, Any]:
    return {"step": ctx.step, "attempt": ctx.attempt}


def _wait_for_gate(ctx: StepContext) -> dict[str, Any]:
    gate = ctx.input["event"]["gate"]
    GATES[gate].wait(timeout=30)
    LEASE_HELD_AFTER_GATE[gate] = ctx.heartbeat()
    return {"gate": gate}


def _block_first_attempt(ctx: StepContext) -> dict[str, Any]:
    marker = Path(ctx.input["event"]["marker"])
    if not marker.exists():  # the first execution, whichever worker runs it
        marker.write_text(ctx.command_id)
        time.sleep(120)  # the test kills the worker here
    return {"attempt": ctx.attempt, "effect_id": ctx.effect_id}


def _sleep_for(ctx: StepContext) -> dict[str, Any]:
    with open(ctx.input["event"]["log"], "a") as f:
        f.write(f"{ctx.command_id}\n")
    time.sleep(float(ctx.input["event"]["seconds"]))
    return {"slept": ctx.input["event"]["seconds"]}


def _fail(ctx: StepContext) -> None:
    raise RuntimeError("the downstream service said no")


def _act_while_held(ctx: StepContext) -> dict[str, Any]:
    """A cooperative long step: before each side effect it reads ``ctx.lease_held``, and each
    side effect is a line ``effect <pid> <wall time>`` appended to the input's ``log`` file
    (outside the database, as a restart of a service would be). It stops when the lease is
    no longer held (a line ``stopped``) or after ``seconds`` (a line ``finished``)."""
    log = Path(ctx.input["event"]["log"])
    end = time.monotonic() + float(ctx.input["event"]["seconds"])
    while time.monotonic() < end:
        if not ctx.lease_held:
            with log.open("a") as f:
                f.write(f"stopped {os.getpid()} {time.time():.6f}\n")
            return {"stopped": True}
        with log.open("a") as f:
            f.write(f"effect {os.getpid()} {time.time():.6f}\n")
        time.sleep(0.05)
    with log.open("a") as f:
        f.write(f"finished {os.getpid()} {time.time():.6f}\n")
    return {"stopped": False}


GATED = register(Workflow("test-gated", 1, [Step("wait", _wait_for_gate), Step("after", _noop)]))
CRASH = register(
    Workflow(
        "test-crash",
        1,
        [Step("before", _noop), Step("block", _block_first_attempt), Step("after", _noop)],
    )
)
SLOW = register(Workflow("test-slow", 1, [Step("work", _sleep_for), Step("after", _noop)]))
COOPERATIVE = register(
    Workflow("test-cooperative", 1, [Step("act", _act_while_held), Step("after", _noop)])
)
FAIL = register(
    Workflow("test-fail", 1, [Step("first", _noop), Step("broken", _fail), Step("never", _noop)])
)


# --- Saga workflows -------------------------------------------------------------------------
# Each records what its handlers did in CALLS[run_id] (in-process tests) and, when the input
# names a file, appends a line to it (tests across processes).

CALLS: dict[str, list[str]] = {}


def _note(ctx: StepContext, what: str) -> None:
    CALLS.setdefault(ctx.run_id, []).append(what)
    log_file = ctx.input["event"].get("log")
    if log_file:
        with open(log_file, "a") as f:
            f.write(f"{what} {ctx.effect_id} {ctx.attempt}\n")


def _do(ctx: StepContext) -> dict[str, Any]:
    _note(ctx, f"do:{ctx.step}")
    return {"done": ctx.step}


def _undo(ctx: StepContext) -> None:
    _note(ctx, f"undo:{ctx.step}")


def _reject(ctx: StepContext) -> None:
    _note(ctx, f"do:{ctx.step}")
    raise Reject("the change window is closed")


def _flaky(ctx: StepContext) -> dict[str, Any]:
    """Fails the first ``fail_times`` attempts (from the input), then succeeds."""
    _note(ctx, f"do:{ctx.step}")
    if ctx.attempt <= ctx.input["event"].get("fail_times", 0):
        raise ConnectionError(f"attempt {ctx.attempt}: upstream unavailable")
    return {"attempt": ctx.attempt}


def _halt(ctx: StepContext) -> None:
    _note(ctx, f"do:{ctx.step}")
    raise Halt("disk state unknown: a person must look")


def _undo_halts(ctx: StepContext) -> None:
    _note(ctx, f"undo:{ctx.step}")
    raise Halt("rollback refused")


def _undo_blocks_once(ctx: StepContext) -> None:
    """A compensation that blocks on its first execution (a test SIGKILLs the worker)."""
    _note(ctx, f"undo:{ctx.step}")
    marker = Path(ctx.input["event"]["marker"])
    if not marker.exists():
        marker.write_text(ctx.command_id)
        time.sleep(120)


def _call_endpoint(ctx: StepContext) -> dict[str, Any]:
    """POSTs to the test's HTTP endpoint with the effect id, then blocks on the first run."""
    import urllib.request

    event = ctx.input["event"]
    request = urllib.request.Request(
        event["url"],
        data=b"{}",
        method="POST",
        headers={"Idempotency-Key": ctx.effect_id, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()
    marker = Path(event["marker"])
    if not marker.exists():
        marker.write_text(ctx.command_id)
        time.sleep(120)  # killed here, after the side effect
    return {"called": True}


FAST_RETRY = RetryPolicy(max_retries=3, base_delay=0.2, factor=2.0, jitter=0.0)

SAGA = register(
    Workflow(
        "test-saga",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step("b", _do),  # nothing to undo
            Step("c", _do, compensate=_undo),
            Step("d", _reject, compensate=_undo),
        ],
    )
)
FLAKY = register(
    Workflow(
        "test-flaky",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step("flaky", _flaky, compensate=_undo, retry=FAST_RETRY),
            Step("after", _do),
        ],
    )
)
EXHAUSTED = register(
    Workflow(
        "test-exhausted",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step("flaky", _flaky, retry=RetryPolicy(max_retries=1, base_delay=0.1, jitter=0.0)),
        ],
    )
)
HALTING = register(
    Workflow("test-halt", 1, [Step("a", _do, compensate=_undo), Step("stop", _halt)])
)
UNDO_HALTS = register(
    Workflow(
        "test-undo-halts",
        1,
        [
            Step("a", _do, compensate=_undo_halts),
            Step("d", _reject),
        ],
    )
)
CRASH_IN_COMPENSATION = register(
    Workflow(
        "test-crash-compensation",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step("b", _do, compensate=_undo_blocks_once),
            Step("c", _reject),
        ],
    )
)
EFFECT = register(Workflow("test-effect", 1, [Step("call", _call_endpoint)]))


def _wait_then_do(ctx: StepContext) -> dict[str, Any]:
    _note(ctx, f"do:{ctx.step}")
    GATES[ctx.input["event"]["gate"]].wait(timeout=30)
    return {"done": ctx.step}


def _undo_halts_until_file(ctx: StepContext) -> None:
    _note(ctx, f"undo:{ctx.step}")
    if not Path(ctx.input["event"]["fixed"]).exists():
        raise Halt("rollback needs a person")


def _halt_first_time(ctx: StepContext) -> dict[str, Any]:
    """Halts until its marker file exists (and writes it): the first execution stops for a
    person, a retry after that goes through."""
    _note(ctx, f"do:{ctx.step}")
    marker = Path(ctx.input["event"]["marker"])
    if not marker.exists():
        marker.write_text(ctx.command_id)
        raise Halt("disk state unknown: a person must look")
    return {"checked": True}


HALT_ONCE = register(
    Workflow(
        "test-halt-once",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step("check", _halt_first_time),
            Step("after", _do),
        ],
    )
)
STEERABLE = register(
    Workflow(
        "test-steerable",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step("wait", _wait_then_do, compensate=_undo),
            Step("c", _do),
        ],
    )
)
UNDO_NEEDS_FIX = register(
    Workflow(
        "test-undo-needs-fix",
        1,
        [
            Step("a", _do, compensate=_undo_halts_until_file),
            Step("d", _reject),
        ],
    )
)


def _dispatch(ctx: StepContext) -> dict[str, Any]:
    """Sends the (pretend) asynchronous call; the test delivers its result."""
    _note(ctx, f"dispatch:{ctx.step}")
    return {"correlation_id": ctx.effect_id}


TOOL = register(
    Workflow(
        "test-tool",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step("diagnose", _dispatch, tool_timeout=30.0),
            Step("report", _do),
        ],
    )
)
TOOL_UNDONE = register(
    Workflow(
        "test-tool-undone",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step("diagnose", _dispatch, compensate=_undo, tool_timeout=30.0, retry=FAST_RETRY),
            Step("report", _do),
        ],
    )
)
TOOL_SHORT = register(
    Workflow(
        "test-tool-timeout",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step(
                "diagnose",
                _dispatch,
                tool_timeout=0.1,
                retry=RetryPolicy(max_retries=1, base_delay=0.0, jitter=0.0),
            ),
        ],
    )
)


def _unknown(ctx: StepContext) -> None:
    _note(ctx, f"do:{ctx.step}")
    raise Unknown("the restart request timed out")


def _resolve_after(ctx: StepContext) -> dict[str, Any]:
    """Unknown for the first ``unknown_polls`` polls, then the input's ``verdict``."""
    _note(ctx, f"resolve:{ctx.step}:{ctx.effect_id}")
    polls = sum(1 for c in CALLS[ctx.run_id] if c.startswith("resolve:"))
    if polls <= ctx.input["event"].get("unknown_polls", 0):
        raise Unknown("still checking")
    if ctx.input["event"].get("verdict") == "rejected":
        raise Reject("the restart never happened")
    return {"restarted": True}


RESOLVING = register(
    Workflow(
        "test-resolve",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step(
                "restart",
                _unknown,
                compensate=_undo,
                resolver=Resolver(_resolve_after, budget=0.3, poll_interval=0.1),
            ),
            Step("report", _do),
        ],
    )
)
NO_RESOLVER = register(Workflow("test-no-resolver", 1, [Step("restart", _unknown)]))


TIMEOUT = register(
    Workflow(
        "test-step-timeout",
        1,
        [
            Step("slow", _wait_then_do, timeout=0.2),
            Step("after", _do),
        ],
    )
)

# A step that sets a timeout longer than the deployment's default.
LONG_TIMEOUT = register(
    Workflow("test-step-timeout-long", 1, [Step("slow", _wait_then_do, timeout=30.0)])
)


DEADLINE = register(
    Workflow(
        "test-deadline",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step("wait", _wait_then_do, compensate=_undo),
            Step("c", _do),
        ],
        deadline_seconds=0.2,
    )
)


# Three no-op steps under a run deadline the sweep fires when a test asks (the finisher's).
DEADLINE_NOOP = register(
    Workflow(
        "test-deadline-noop",
        1,
        [Step("one", _do), Step("two", _do), Step("three", _do)],
        deadline_seconds=0.2,
    )
)


TOOL_ONCE = register(
    Workflow(
        "test-tool-once",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step("diagnose", _dispatch, tool_timeout=0.1),  # no retry: a timeout fails the run
        ],
    )
)
TOOL_IGNORE_LATE = register(
    Workflow(
        "test-tool-ignore-late",
        1,
        [
            Step(
                "diagnose",
                _dispatch,
                tool_timeout=0.1,
                late_result="ignore",
                retry=RetryPolicy(max_retries=1, base_delay=0.0, jitter=0.0),
            ),
        ],
    )
)


TOOL_COMPENSATE_LATE = register(
    Workflow(
        "test-tool-compensate-late",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step(
                "diagnose", _dispatch, compensate=_undo, tool_timeout=0.1, late_result="compensate"
            ),
        ],
    )
)


# --- Approval workflows ---------------------------------------------------------------------


def _ask(ctx: StepContext) -> str:
    _note(ctx, f"ask:{ctx.step}")
    return f"Restart {ctx.input['event'].get('service', 'db-1')}?"


def _approval_workflow(name: str, ttl: float, on_reject: str = "compensate") -> Workflow:
    return register(
        Workflow(
            name,
            1,
            [
                Step("prepare", _do, compensate=_undo),
                Step(
                    "approve",
                    _ask,
                    approval=Approval("restart-db", ttl_seconds=ttl, on_reject=on_reject),
                ),
                Step("act", _do),
            ],
        )
    )


APPROVAL = _approval_workflow("test-approval", ttl=900.0)
APPROVAL_SHORT = _approval_workflow("test-approval-short", ttl=1.0)
APPROVAL_CONTINUE = _approval_workflow("test-approval-continue", ttl=900.0, on_reject="continue")


def _speak(ctx: StepContext) -> dict[str, Any]:
    # No extra fields: the run's ids come from the context the worker bound.
    logging.getLogger("awooop.workflows.test").info(
        "step handler speaking", extra={"action": "test_step_spoke"}
    )
    return {"spoke": True}


SPEAKING = register(Workflow("test-speaking", 1, [Step("speak", _speak)]))


# --- Held outcomes --------------------------------------------------------------------------
# ``test-held-<outcome>``: step ``hold`` waits on the gate named by the input, then ends the
# way <outcome> says. A test records an intent (cancel, the deadline) while it waits.
# ``test-held-<outcome>-deadline``: the same with a run deadline a test can fire mid-step.


def _held(ctx: StepContext) -> dict[str, Any]:
    _note(ctx, f"do:{ctx.step}")
    GATES[ctx.input["event"]["gate"]].wait(timeout=30)
    outcome = ctx.input["event"]["outcome"]
    if outcome == "fail":
        raise ConnectionError("upstream unavailable")
    if outcome == "reject":
        raise Reject("the change window is closed")
    if outcome in ("unknown", "unknown-no-resolver"):
        raise Unknown("the restart request timed out")
    if outcome == "halt":
        raise Halt("disk state unknown: a person must look")
    return {"done": ctx.step}


def _held_prompt(ctx: StepContext) -> str:
    _note(ctx, f"ask:{ctx.step}")
    GATES[ctx.input["event"]["gate"]].wait(timeout=30)
    return "Go on?"


def _still_unknown(ctx: StepContext) -> None:
    raise Unknown("still checking")


HELD_STEPS: dict[str, Step] = {
    "succeed": Step("hold", _held, compensate=_undo),
    "complete": Step("hold", _held, compensate=_undo),
    "fail": Step("hold", _held, compensate=_undo, retry=FAST_RETRY),
    "reject": Step("hold", _held, compensate=_undo),
    "unknown": Step(
        "hold",
        _held,
        compensate=_undo,
        resolver=Resolver(_still_unknown, budget=60.0, poll_interval=30.0),
    ),
    "unknown-no-resolver": Step("hold", _held, compensate=_undo),
    "halt": Step("hold", _held, compensate=_undo),
    "tool": Step("hold", _held, compensate=_undo, tool_timeout=60.0),
    "approval": Step("hold", _held_prompt, approval=Approval("go-on", ttl_seconds=900.0)),
}


def _held_workflow(outcome: str, deadline: float | None) -> Workflow:
    steps = [Step("a", _do, compensate=_undo), HELD_STEPS[outcome]]
    if outcome != "complete":  # "complete": the held step is the last one
        steps.append(Step("c", _do, compensate=_undo))
    suffix = "-deadline" if deadline else ""
    return register(Workflow(f"test-held-{outcome}{suffix}", 1, steps, deadline_seconds=deadline))


HELD = {
    (outcome, deadline): _held_workflow(outcome, deadline)
    for outcome in HELD_STEPS
    for deadline in (None, 0.2)
}


# --- Attempt identity across operator resets ------------------------------------------------


def _undo_fails(ctx: StepContext) -> None:
    _note(ctx, f"undo:{ctx.step}")
    raise ConnectionError("the rollback endpoint is down")


UNDO_FAILS = register(
    Workflow(
        "test-undo-fails",
        1,
        [
            Step(
                "a",
                _do,
                compensate=_undo_fails,
                compensation_retry=RetryPolicy(max_retries=1, base_delay=0.2, jitter=0.0),
            ),
            Step("d", _reject),
        ],
    )
)


def _halt_first_then_wait(ctx: StepContext) -> dict[str, Any]:
    """Halts on its first execution; a re-run (after retry-resolution) waits on the gate."""
    _note(ctx, f"do:{ctx.step}")
    if sum(1 for c in CALLS[ctx.run_id] if c == f"do:{ctx.step}") == 1:
        raise Halt("disk state unknown: a person must look")
    GATES[ctx.input["event"]["gate"]].wait(timeout=30)
    return {"done": ctx.step}


HALT_THEN_SLOW = register(
    Workflow("test-halt-then-slow", 1, [Step("slow", _halt_first_then_wait, timeout=0.2)])
)


def _dispatch_halting_second(ctx: StepContext) -> dict[str, Any]:
    """Dispatches the call, except on the step's second execution, which halts."""
    _note(ctx, f"dispatch:{ctx.step}")
    if sum(1 for c in CALLS[ctx.run_id] if c == f"dispatch:{ctx.step}") == 2:
        raise Halt("the tool refused the call: a person must look")
    return {"correlation_id": ctx.effect_id}


TOOL_HALTING = register(
    Workflow(
        "test-tool-halting",
        1,
        [
            Step(
                "diagnose",
                _dispatch_halting_second,
                tool_timeout=30.0,
                retry=RetryPolicy(max_retries=3, base_delay=0.0, jitter=0.0),
            ),
        ],
    )
)


def _returns_unstorable(ctx: StepContext) -> Any:
    """Does its (pretend) effect, then returns what the input names: no JSON can hold it."""
    _note(ctx, f"do:{ctx.step}")
    kind = ctx.input["event"]["returns"]
    if kind == "nul":  # JSON holds it; PostgreSQL's jsonb cannot
        return {"text": "a\u0000b"}
    return {"at": object()} if kind == "object" else {"ratio": float("nan")}


NOT_JSON = register(
    Workflow(
        "test-not-json",
        1,
        [
            Step("a", _do, compensate=_undo),
            Step("odd", _returns_unstorable, retry=FAST_RETRY),
        ],
    )
)


class CountedEncodings(dict):  # type: ignore[type-arg]
    """A step output that counts how often it is JSON-encoded (``json`` asks a dict
    subclass for its items once per encoding)."""

    encodings = 0

    def items(self) -> Any:
        CountedEncodings.encodings += 1
        return super().items()


def _returns_counted(ctx: StepContext) -> dict[str, Any]:
    _note(ctx, f"do:{ctx.step}")
    return CountedEncodings(step=ctx.step, text="caf\u00e9 " * 200)


ENCODED_ONCE = register(
    Workflow(
        "test-encoded-once",
        1,
        [Step("first", _returns_counted), Step("last", _returns_counted)],
    )
)


def _raises_nul(ctx: StepContext) -> None:
    _note(ctx, f"do:{ctx.step}")
    raise RuntimeError("the device answered a\u0000b")


NUL_ERROR = register(
    Workflow(
        "test-nul-error",
        1,
        [Step("a", _do, compensate=_undo), Step("odd", _raises_nul, retry=FAST_RETRY)],
    )
)


# --- A lease the worker stops believing in --------------------------------------------------


def _belief_expires(ctx: StepContext) -> dict[str, Any]:
    """Marks the lease lost, as the keeper does when the worker could not reach the database
    for too long, while the lease row stays the worker's."""
    CALLS.setdefault(ctx.run_id, []).append(f"expire:{ctx.step}")
    ctx.lease_lost.set()
    return {"done": ctx.step}


BELIEF_EXPIRES = register(
    Workflow("test-belief-expires", 1, [Step("first", _noop), Step("act", _belief_expires)])
)


# --- Waits: durable sleeps and signals ------------------------------------------------------


def _after_wait(ctx: StepContext) -> dict[str, Any]:
    _note(ctx, f"do:{ctx.step}")
    return {"saw": ctx.outputs.get("wait")}


SIGNAL_WAIT = register(
    Workflow(
        "test-signal-wait",
        1,
        [
            Step("a", _do, compensate=_undo),
            wait_for_signal("wait", "resolved", timeout=60),
            Step("after", _after_wait),
        ],
    )
)
SIGNAL_TIMEOUT = register(
    Workflow(
        "test-signal-timeout",
        1,
        [
            Step("a", _do, compensate=_undo),
            wait_for_signal("wait", "resolved", timeout=0.3),
            Step("after", _after_wait),
        ],
    )
)
# A first short wait that goes on without its signal, then a long one for the same name.
SIGNAL_TWICE = register(
    Workflow(
        "test-signal-twice",
        1,
        [
            wait_for_signal("first", "ping", timeout=0.3, on_timeout="continue"),
            wait_for_signal("second", "ping", timeout=60),
            Step("after", _do),
        ],
    )
)
# An alert's run: acts, then waits for its group's "resolved" notification (correlated).
ALERT_WATCH = register(
    Workflow(
        "test-alert-watch",
        1,
        [
            Step("a", _do, compensate=_undo),
            wait_for_signal("wait", "resolved", timeout=60),
            Step("after", _after_wait),
        ],
        correlate=alertmanager.by_group,
    )
)
SLEEPER = register(
    Workflow("test-sleep", 1, [Step("a", _do), sleep("nap", 0.3), Step("after", _do)])
)


# --- Scheduled ------------------------------------------------------------------------------

# Runs every minute in each project that allows it (none does unless a test says so).
EVERY_MINUTE = register(
    Workflow("test-every-minute", 1, [Step("tick", _noop)], schedule="* * * * *")
)


# --- Tags -----------------------------------------------------------------------------------
# ``test-tags``: step ``tag`` tags the run with the input's ``tags`` (then waits on the gate
# the input names, if any, and is rejected while the file ``broken_flag`` names exists); step
# ``more`` tags it with ``more_tags``.


def _tag_from_input(ctx: StepContext) -> dict[str, Any]:
    event = ctx.input["event"]
    ctx.tag(event.get("tags") or {})
    if event.get("gate"):
        GATES[event["gate"]].wait(timeout=30)
    broken = event.get("broken_flag")
    if broken and Path(broken).exists():
        raise Reject(f"{broken} says the service is broken")
    return {"tagged": sorted(event.get("tags") or {})}


def _tag_more(ctx: StepContext) -> dict[str, Any]:
    ctx.tag(ctx.input["event"].get("more_tags") or {})
    return {"tagged": sorted(ctx.input["event"].get("more_tags") or {})}


TAGGING = register(
    Workflow("test-tags", 1, [Step("tag", _tag_from_input), Step("more", _tag_more)])
)


# --- Traced ---------------------------------------------------------------------------------
# "call" posts to the project's actions_url (forward and compensate); "check" succeeds, or
# with input mode "refuse" rejects (so "call" is compensated), or with "flaky" fails its
# first attempt (a retry: a second segment). Each handler's (step, phase, ctx.traceparent)
# is kept in TRACEPARENTS[run_id].
TRACEPARENTS: dict[str, list[tuple[str, str, str | None]]] = {}


def _traced_call(ctx: StepContext) -> Any:
    TRACEPARENTS.setdefault(ctx.run_id, []).append((ctx.step, ctx.phase, ctx.traceparent))
    return actions.post(ctx, ctx.phase, {"step": ctx.step})


def _traced_check(ctx: StepContext) -> dict[str, Any]:
    TRACEPARENTS.setdefault(ctx.run_id, []).append((ctx.step, ctx.phase, ctx.traceparent))
    mode = ctx.input["event"].get("mode")
    if mode == "refuse":
        raise Reject("the check said no")
    if mode == "flaky" and ctx.attempt == 1:
        raise RuntimeError("not yet")
    return {"checked": True}


TRACED = register(
    Workflow(
        "test-traced",
        1,
        [
            Step("call", _traced_call, compensate=_traced_call),
            Step(
                "check",
                _traced_check,
                retry=RetryPolicy(max_retries=1, base_delay=0.05, jitter=0),
            ),
        ],
    )
)
