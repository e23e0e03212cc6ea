"""awooop_worker: a liveness row per worker process

The lease keeper renews its process's row every few seconds; the reaper takes the RUNNING
runs of a worker whose row has gone stale, without waiting for their leases to expire.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 09:00:00.000000
"""

from alembic import op
import sqlalchemy as sa

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "awooop_worker",
        sa.Column("worker_id", sa.String(length=128), nullable=False),
        sa.Column("host", sa.String(length=64), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "seen_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("worker_id", name=op.f("pk_awooop_worker")),
    )


def downgrade() -> None:
    op.drop_table("awooop_worker")
