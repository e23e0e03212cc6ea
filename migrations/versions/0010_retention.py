"""retention: per-project run retention, and the indexes the retention sweep and /metrics use

- ``awooop_project.run_retention_days``: a project's own retention (NULL: the default).
- ``ix_awooop_timer_run``, ``ix_awooop_inbox_run``: a run's timers and inbox rows, deleted
  with it (the timer index also serves the ON DELETE CASCADE from the run).
- ``ix_awooop_outbox_done``: SENT and PARKED messages by status, oldest first (the sweep, and
  the parked count /metrics reads).
- ``ix_awooop_run_state_unfinished``: unfinished runs by status, so a /metrics scrape counts
  the runs in flight instead of every run kept.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 09:00:00.000000
"""

from alembic import op
import sqlalchemy as sa

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_UNFINISHED = "status IN ('PENDING', 'RUNNING', 'WAITING_TOOL', 'WAITING_APPROVAL', 'RESUMED')"
_DONE = "status IN ('SENT', 'PARKED')"


def upgrade() -> None:
    op.add_column("awooop_project", sa.Column("run_retention_days", sa.Integer(), nullable=True))
    op.create_check_constraint(
        op.f("ck_awooop_project_run_retention_days_valid"),
        "awooop_project",
        "run_retention_days BETWEEN 1 AND 3650",
    )
    # Built CONCURRENTLY, outside the migration's transaction (which commits the column
    # first): admissions, timers and sends keep writing the tables meanwhile. IF NOT EXISTS:
    # an index built by hand first (same name) is kept.
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_awooop_run_state_unfinished",
            "awooop_run_state",
            ["status"],
            unique=False,
            postgresql_where=sa.text(_UNFINISHED),
            postgresql_concurrently=True,
            if_not_exists=True,
        )
        op.create_index(
            "ix_awooop_timer_run",
            "awooop_timer",
            ["run_id"],
            postgresql_concurrently=True,
            if_not_exists=True,
        )
        op.create_index(
            "ix_awooop_inbox_run",
            "awooop_inbox",
            ["run_id"],
            postgresql_concurrently=True,
            if_not_exists=True,
        )
        op.create_index(
            "ix_awooop_outbox_done",
            "awooop_outbox",
            ["status", "created_at"],
            unique=False,
            postgresql_where=sa.text(_DONE),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for name, table in (
            ("ix_awooop_outbox_done", "awooop_outbox"),
            ("ix_awooop_inbox_run", "awooop_inbox"),
            ("ix_awooop_timer_run", "awooop_timer"),
            ("ix_awooop_run_state_unfinished", "awooop_run_state"),
        ):
            op.drop_index(name, table_name=table, postgresql_concurrently=True, if_exists=True)
    op.drop_constraint(
        op.f("ck_awooop_project_run_retention_days_valid"), "awooop_project", type_="check"
    )
    op.drop_column("awooop_project", "run_retention_days")
