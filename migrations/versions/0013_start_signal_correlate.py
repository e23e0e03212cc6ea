"""Starting chosen workflows, signals and correlated events

- ``awooop_project.allowed_workflows``: the workflows a client may start by name besides the
  routed ones (and the scheduled ones that run in the project). A constant default: added
  without rewriting the table.
- ``awooop_run_state.correlation_key``: nullable, no default (no rewrite), with a partial
  index over open runs (none has a key yet, so the index is small), built CONCURRENTLY
  outside the migration's transaction, so admissions keep writing the table meanwhile (an
  index of the same name built by hand first is kept).
- ``awooop_signal``: signals kept for the steps that wait for them.

Processes of the previous release ignore all three.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 17:00:00.000000
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_OPEN = (
    "correlation_key IS NOT NULL AND "
    "status IN ('PENDING', 'RUNNING', 'WAITING_TOOL', 'WAITING_APPROVAL', 'RESUMED')"
)


def upgrade() -> None:
    op.add_column(
        "awooop_project",
        sa.Column(
            "allowed_workflows",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
    )
    op.add_column(
        "awooop_run_state", sa.Column("correlation_key", sa.String(length=256), nullable=True)
    )
    op.create_table(
        "awooop_signal",
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("signal_id", sa.String(length=256), nullable=False),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("payload_digest", sa.String(length=64), nullable=False),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["awooop_run_state.run_id"],
            name=op.f("fk_awooop_signal_run_id_awooop_run_state"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "signal_id", name=op.f("pk_awooop_signal")),
    )
    op.create_index(
        "ix_awooop_signal_run_name_seq", "awooop_signal", ["run_id", "name", "seq"], unique=False
    )
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_awooop_run_state_correlation",
            "awooop_run_state",
            ["project_id", "workflow_name", "correlation_key"],
            unique=False,
            postgresql_where=sa.text(_OPEN),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(
            "ix_awooop_run_state_correlation",
            table_name="awooop_run_state",
            postgresql_concurrently=True,
            if_exists=True,
        )
    op.drop_index("ix_awooop_signal_run_name_seq", table_name="awooop_signal")
    op.drop_table("awooop_signal")
    op.drop_column("awooop_run_state", "correlation_key")
    op.drop_column("awooop_project", "allowed_workflows")
