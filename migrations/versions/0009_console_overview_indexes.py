"""indexes for the console's overview: runs finished per minute, unsent outbox messages

The overview reads a project's runs finished in the last hours and its outbox backlog; these
two partial indexes keep both reads to the rows they count.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 09:00:00.000000
"""

from alembic import op
import sqlalchemy as sa

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Built CONCURRENTLY, outside the migration's transaction: admissions and outbox sends
    # keep writing the tables meanwhile. IF NOT EXISTS: an index built by hand first (same
    # name) is kept.
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_awooop_run_state_project_finished",
            "awooop_run_state",
            ["project_id", "finished_at"],
            unique=False,
            postgresql_where=sa.text("finished_at IS NOT NULL"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )
        op.create_index(
            "ix_awooop_outbox_project_unsent",
            "awooop_outbox",
            ["project_id", "status", "created_at"],
            unique=False,
            postgresql_where=sa.text("status IN ('PENDING', 'PARKED')"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(
            "ix_awooop_outbox_project_unsent",
            table_name="awooop_outbox",
            postgresql_concurrently=True,
            if_exists=True,
        )
        op.drop_index(
            "ix_awooop_run_state_project_finished",
            table_name="awooop_run_state",
            postgresql_concurrently=True,
            if_exists=True,
        )
