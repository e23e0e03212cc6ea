"""Cron schedules: checking an expression, its ticks, and what a sweep does with a tick.

A scheduled workflow (``Workflow(..., schedule="*/5 * * * *")``) is started once per tick in
each project that allows it. A tick is an instant in UTC at which the expression matches;
its run's dedupe key is ``<workflow>@<tick>`` (ISO 8601, UTC, to the second), so however many
sweeps see the same tick, one run starts.

Missed ticks (nothing swept while they passed: beat down, no maintenance worker): only the
most recent tick is ever considered. It is started if it is at most ``max_lateness`` old,
and otherwise skipped; older ticks are never started. A deployment started at 09:00 does not
run a daily 00:00 job; one whose beat was down for ten minutes runs a five-minute job once,
for the latest tick, and skips the ticks before it.

The parser is cronsim (https://github.com/cuu508/cronsim), not croniter. croniter was
declared abandoned by its previous owners in 2025 and has since been taken over by
pallets-eco (7.0), so either is maintained today; cronsim was chosen because it has no
dependencies (croniter brings python-dateutil into every process), it reads the standard
five fields strictly with Debian cron's semantics (day-of-month OR day-of-week, ``L``,
``#``), and it is what Healthchecks.io runs its cron checks on. The five-field rule below is
ours: cronsim also reads a sixth (seconds) field, finer than any sweep can honour.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cronsim import CronSim, CronSimError

CHANNEL = "schedule"
FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_ISO = "%Y-%m-%dT%H:%M:%SZ"


class InvalidSchedule(ValueError):
    """A workflow's schedule is not a five-field cron expression."""


def check(expression: str) -> str:
    """The expression, or :class:`InvalidSchedule` saying what is wrong with it."""
    if not isinstance(expression, str) or len(expression.split()) != len(FIELDS):
        raise InvalidSchedule(
            f"schedule {expression!r} is not a cron expression of five fields "
            f"({' '.join(FIELDS)}), e.g. '*/5 * * * *'"
        )
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise InvalidSchedule(f"schedule {expression!r} is not valid cron: {exc}") from None
    return expression


def latest_tick(expression: str, now: datetime) -> datetime:
    """The last instant at or before ``now`` (aware) when ``expression`` matches, in UTC."""
    # Ticks fall on whole minutes; cronsim's reverse iteration starts strictly before the
    # instant given, so start just after the whole second of ``now``.
    start = now.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=1)
    return next(CronSim(expression, start, reverse=True))


def ticks_after(expression: str, after: datetime, before: datetime) -> Iterator[datetime]:
    """The ticks strictly between ``after`` and ``before``, oldest first."""
    for tick in CronSim(expression, after.astimezone(UTC)):
        if tick >= before:
            return
        yield tick


def tick_text(tick: datetime) -> str:
    """``2026-12-02T17:05:00Z``: fixed width, so the texts of ticks sort as the ticks do."""
    return tick.astimezone(UTC).strftime(_ISO)


def parse_tick(text: str) -> datetime:
    return datetime.strptime(text, _ISO).replace(tzinfo=UTC)


def event_id(workflow: str, tick: datetime) -> str:
    """The run's dedupe key (provider_event_id of the ``schedule`` channel)."""
    return f"{workflow}@{tick_text(tick)}"


def tick_of(workflow: str, provider_event_id: str) -> datetime | None:
    """The tick of a key :func:`event_id` made for ``workflow``; None for another key."""
    prefix = f"{workflow}@"
    if not provider_event_id.startswith(prefix):
        return None
    try:
        return parse_tick(provider_event_id[len(prefix) :])
    except ValueError:
        return None


# What a sweep does with the latest tick in one project.
ADMIT = "admit"
LATE = "late"
STARTED = "started"


@dataclass(frozen=True)
class Decision:
    action: str  # ADMIT, LATE (skipped: older than max_lateness) or STARTED (nothing to do)
    tick: datetime
    # Ticks that passed unstarted between the last started tick and this one (first, last,
    # count up to MISSED_COUNT_LIMIT); reported when this tick is admitted.
    missed: tuple[datetime, datetime, int] | None = None


# Counting missed ticks walks them one by one: a minutely job down for a month would be
# 43,200 steps. The count stops here ("at least").
MISSED_COUNT_LIMIT = 1000


def decide(
    expression: str,
    now: datetime,
    max_lateness: float,
    last_started: datetime | None,
) -> Decision:
    """What to do with ``expression``'s latest tick at ``now``, given the last tick started
    in this project (None: none is known — never, or its dedupe row was pruned)."""
    tick = latest_tick(expression, now)
    if last_started is not None and last_started >= tick:
        return Decision(STARTED, tick)
    if (now - tick).total_seconds() > max_lateness:
        return Decision(LATE, tick)
    missed = None
    if last_started is not None:
        skipped = ticks_after(expression, last_started, tick)
        first = next(skipped, None)
        if first is not None:
            count = 1 + sum(1 for _ in itertools.islice(skipped, MISSED_COUNT_LIMIT - 1))
            missed = (first, latest_tick(expression, tick - timedelta(seconds=1)), count)
    return Decision(ADMIT, tick, missed)
