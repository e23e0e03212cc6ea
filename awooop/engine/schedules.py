"""The schedule sweep: start each scheduled workflow's due tick once in every project that
allows it (the policy: :mod:`awooop.domain.schedule`).

Exactly once per tick, however many sweeps run: the run is admitted by the admission
statement with the tick as its dedupe key (``<workflow>@<tick>`` on the ``schedule``
channel), which inserts the dedupe row and the run together or finds the run an earlier
admission created. Two beats, two maintenance workers sweeping at once, or a beat that
restarted and sweeps again all reach the same key.

A tick refused by the project's active-run quota is logged and not started; later passes try
it again while it is within ``schedule_max_lateness_seconds`` (a finished run frees the
slot), then it is skipped like any late tick — never retried forever.
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Engine

from awooop import metrics
from awooop.channels.base import InboundEvent, digest, run_input
from awooop.config import Settings
from awooop.domain import schedule
from awooop.domain.workflow import Workflow
from awooop.store import admission, schedules
from awooop.workflows import registry

log = logging.getLogger("awooop.engine.schedules")


@dataclass
class Swept:
    """What one pass did: the runs it admitted (their messages are sent by the caller, after
    the commit) and the ticks it did not start."""

    admitted: list[uuid.UUID] = field(default_factory=list)
    # (project_id, provider_event_id) of ticks not started this pass.
    late: list[tuple[str, str]] = field(default_factory=list)
    over_quota: list[tuple[str, str]] = field(default_factory=list)


def scheduled_workflows() -> list[Workflow]:
    """The latest registered version of each workflow, where that version has a schedule."""
    latest: dict[str, Workflow] = {}
    for wf in registry.all_workflows():  # sorted by (name, version)
        latest[wf.name] = wf
    return [wf for wf in latest.values() if wf.schedule is not None]


class _Once:
    """Keys this process has logged: a tick skipped or refused is found again by every pass
    until the next tick, and is logged once per process, not once per pass. Bounded."""

    def __init__(self, size: int = 4096) -> None:
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._size = size

    def first(self, key: tuple[str, str]) -> bool:
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > self._size:
            self._seen.popitem(last=False)
        return True


_logged = _Once()


def schedule_once(
    engine: Engine,
    settings: Settings,
    now: datetime | None = None,
    workflows: Callable[[], list[Workflow]] = scheduled_workflows,
) -> Swept:
    """One pass at ``now`` (default: the database's clock)."""
    swept = Swept()
    if now is None:
        with engine.connect() as conn:
            now = schedules.database_now(conn)
    for wf in workflows():
        assert wf.schedule is not None
        due = schedule.latest_tick(wf.schedule, now)
        with engine.connect() as conn:
            allowing = schedules.projects_allowing(conn, wf.name, due)
        for project in allowing:
            decision = schedule.decide(
                wf.schedule, now, settings.schedule_max_lateness_seconds, project.last_started
            )
            if decision.action == schedule.LATE:
                _skip_late(swept, wf, project.project_id, decision.tick, now)
            elif decision.action == schedule.ADMIT:
                _admit(engine, swept, wf, project, decision)
    return swept


def _admit(
    engine: Engine,
    swept: Swept,
    wf: Workflow,
    project: schedules.Allowing,
    decision: schedule.Decision,
) -> None:
    assert wf.schedule is not None
    tick = schedule.tick_text(decision.tick)
    payload = {"workflow": wf.name, "schedule": wf.schedule, "tick": tick}
    event = InboundEvent(
        provider_event_id=schedule.event_id(wf.name, decision.tick),
        payload=payload,
        request_digest=digest(payload),
    )
    new = admission.NewRun.of(
        wf,
        project.project_id,
        run_input(schedule.CHANNEL, event, project.config),
        event.request_digest,
    )
    fields = {"project_id": project.project_id, "workflow": wf.name, "tick": tick}
    try:
        with engine.connect() as conn:  # one statement: its own transaction
            admitted = admission.admit(conn, new, project.limits.max_active_runs)
    except admission.OverQuota:
        metrics.ADMISSIONS.labels(schedule.CHANNEL, "over_quota").inc()
        swept.over_quota.append((project.project_id, new.provider_event_id))
        if _logged.first((project.project_id, new.provider_event_id)):
            log.warning(
                "scheduled tick not started: the project's active-run quota is reached; "
                "tried again while the tick is not late",
                extra={
                    "action": "schedule_tick_over_quota",
                    **fields,
                    "max_active_runs": project.limits.max_active_runs,
                },
            )
        return
    if not admitted.created:  # a concurrent sweep admitted it first
        metrics.ADMISSIONS.labels(schedule.CHANNEL, "duplicate").inc()
        return
    metrics.ADMISSIONS.labels(schedule.CHANNEL, "created").inc()
    swept.admitted.append(admitted.run_id)
    log.info(
        "scheduled run admitted",
        extra={"action": "schedule_run_admitted", "run_id": str(admitted.run_id), **fields},
    )
    if decision.missed is not None:
        first, last, count = decision.missed
        log.warning(
            "scheduled ticks missed while no sweep ran were skipped; only the latest ran",
            extra={
                "action": "schedule_ticks_skipped",
                **fields,
                "reason": "missed",
                "first_skipped": schedule.tick_text(first),
                "last_skipped": schedule.tick_text(last),
                "skipped": count,
                "count_capped": count >= schedule.MISSED_COUNT_LIMIT,
            },
        )


def _skip_late(swept: Swept, wf: Workflow, project_id: str, tick: datetime, now: datetime) -> None:
    key = schedule.event_id(wf.name, tick)
    swept.late.append((project_id, key))
    if not _logged.first((project_id, key)):
        return
    metrics.ADMISSIONS.labels(schedule.CHANNEL, "skipped").inc()
    log.warning(
        "scheduled tick skipped: found too long after its time",
        extra={
            "action": "schedule_ticks_skipped",
            "project_id": project_id,
            "workflow": wf.name,
            "tick": schedule.tick_text(tick),
            "reason": "late",
            "late_by_s": round((now - tick).total_seconds(), 3),
        },
    )
