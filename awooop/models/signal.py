"""Signals sent to runs (``awooop_signal``): kept until a step waiting for their name takes
them, in the order they arrived.

A signal is never changed or deleted while its run exists (it goes with the run: ON DELETE
CASCADE). Which signals a run's steps took is in the run's journal (each wait step's output
names the ``seq`` it took), so a signal is taken at most once without a second write.
"""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, ForeignKey, Identity, Index, String, func
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from awooop.models.base import Base


class Signal(Base):
    __tablename__ = "awooop_signal"
    __table_args__ = (
        # A wait step's lookup: the run's first signal of a name after the ones it took.
        Index("ix_awooop_signal_run_name_seq", "run_id", "name", "seq"),
    )

    run_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True),
        ForeignKey("awooop_run_state.run_id", ondelete="CASCADE"),
        primary_key=True,
    )
    # The sender's id for it (the Idempotency-Key, or the correlated event's id): a signal
    # sent twice is kept once.
    signal_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(), nullable=False)
    name: Mapped[str] = mapped_column(String(64), nullable=False)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    # SHA-256 of the payload: the same id with another payload is refused.
    payload_digest: Mapped[str] = mapped_column(String(64), nullable=False)
    received_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
