"""Reruns and finding runs: rerun links, step tags, lookups by event id

- ``awooop_run_state.rerun_of`` / ``rerun_key``: a rerun's original run and the
  Idempotency-Key of the request that made it; ``tags``: the tags its steps set. All three
  nullable with no default (no rewrite); NULL for every existing run.
- Indexes, built concurrently (no write lock on the runs): the runs of an event id
  (``input ->> 'provider_event_id'``, covering existing runs), the tags (GIN, tagged runs
  only), a run's reruns, and one rerun of a run per request key (unique).

Processes of the previous release neither read nor write the new columns.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04 10:00:00.000000
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("awooop_run_state", sa.Column("rerun_of", sa.UUID(), nullable=True))
    op.add_column(
        "awooop_run_state", sa.Column("rerun_key", sa.String(length=255), nullable=True)
    )
    op.add_column(
        "awooop_run_state",
        sa.Column("tags", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_awooop_run_state_provider_event",
            "awooop_run_state",
            ["project_id", sa.text("(input ->> 'provider_event_id')")],
            unique=False,
            postgresql_concurrently=True,
            if_not_exists=True,
        )
        op.create_index(
            "ix_awooop_run_state_tags",
            "awooop_run_state",
            ["tags"],
            unique=False,
            postgresql_using="gin",
            postgresql_ops={"tags": "jsonb_path_ops"},
            postgresql_where=sa.text("tags IS NOT NULL"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )
        op.create_index(
            "ix_awooop_run_state_rerun_of",
            "awooop_run_state",
            ["rerun_of"],
            unique=False,
            postgresql_where=sa.text("rerun_of IS NOT NULL"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )
        op.create_index(
            "uq_awooop_run_state_rerun_key",
            "awooop_run_state",
            ["project_id", "rerun_key", "rerun_of"],
            unique=True,
            postgresql_where=sa.text("rerun_key IS NOT NULL"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    for name in (
        "uq_awooop_run_state_rerun_key",
        "ix_awooop_run_state_rerun_of",
        "ix_awooop_run_state_tags",
        "ix_awooop_run_state_provider_event",
    ):
        with op.get_context().autocommit_block():
            op.drop_index(
                name,
                table_name="awooop_run_state",
                postgresql_concurrently=True,
                if_exists=True,
            )
    op.drop_column("awooop_run_state", "tags")
    op.drop_column("awooop_run_state", "rerun_key")
    op.drop_column("awooop_run_state", "rerun_of")
