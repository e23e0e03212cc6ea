"""One row per admitted channel event: the exactly-once key."""

import uuid
from datetime import datetime

from sqlalchemy import DateTime, Index, String, UniqueConstraint, func
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from awooop.models.base import Base


class ChannelEventDedupe(Base):
    """The event key (project, channel, provider event id) and its run, plus
    ``request_digest`` and the prune index.

    Deliberately not partitioned by time: a UNIQUE constraint on a partitioned table must
    include the partition key, which would let a late duplicate through.
    """

    __tablename__ = "awooop_channel_event_dedupe"
    __table_args__ = (
        UniqueConstraint(
            "project_id",
            "channel_type",
            "provider_event_id",
            name="uq_awooop_channel_event_dedupe_event_key",
        ),
        Index("ix_awooop_channel_event_dedupe_created_at", "created_at"),
    )

    dedupe_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=func.gen_random_uuid()
    )
    project_id: Mapped[str] = mapped_column(String(64), nullable=False)
    channel_type: Mapped[str] = mapped_column(String(32), nullable=False)
    provider_event_id: Mapped[str] = mapped_column(String(256), nullable=False)
    run_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), nullable=False)
    # SHA-256 (hex) of the canonical request: same key + other body = E-IDEMPOTENT-002.
    request_digest: Mapped[str] = mapped_column(String(64), nullable=False)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
