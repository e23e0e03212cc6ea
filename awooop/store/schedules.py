"""What the schedule sweep reads: the projects that allow a scheduled workflow, and the last
tick of it each has started. Runs are admitted by :func:`awooop.store.admission.admit`
(channel ``schedule``, the tick as the dedupe key), so nothing here writes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from awooop.domain import schedule
from awooop.domain.limits import ProjectLimits

_NOW = text("SELECT now()")


def database_now(conn: Connection) -> datetime:
    """The database's clock: every sweep on every host agrees on which tick is due."""
    now: datetime = conn.execute(_NOW).scalar_one()
    return now


# One row per project that allows the workflow. ``last_key``: the due tick's own key when
# its run was admitted (one unique-index lookup, the usual case); otherwise the greatest key
# of this workflow in the project's schedule dedupe rows (bytewise: the keys' fixed-width
# tick texts sort as the ticks do), read only then: once per tick and project.
_ALLOWING = text(
    """
SELECT p.project_id, p.config, p.limits,
       CASE WHEN EXISTS (
                SELECT 1 FROM awooop_channel_event_dedupe d
                WHERE d.project_id = p.project_id
                  AND d.channel_type = :channel_type
                  AND d.provider_event_id = :due_key)
            THEN CAST(:due_key AS text)
            ELSE (SELECT max(d.provider_event_id COLLATE "C")
                  FROM awooop_channel_event_dedupe d
                  WHERE d.project_id = p.project_id
                    AND d.channel_type = :channel_type
                    AND starts_with(d.provider_event_id, :prefix))
       END AS last_key
FROM awooop_project p
WHERE p.allowed_workflows @> jsonb_build_array(CAST(:workflow_name AS text))
ORDER BY p.project_id
"""
)


@dataclass(frozen=True)
class Allowing:
    project_id: str
    config: dict[str, Any]
    limits: ProjectLimits
    # The latest tick of the workflow started in the project (None: none on record).
    last_started: datetime | None


def projects_allowing(conn: Connection, workflow_name: str, due: datetime) -> list[Allowing]:
    """The projects whose ``allowed_workflows`` lists ``workflow_name``, with the last tick
    of it each started (the ``due`` tick when it has been)."""
    rows = conn.execute(
        _ALLOWING,
        {
            "channel_type": schedule.CHANNEL,
            "workflow_name": workflow_name,
            "due_key": schedule.event_id(workflow_name, due),
            "prefix": f"{workflow_name}@",
        },
    ).all()
    return [
        Allowing(
            project_id=r.project_id,
            config=r.config,
            limits=ProjectLimits.from_json(r.limits),
            last_started=r.last_key and schedule.tick_of(workflow_name, r.last_key),
        )
        for r in rows
    ]
