"""Tenants and their credentials."""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
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

from awooop.domain import schedule
from awooop.domain.retention import MAX_RETENTION_DAYS
from awooop.models.base import Base

# The channels that admit events over HTTP (a project routes each to a workflow).
CHANNEL_TYPES = ("telegram", "alertmanager", "gitea", "line", "api")
# Every channel a run can come from: those, and the schedule sweep (no webhook, no route:
# a project allows a scheduled workflow in ``allowed_workflows``).
RUN_CHANNEL_TYPES = (*CHANNEL_TYPES, schedule.CHANNEL)
API_TOKEN_ROLES = ("ingest", "operator", "admin", "viewer")
# 1-64 lowercase letters, digits, '-' or '_', starting with a letter or digit.
PROJECT_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class Project(Base):
    __tablename__ = "awooop_project"
    __table_args__ = (
        CheckConstraint(
            f"run_retention_days BETWEEN 1 AND {MAX_RETENTION_DAYS}",
            name="run_retention_days_valid",
        ),
    )

    project_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    # channel type -> workflow name, e.g. {"telegram": "demo-telegram"}
    routes: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    # Workflows a client may start by name besides the routed ones, e.g. ["restart"]; a
    # scheduled workflow runs in each project that allows it.
    allowed_workflows: Mapped[list[str]] = mapped_column(
        JSONB, nullable=False, server_default=text("'[]'::jsonb")
    )
    # what workflows need to know of the project, e.g. {"actions_url": "https://..."}
    config: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    # quotas and rate limits (`awooop project limits`; awooop.domain.limits)
    limits: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    # Days finished runs are kept (awooop.domain.retention); NULL: AWOOOP_RUN_RETENTION_DAYS.
    run_retention_days: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )


class Credential(Base):
    """An API token (SHA-256 hash + role) or a channel secret.

    Secrets a provider sends back verbatim (Telegram secret token, Alertmanager bearer) are
    stored as SHA-256 hashes; secrets needed to compute an HMAC (Gitea, LINE) are stored
    encrypted with the key from ``AWOOOP_SECRET_KEY``. Several active rows per channel allow
    rotation.
    """

    __tablename__ = "awooop_credential"
    __table_args__ = (
        CheckConstraint("kind IN ('api_token', 'channel_secret')", name="kind_valid"),
        CheckConstraint(
            "(kind = 'api_token' AND role IS NOT NULL AND secret_hash IS NOT NULL)"
            " OR (kind = 'channel_secret' AND channel_type IS NOT NULL"
            " AND (secret_hash IS NOT NULL OR secret_encrypted IS NOT NULL))",
            name="shape_valid",
        ),
        Index(
            "ix_awooop_credential_active_lookup",
            "project_id",
            "kind",
            "channel_type",
            postgresql_where=text("revoked_at IS NULL"),
        ),
    )

    credential_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=func.gen_random_uuid()
    )
    project_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("awooop_project.project_id", ondelete="CASCADE"), nullable=False
    )
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    channel_type: Mapped[str | None] = mapped_column(String(32))
    role: Mapped[str | None] = mapped_column(String(16))
    secret_hash: Mapped[str | None] = mapped_column(String(64))
    secret_encrypted: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=func.now()
    )
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
