"""approvals and outbox

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29 14:22:44.949595
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "awooop_outbox",
        sa.Column(
            "message_id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False
        ),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.UUID(), nullable=True),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("purpose", sa.String(length=32), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), server_default="PENDING", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "next_attempt_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('PENDING', 'SENT', 'PARKED')", name=op.f("ck_awooop_outbox_status_valid")
        ),
        sa.PrimaryKeyConstraint("message_id", name=op.f("pk_awooop_outbox")),
    )
    op.create_index(
        "ix_awooop_outbox_due",
        "awooop_outbox",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("status = 'PENDING'"),
    )
    op.create_index("ix_awooop_outbox_run", "awooop_outbox", ["run_id"], unique=False)
    op.create_table(
        "awooop_approval",
        sa.Column(
            "approval_id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False
        ),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("step", sa.String(length=128), nullable=False),
        sa.Column("attempt", sa.Integer(), server_default="1", nullable=False),
        sa.Column("action", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=16), server_default="approval", nullable=False),
        sa.Column(
            "approvers",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("prompt", sa.Text(), server_default="", nullable=False),
        sa.Column("status", sa.String(length=16), server_default="PENDING", nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decided_by", sa.String(length=256), nullable=True),
        sa.Column("decided_via", sa.String(length=32), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "kind IN ('approval', 'intervention')", name=op.f("ck_awooop_approval_kind_valid")
        ),
        sa.CheckConstraint(
            "status IN ('PENDING', 'APPROVED', 'REJECTED', 'EXPIRED', 'SUPERSEDED')",
            name=op.f("ck_awooop_approval_status_valid"),
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["awooop_run_state.run_id"],
            name=op.f("fk_awooop_approval_run_id_awooop_run_state"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("approval_id", name=op.f("pk_awooop_approval")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_awooop_approval_token_hash")),
    )
    op.create_index(
        "ix_awooop_approval_pending_expiry",
        "awooop_approval",
        ["expires_at"],
        unique=False,
        postgresql_where=sa.text("status = 'PENDING'"),
    )
    op.create_index("ix_awooop_approval_run", "awooop_approval", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_awooop_approval_run", table_name="awooop_approval")
    op.drop_index(
        "ix_awooop_approval_pending_expiry",
        table_name="awooop_approval",
        postgresql_where=sa.text("status = 'PENDING'"),
    )
    op.drop_table("awooop_approval")
    op.drop_index("ix_awooop_outbox_run", table_name="awooop_outbox")
    op.drop_index(
        "ix_awooop_outbox_due",
        table_name="awooop_outbox",
        postgresql_where=sa.text("status = 'PENDING'"),
    )
    op.drop_table("awooop_outbox")
