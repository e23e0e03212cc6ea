"""inbox for asynchronous results

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 13:07:10.561384
"""

from alembic import op
import sqlalchemy as sa


revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "awooop_inbox",
        sa.Column("consumer", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.String(length=256), nullable=False),
        sa.Column("run_id", sa.UUID(), nullable=True),
        sa.Column("request_digest", sa.String(length=64), nullable=False),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("consumer", "event_id", name=op.f("pk_awooop_inbox")),
    )


def downgrade() -> None:
    op.drop_table("awooop_inbox")
