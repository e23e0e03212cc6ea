"""drop awooop_timer.fencing_token

The due-timer sweep claims a timer and applies its effect in one transaction, so a token
incremented per claim fenced nothing: it is gone.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 07:45:00.000000
"""

from alembic import op
import sqlalchemy as sa

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_column("awooop_timer", "fencing_token")


def downgrade() -> None:
    op.add_column(
        "awooop_timer",
        sa.Column("fencing_token", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )
