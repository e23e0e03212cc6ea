"""``awooop_inbox``: asynchronous results and callbacks, each accepted once."""

import uuid
from datetime import datetime

from sqlalchemy import DateTime, Index, String, func
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from awooop.models.base import Base


class InboxEntry(Base):
    __tablename__ = "awooop_inbox"
    # A run's entries (the retention sweep deletes them with the run).
    __table_args__ = (Index("ix_awooop_inbox_run", "run_id"),)

    consumer: Mapped[str] = mapped_column(String(64), primary_key=True)
    event_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    run_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    # SHA-256 of the canonical payload: the same event id with another payload is refused.
    request_digest: Mapped[str] = mapped_column(String(64), nullable=False)
    received_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
