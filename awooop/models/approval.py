"""``awooop_approval``: a person's decision a run waits for.

The raw token is never stored: only its SHA-256 hash. A token is bound to its project, run,
step and action, decided once (one atomic UPDATE … WHERE status = 'PENDING' AND not expired),
and worthless once the run has left WAITING_APPROVAL.
"""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, DateTime, ForeignKey, Index, String, Text, func, text
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from awooop.models.base import Base


class Approval(Base):
    __tablename__ = "awooop_approval"
    __table_args__ = (
        CheckConstraint(
            "status IN ('PENDING', 'APPROVED', 'REJECTED', 'EXPIRED', 'SUPERSEDED')",
            name="status_valid",
        ),
        CheckConstraint("kind IN ('approval', 'intervention')", name="kind_valid"),
        Index("ix_awooop_approval_run", "run_id"),
        Index(
            "ix_awooop_approval_pending_expiry",
            "expires_at",
            postgresql_where=text("status = 'PENDING'"),
        ),
    )

    approval_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=func.gen_random_uuid()
    )
    # SHA-256 (hex) of the token; the token itself exists only in the message sent out.
    token_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    project_id: Mapped[str] = mapped_column(String(64), nullable=False)
    run_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True),
        ForeignKey("awooop_run_state.run_id", ondelete="CASCADE"),
        nullable=False,
    )
    step: Mapped[str] = mapped_column(String(128), nullable=False)
    attempt: Mapped[int] = mapped_column(nullable=False, server_default="1")
    # What is being approved (the step's declared action, e.g. "restart-service").
    action: Mapped[str] = mapped_column(String(128), nullable=False)
    kind: Mapped[str] = mapped_column(String(16), nullable=False, server_default="approval")
    # Who may decide: {"roles": [...], "telegram": [user ids], "line": [user ids]}, and the
    # chat the prompt went to (a decision from another chat is refused).
    approvers: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    prompt: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    status: Mapped[str] = mapped_column(String(16), nullable=False, server_default="PENDING")
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    decided_by: Mapped[str | None] = mapped_column(String(256))
    decided_via: Mapped[str | None] = mapped_column(String(32))
    decided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    comment: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
