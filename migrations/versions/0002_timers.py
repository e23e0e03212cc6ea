"""durable timers

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 12:55:12.513780
"""

from alembic import op
import sqlalchemy as sa


revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "awooop_timer",
        sa.Column("timer_id", sa.String(length=256), nullable=False),
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("step", sa.String(length=128), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expected_version", sa.BigInteger(), nullable=False),
        sa.Column(
            "state", sa.String(length=16), server_default=sa.text("'PENDING'"), nullable=False
        ),
        sa.Column("claimed_by", sa.String(length=128), nullable=True),
        sa.Column("fencing_token", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('PENDING', 'FIRED', 'SKIPPED')", name=op.f("ck_awooop_timer_state_valid")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["awooop_run_state.run_id"],
            name=op.f("fk_awooop_timer_run_id_awooop_run_state"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("timer_id", name=op.f("pk_awooop_timer")),
    )
    op.create_index(
        "ix_awooop_timer_due",
        "awooop_timer",
        ["due_at"],
        unique=False,
        postgresql_where=sa.text("state = 'PENDING'"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_awooop_timer_due",
        table_name="awooop_timer",
        postgresql_where=sa.text("state = 'PENDING'"),
    )
    op.drop_table("awooop_timer")
