"""One row per run (``awooop_run_state``) and its append-only history (``awooop_run_event``).

Who moves a run out of each ``status``:

- PENDING / RESUMED: a worker's claim (-> RUNNING).
- RUNNING: the lease holder (-> COMPLETED / FAILED / WAITING_* / PENDING on retry) or the
  stale-run reaper once the lease expired (-> PENDING, or FAILED when attempts are exhausted).
- WAITING_TOOL / WAITING_APPROVAL: a tool result, a decision or a due timer; never the reaper.
- COMPLETED / FAILED / CANCELLED: terminal.
"""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from awooop.domain import states
from awooop.models.base import Base
from awooop.store.literals import sql_list


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({sql_list(values)})"


class RunState(Base):
    __tablename__ = "awooop_run_state"
    __table_args__ = (
        CheckConstraint(_in("status", states.RUN_STATUSES), name="status_valid"),
        CheckConstraint(_in("saga_status", states.SAGA_STATUSES), name="saga_status_valid"),
        CheckConstraint(_in("control_state", states.CONTROL_STATES), name="control_state_valid"),
        CheckConstraint(_in("direction", states.DIRECTIONS), name="direction_valid"),
        # Claimable runs, oldest first.
        Index(
            "ix_awooop_run_state_claimable",
            "available_at",
            "created_at",
            postgresql_where=text("status IN ('PENDING', 'RESUMED')"),
        ),
        # Running runs by lease expiry (the reaper).
        Index(
            "ix_awooop_run_state_running_lease",
            "lease_until",
            postgresql_where=text("status = 'RUNNING'"),
        ),
        # Listing per project by status; the active-run quota's count.
        Index("ix_awooop_run_state_project_status", "project_id", "status", "created_at"),
        # The runs API's list, newest first, keyset (created_at, run_id).
        Index("ix_awooop_run_state_project_created", "project_id", "created_at", "run_id"),
        # Unfinished runs by status: /metrics counts them here, at a cost that grows with the
        # runs in flight, not with the runs kept (finished runs have no entry).
        Index(
            "ix_awooop_run_state_unfinished",
            "status",
            postgresql_where=text(_in("status", states.UNFINISHED_STATUSES)),
        ),
        # The manual-intervention queue, oldest first.
        Index(
            "ix_awooop_run_state_intervention",
            "project_id",
            "created_at",
            "run_id",
            postgresql_where=text("saga_status = 'MANUAL_INTERVENTION'"),
        ),
        # The console's overview: a project's runs finished in the last hours.
        Index(
            "ix_awooop_run_state_project_finished",
            "project_id",
            "finished_at",
            postgresql_where=text("finished_at IS NOT NULL"),
        ),
        # An open run by its correlation key: where a correlated event is delivered.
        Index(
            "ix_awooop_run_state_correlation",
            "project_id",
            "workflow_name",
            "correlation_key",
            postgresql_where=text(
                f"correlation_key IS NOT NULL AND {_in('status', states.UNFINISHED_STATUSES)}"
            ),
        ),
        # The runs an event started (and their reruns, which carry its input): the runs
        # list's provider_event_id and idempotency_key filters. An expression index, so the
        # runs admitted before it existed are found too and admission writes no new column.
        Index(
            "ix_awooop_run_state_provider_event",
            "project_id",
            text("(input ->> 'provider_event_id')"),
        ),
        # The tags steps set (ctx.tag): a tag filter is one containment test (tags @> {...},
        # several tags AND-ed in one probe). Untagged runs have no entry; a step record that
        # sets no tag leaves the column as it was, so it stays a HOT update.
        Index(
            "ix_awooop_run_state_tags",
            "tags",
            postgresql_using="gin",
            postgresql_ops={"tags": "jsonb_path_ops"},
            postgresql_where=text("tags IS NOT NULL"),
        ),
        # A run's reruns (its detail lists them).
        Index(
            "ix_awooop_run_state_rerun_of",
            "rerun_of",
            postgresql_where=text("rerun_of IS NOT NULL"),
        ),
        # A rerun request's runs by its Idempotency-Key: one rerun of a run per key (a
        # retried request is a duplicate), and the idempotency_key filter.
        Index(
            "uq_awooop_run_state_rerun_key",
            "project_id",
            "rerun_key",
            "rerun_of",
            unique=True,
            postgresql_where=text("rerun_key IS NOT NULL"),
        ),
        # The migration sets fillfactor = 70: room on each page, so step records (which
        # change no indexed column) are HOT updates that rewrite no index.
    )

    run_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    project_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("awooop_project.project_id"), nullable=False
    )
    channel_type: Mapped[str] = mapped_column(String(32), nullable=False)
    workflow_name: Mapped[str] = mapped_column(String(128), nullable=False)
    workflow_version: Mapped[int] = mapped_column(Integer, nullable=False)
    workflow_digest: Mapped[str] = mapped_column(String(64), nullable=False)
    status: Mapped[str] = mapped_column(
        String(32), nullable=False, server_default=text("'PENDING'")
    )
    saga_status: Mapped[str] = mapped_column(
        String(32), nullable=False, server_default=text("'RUNNING'")
    )
    direction: Mapped[str] = mapped_column(
        String(16), nullable=False, server_default=text("'FORWARD'")
    )
    current_step: Mapped[str | None] = mapped_column(String(128))
    input: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    output: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # The lease.
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    attempt_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    worker_id: Mapped[str | None] = mapped_column(String(128))
    # The fencing token: incremented on every claim; every lease holder write checks it.
    lease_epoch: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
    # The identity of the lease holder's last fenced write: a holder whose reply was lost
    # asks by it whether that write committed.
    last_write_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    max_attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("3"))
    # Not claimable before this instant (retry back-off).
    available_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    # When the last Celery message for this run was sent (the orphan sweep re-sends old ones).
    enqueued_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    reaped_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    failure_code: Mapped[str | None] = mapped_column(String(64))
    failure_reason: Mapped[str | None] = mapped_column(Text)
    # The step journal: one entry per recorded step attempt.
    saga_steps: Mapped[list[dict[str, Any]]] = mapped_column(
        JSONB, nullable=False, server_default=text("'[]'::jsonb")
    )
    # Compare-and-set counter, bumped by every transition.
    version: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
    control_state: Mapped[str] = mapped_column(
        String(16), nullable=False, server_default=text("'ACTIVE'")
    )
    traceparent: Mapped[str | None] = mapped_column(String(55))
    # The workflow's correlation key for the event that started the run: later events with
    # the same key are delivered to it as signals while it is open.
    correlation_key: Mapped[str | None] = mapped_column(String(256))
    # A rerun: the run whose input it started again with, and the Idempotency-Key of the
    # request that made it. No foreign key: the original may be deleted by retention first,
    # and the link then still says where the rerun came from.
    rerun_of: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    rerun_key: Mapped[str | None] = mapped_column(String(255))
    # The tags the run's steps set (ctx.tag), {key: value}; NULL until a step sets one.
    tags: Mapped[dict[str, str] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class RunEvent(Base):
    """Append-only audit trail: one row per transition, lease event, step record, operation."""

    __tablename__ = "awooop_run_event"
    __table_args__ = (
        Index("ix_awooop_run_event_run_seq", "run_id", "seq"),
        # A trigger applied twice is detected here.
        Index(
            "uq_awooop_run_event_trigger",
            "run_id",
            "trigger",
            "trigger_id",
            unique=True,
            postgresql_where=text("trigger_id IS NOT NULL"),
        ),
    )

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    run_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True),
        ForeignKey("awooop_run_state.run_id", ondelete="CASCADE"),
        nullable=False,
    )
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    from_status: Mapped[str | None] = mapped_column(String(32))
    to_status: Mapped[str | None] = mapped_column(String(32))
    trigger: Mapped[str] = mapped_column(String(32), nullable=False)
    trigger_id: Mapped[str | None] = mapped_column(String(128))
    actor: Mapped[str | None] = mapped_column(String(128))
    detail: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
