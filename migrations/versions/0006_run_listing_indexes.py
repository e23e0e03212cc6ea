"""run listing indexes for the runs API

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29 16:05:00.000000
"""

from alembic import op
import sqlalchemy as sa

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Built CONCURRENTLY, outside the migration's transaction: admissions keep writing the
    # table meanwhile. IF NOT EXISTS: an index built by hand first (same name) is kept.
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_awooop_run_state_project_created",
            "awooop_run_state",
            ["project_id", "created_at", "run_id"],
            unique=False,
            postgresql_concurrently=True,
            if_not_exists=True,
        )
        op.create_index(
            "ix_awooop_run_state_intervention",
            "awooop_run_state",
            ["project_id", "created_at", "run_id"],
            unique=False,
            postgresql_where=sa.text("saga_status = 'MANUAL_INTERVENTION'"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(
            "ix_awooop_run_state_intervention",
            table_name="awooop_run_state",
            postgresql_concurrently=True,
            if_exists=True,
        )
        op.drop_index(
            "ix_awooop_run_state_project_created",
            table_name="awooop_run_state",
            postgresql_concurrently=True,
            if_exists=True,
        )
