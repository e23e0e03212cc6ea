"""runs, dedupe, projects and credentials

Revision ID: 0001
Revises:
Create Date: 2026-11-29 11:58:26.972732
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "awooop_channel_event_dedupe",
        sa.Column(
            "dedupe_id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False
        ),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("channel_type", sa.String(length=32), nullable=False),
        sa.Column("provider_event_id", sa.String(length=256), nullable=False),
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("request_digest", sa.String(length=64), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("dedupe_id", name=op.f("pk_awooop_channel_event_dedupe")),
        sa.UniqueConstraint(
            "project_id",
            "channel_type",
            "provider_event_id",
            name="uq_awooop_channel_event_dedupe_event_key",
        ),
    )
    op.create_index(
        "ix_awooop_channel_event_dedupe_created_at",
        "awooop_channel_event_dedupe",
        ["created_at"],
        unique=False,
    )
    op.create_table(
        "awooop_project",
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column(
            "routes",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "limits",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("project_id", name=op.f("pk_awooop_project")),
    )
    op.create_table(
        "awooop_credential",
        sa.Column(
            "credential_id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False
        ),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("channel_type", sa.String(length=32), nullable=True),
        sa.Column("role", sa.String(length=16), nullable=True),
        sa.Column("secret_hash", sa.String(length=64), nullable=True),
        sa.Column("secret_encrypted", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "(kind = 'api_token' AND role IS NOT NULL AND secret_hash IS NOT NULL) OR (kind = 'channel_secret' AND channel_type IS NOT NULL AND (secret_hash IS NOT NULL OR secret_encrypted IS NOT NULL))",
            name=op.f("ck_awooop_credential_shape_valid"),
        ),
        sa.CheckConstraint(
            "kind IN ('api_token', 'channel_secret')", name=op.f("ck_awooop_credential_kind_valid")
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["awooop_project.project_id"],
            name=op.f("fk_awooop_credential_project_id_awooop_project"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("credential_id", name=op.f("pk_awooop_credential")),
    )
    op.create_index(
        "ix_awooop_credential_active_lookup",
        "awooop_credential",
        ["project_id", "kind", "channel_type"],
        unique=False,
        postgresql_where=sa.text("revoked_at IS NULL"),
    )
    op.create_table(
        "awooop_run_state",
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("channel_type", sa.String(length=32), nullable=False),
        sa.Column("workflow_name", sa.String(length=128), nullable=False),
        sa.Column("workflow_version", sa.Integer(), nullable=False),
        sa.Column("workflow_digest", sa.String(length=64), nullable=False),
        sa.Column(
            "status", sa.String(length=32), server_default=sa.text("'PENDING'"), nullable=False
        ),
        sa.Column(
            "saga_status", sa.String(length=32), server_default=sa.text("'RUNNING'"), nullable=False
        ),
        sa.Column(
            "direction", sa.String(length=16), server_default=sa.text("'FORWARD'"), nullable=False
        ),
        sa.Column("current_step", sa.String(length=128), nullable=True),
        sa.Column("input", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("output", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempt_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("worker_id", sa.String(length=128), nullable=True),
        sa.Column("lease_epoch", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default=sa.text("3"), nullable=False),
        sa.Column(
            "available_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "enqueued_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("reaped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failure_code", sa.String(length=64), nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column(
            "saga_steps",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "control_state",
            sa.String(length=16),
            server_default=sa.text("'ACTIVE'"),
            nullable=False,
        ),
        sa.Column("traceparent", sa.String(length=55), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "control_state IN ('ACTIVE', 'PAUSED')",
            name=op.f("ck_awooop_run_state_control_state_valid"),
        ),
        sa.CheckConstraint(
            "direction IN ('FORWARD', 'BACKWARD')", name=op.f("ck_awooop_run_state_direction_valid")
        ),
        sa.CheckConstraint(
            "saga_status IN ('RUNNING', 'CANCELLING', 'WAITING_RESOLUTION', 'COMPENSATING', 'COMPENSATED', 'COMPLETED', 'MANUAL_INTERVENTION', 'MANUALLY_CLOSED')",
            name=op.f("ck_awooop_run_state_saga_status_valid"),
        ),
        sa.CheckConstraint(
            "status IN ('PENDING', 'RUNNING', 'WAITING_TOOL', 'WAITING_APPROVAL', 'RESUMED', 'COMPLETED', 'FAILED', 'CANCELLED')",
            name=op.f("ck_awooop_run_state_status_valid"),
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["awooop_project.project_id"],
            name=op.f("fk_awooop_run_state_project_id_awooop_project"),
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_awooop_run_state")),
    )
    # Room on each page so step records (no indexed column changes) are HOT updates.
    op.execute("ALTER TABLE awooop_run_state SET (fillfactor = 70)")
    op.create_index(
        "ix_awooop_run_state_claimable",
        "awooop_run_state",
        ["available_at", "created_at"],
        unique=False,
        postgresql_where=sa.text("status IN ('PENDING', 'RESUMED')"),
    )
    op.create_index(
        "ix_awooop_run_state_project_status",
        "awooop_run_state",
        ["project_id", "status", "created_at"],
        unique=False,
    )
    op.create_index(
        "ix_awooop_run_state_running_lease",
        "awooop_run_state",
        ["lease_until"],
        unique=False,
        postgresql_where=sa.text("status = 'RUNNING'"),
    )
    op.create_table(
        "awooop_run_event",
        sa.Column("seq", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("from_status", sa.String(length=32), nullable=True),
        sa.Column("to_status", sa.String(length=32), nullable=True),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("trigger_id", sa.String(length=128), nullable=True),
        sa.Column("actor", sa.String(length=128), nullable=True),
        sa.Column(
            "detail",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["awooop_run_state.run_id"],
            name=op.f("fk_awooop_run_event_run_id_awooop_run_state"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_awooop_run_event")),
    )
    op.create_index(
        "ix_awooop_run_event_run_seq", "awooop_run_event", ["run_id", "seq"], unique=False
    )
    op.create_index(
        "uq_awooop_run_event_trigger",
        "awooop_run_event",
        ["run_id", "trigger", "trigger_id"],
        unique=True,
        postgresql_where=sa.text("trigger_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "uq_awooop_run_event_trigger",
        table_name="awooop_run_event",
        postgresql_where=sa.text("trigger_id IS NOT NULL"),
    )
    op.drop_index("ix_awooop_run_event_run_seq", table_name="awooop_run_event")
    op.drop_table("awooop_run_event")
    op.drop_index(
        "ix_awooop_run_state_running_lease",
        table_name="awooop_run_state",
        postgresql_where=sa.text("status = 'RUNNING'"),
    )
    op.drop_index("ix_awooop_run_state_project_status", table_name="awooop_run_state")
    op.drop_index(
        "ix_awooop_run_state_claimable",
        table_name="awooop_run_state",
        postgresql_where=sa.text("status IN ('PENDING', 'RESUMED')"),
    )
    op.drop_table("awooop_run_state")
    op.drop_index(
        "ix_awooop_credential_active_lookup",
        table_name="awooop_credential",
        postgresql_where=sa.text("revoked_at IS NULL"),
    )
    op.drop_table("awooop_credential")
    op.drop_table("awooop_project")
    op.drop_index(
        "ix_awooop_channel_event_dedupe_created_at", table_name="awooop_channel_event_dedupe"
    )
    op.drop_table("awooop_channel_event_dedupe")
