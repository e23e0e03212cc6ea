"""awooop_run_state.last_write_id: the identity of the lease holder's last fenced write

Every fenced write of a lease holder stamps its own identity here, so a holder whose reply
was lost asks whether its write committed by that identity, not by the journal's length
(which another actor's append may reach, or which a write that appends nothing never moves).

A nullable column without a default: added without rewriting the table, and ignored by
workers that do not stamp it (a rolling upgrade).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 12:00:00.000000
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "awooop_run_state",
        sa.Column("last_write_id", postgresql.UUID(as_uuid=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("awooop_run_state", "last_write_id")
