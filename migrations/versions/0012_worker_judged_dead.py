"""awooop_worker.judged_dead_at: when the reaper last judged the worker dead

The reaper stamps the row of a worker it judged dead, in the statement that takes its runs;
the worker's next liveness beat returns the stamp, and a stamp it has not seen before makes
it treat every lease it held then as lost. A nullable column with no default: added without rewriting the table, and
ignored by workers of the previous release (a rolling upgrade keeps working).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 12:30:00.000000
"""

from alembic import op
import sqlalchemy as sa

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "awooop_worker", sa.Column("judged_dead_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("awooop_worker", "judged_dead_at")
