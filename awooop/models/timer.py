"""Durable timers: what must happen later, kept in PostgreSQL, never in Celery ETAs.

Who moves a timer out of PENDING: the due-timer sweep (``awooop.sweeps.fire_due_timers``),
which claims due timers with SKIP LOCKED and marks each FIRED — or SKIPPED when the run has
moved on since the timer was set (its ``version`` no longer equals ``expected_version``).
"""

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from awooop.models.base import Base


class Timer(Base):
    __tablename__ = "awooop_timer"
    __table_args__ = (
        CheckConstraint("state IN ('PENDING', 'FIRED', 'SKIPPED')", name="state_valid"),
        Index("ix_awooop_timer_due", "due_at", postgresql_where=text("state = 'PENDING'")),
        # A run's timers (the retention sweep, and ON DELETE CASCADE from the run).
        Index("ix_awooop_timer_run", "run_id"),
    )

    # Deterministic: run + scope (phase, step) + kind + attempt, so setting it twice is one timer.
    timer_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    run_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True),
        ForeignKey("awooop_run_state.run_id", ondelete="CASCADE"),
        nullable=False,
    )
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    step: Mapped[str | None] = mapped_column(String(128))
    attempt: Mapped[int | None] = mapped_column(Integer)
    due_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    # The run's version when the timer was set; a different version at firing = stale.
    expected_version: Mapped[int] = mapped_column(BigInteger, nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False, server_default=text("'PENDING'"))
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    fired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
