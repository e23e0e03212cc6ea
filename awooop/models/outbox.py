"""``awooop_outbox``: outbound messages (chat replies, approval prompts, webhooks).

A row is written in the same transaction as the state change that caused it; the
``awooop.notifications.send`` task delivers it with retries and back-off and marks it SENT. A
message that keeps failing is PARKED (visible, never blocking its run). Secret parts of a
message (an approval token inside a button) are stored encrypted in ``sealed`` and wiped
once the message is sent.
"""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, DateTime, Index, String, Text, func, text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from awooop.models.base import Base


class OutboxMessage(Base):
    __tablename__ = "awooop_outbox"
    __table_args__ = (
        CheckConstraint("status IN ('PENDING', 'SENT', 'PARKED')", name="status_valid"),
        Index(
            "ix_awooop_outbox_due",
            "next_attempt_at",
            postgresql_where=text("status = 'PENDING'"),
        ),
        Index("ix_awooop_outbox_run", "run_id"),
        # A project's backlog (the console's overview, the run list's outbox filter).
        Index(
            "ix_awooop_outbox_project_unsent",
            "project_id",
            "status",
            "created_at",
            postgresql_where=text("status IN ('PENDING', 'PARKED')"),
        ),
        # Messages done with, by status, oldest first: the retention sweep, and the parked
        # count /metrics reads.
        Index(
            "ix_awooop_outbox_done",
            "status",
            "created_at",
            postgresql_where=text("status IN ('SENT', 'PARKED')"),
        ),
    )

    message_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=func.gen_random_uuid()
    )
    project_id: Mapped[str] = mapped_column(String(64), nullable=False)
    run_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    # The adapter that sends it: telegram, line, gitea, webhook.
    channel: Mapped[str] = mapped_column(String(32), nullable=False)
    # What kind of message: approval_prompt, approval_outcome, callback_answer, run_outcome.
    purpose: Mapped[str] = mapped_column(String(32), nullable=False)
    # Where and what, in the adapter's terms (chat id, text, buttons...); no secrets.
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    # Fernet-encrypted secret the adapter needs to render the message (an approval token).
    sealed: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="PENDING")
    attempts: Mapped[int] = mapped_column(nullable=False, server_default="0")
    next_attempt_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    # A sender holds the row until then (a crashed sender's row becomes due again).
    claimed_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
