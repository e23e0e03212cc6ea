"""The timing rule of the lease protocol, in one place.

Two parties judge whether a worker process still holds its runs, each on its own clock:

- **the holder** believes it holds a run (``ctx.lease_held``) only while it has committed a
  liveness beat within ``dead_after - margin`` seconds (measured from the *start* of that
  beat, on its monotonic clock) and renewed the run's lease within ``ttl - interval``
  seconds (from the start of that renewal);
- **the grantor** — the reaper — takes a run from its holder when the lease expired
  (``lease_until < now()``, the database's clock), or when the reaper itself has seen the
  holder's liveness row unchanged for ``dead_after`` seconds of its own monotonic clock.

A beat that the reaper sees started before the reaper read it, so the holder's belief ends at
most ``dead_after - margin`` after that read on the holder's clock, and the reaper acts at
least ``dead_after`` after it on its own. With every clock's rate within ``CLOCK_RATE_BOUND``
of real time, the holder's belief ends first when

    (dead_after - margin) * (1 + rho) < dead_after * (1 - rho),
    i.e. margin > 2 * rho * dead_after / (1 + rho).

What is left of the margin is the time a handler may take between reading ``ctx.lease_held``
and its side effect. Likewise for lease expiry, with ``interval`` as the margin against a
TTL measured by the database clock. The database clock must not step forward by more than
``ttl - 2 * interval`` (an NTP step would expire leases early); a step of any size never
touches the dead-worker judgement, which uses no database time.

The protocol is modelled and checked in ``verify/`` (see ``docs/protocol.md``).
"""

from __future__ import annotations

# Any two clocks involved (a worker's, the reaper's, the database's) run at rates within 1 %
# of real time. NTP-disciplined clocks are within 0.05 %, free-running quartz within 0.01 %.
CLOCK_RATE_BOUND = 0.01

# A lease is renewed at least this many times per TTL, and a worker beats at least this many
# times before it could be judged dead: one or two failed tries never cost a live worker.
RENEWALS_PER_TTL = 3


def renewals_fit(ttl: float, interval: float) -> bool:
    """Whether renewing every ``interval`` seconds renews a ``ttl`` lease at least
    ``RENEWALS_PER_TTL`` times (with room for float rounding: 0.2 * 3 fits 0.6)."""
    return interval > 0 and interval * RENEWALS_PER_TTL <= ttl * (1 + 1e-9)


def least_margin(dead_after: float) -> float:
    """The smallest belief margin for which a holder's belief ends before the reaper may
    judge it dead, at the stated clock-rate bound."""
    return 2 * CLOCK_RATE_BOUND * dead_after / (1 + CLOCK_RATE_BOUND)


def belief_lasts(dead_after: float, margin: float) -> float:
    """How long a holder believes in its leases after the start of its last committed beat."""
    return dead_after - margin


def margin_problem(dead_after: float, margin: float) -> str | None:
    """What is wrong with a belief margin too small for the clocks' drift (None: nothing)."""
    if margin > least_margin(dead_after):
        return None
    return (
        f"AWOOOP_WORKER_BELIEF_MARGIN_SECONDS={margin:g} must be more than "
        f"{least_margin(dead_after):.3g} (2 x {CLOCK_RATE_BOUND:g} x "
        f"AWOOOP_WORKER_DEAD_AFTER_SECONDS={dead_after:g}): a worker must stop believing "
        "it holds its runs before the reaper may judge it dead, whatever the clocks' drift"
    )


def belief_problem(liveness_interval: float, dead_after: float, margin: float) -> str | None:
    """What is wrong with a belief that one failed liveness beat would end (None: nothing)."""
    least = (RENEWALS_PER_TTL - 1) * liveness_interval
    if belief_lasts(dead_after, margin) >= least * (1 - 1e-9):
        return None
    return (
        f"AWOOOP_WORKER_DEAD_AFTER_SECONDS={dead_after:g} minus "
        f"AWOOOP_WORKER_BELIEF_MARGIN_SECONDS={margin:g} must be at least "
        f"{RENEWALS_PER_TTL - 1} times AWOOOP_WORKER_LIVENESS_INTERVAL_SECONDS="
        f"{liveness_interval:g} (at least {least:g}): a live worker's belief must survive "
        "a failed liveness beat"
    )


def liveness_problems(liveness_interval: float, dead_after: float, margin: float) -> list[str]:
    """What breaks the rule between the liveness settings, each problem naming its variables."""
    if liveness_interval <= 0:
        return [f"AWOOOP_WORKER_LIVENESS_INTERVAL_SECONDS={liveness_interval:g} must be positive"]
    found = (
        margin_problem(dead_after, margin),
        belief_problem(liveness_interval, dead_after, margin),
    )
    return [problem for problem in found if problem]


def takeover_within(dead_after: float, watch_interval: float) -> float:
    """The longest a dead worker's runs wait for the reaper, counted from the worker's last
    committed liveness beat (so at most this long after it died).

    The reaper's watch passes come every ``watch_interval``. The first one after that beat
    reads its token — within one interval — and notes when, on the reaper's own clock; the
    worker is judged dead at the first pass at least ``dead_after`` after that note, at most
    one interval past it, and the same pass hands its RUNNING runs back (PENDING, their
    messages sent). A pass that starts late — the one maintenance worker busy with another
    sweep, at most about ``AWOOOP_SWEEP_PASS_SECONDS`` — comes on top; a worker process then
    claims the run within moments.
    """
    return dead_after + 2 * watch_interval
