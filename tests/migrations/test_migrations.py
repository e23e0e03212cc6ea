"""Alembic: upgrade head on an empty database, no drift from the models, downgrade base."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Engine, create_engine, inspect, text

from awooop.models import metadata
from tests.conftest import ROOT


@pytest.fixture
def empty_engine(server_url: str) -> Iterator[Engine]:
    import uuid

    from sqlalchemy.engine import make_url

    name = f"awooop_m_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine = create_engine(make_url(server_url).set(database=name))
    yield engine
    engine.dispose()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


def migrate(engine: Engine, direction: str, revision: str) -> None:
    config = Config(str(ROOT / "alembic.ini"))
    # No transaction open: Alembic opens its own (and steps out of it for CREATE INDEX
    # CONCURRENTLY).
    with engine.connect() as conn:
        config.attributes["connection"] = conn
        getattr(command, direction)(config, revision)


def test_upgrade_head_creates_the_adr_dedupe_table_with_its_unique_key(empty_engine):
    migrate(empty_engine, "upgrade", "head")

    inspector = inspect(empty_engine)
    columns = {c["name"]: c for c in inspector.get_columns("awooop_channel_event_dedupe")}
    assert {
        "dedupe_id",
        "project_id",
        "channel_type",
        "provider_event_id",
        "run_id",
        "created_at",
        "request_digest",
    } == set(columns)
    assert str(columns["project_id"]["type"]) == "VARCHAR(64)"
    assert str(columns["channel_type"]["type"]) == "VARCHAR(32)"
    assert str(columns["provider_event_id"]["type"]) == "VARCHAR(256)"
    assert str(columns["run_id"]["type"]) == "UUID"
    assert all(not columns[c]["nullable"] for c in columns)
    uniques = inspector.get_unique_constraints("awooop_channel_event_dedupe")
    assert [u["column_names"] for u in uniques] == [
        ["project_id", "channel_type", "provider_event_id"]
    ]


def test_run_state_status_accepts_exactly_the_adr_states(empty_engine):
    migrate(empty_engine, "upgrade", "head")
    checks = inspect(empty_engine).get_check_constraints("awooop_run_state")
    status_check = next(
        c for c in checks if c["name"].endswith("status_valid") and "saga" not in c["name"]
    )
    for state in (
        "PENDING",
        "RUNNING",
        "WAITING_TOOL",
        "WAITING_APPROVAL",
        "RESUMED",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
    ):
        assert f"'{state}'" in status_check["sqltext"]


def test_models_and_migrations_do_not_drift(empty_engine):
    migrate(empty_engine, "upgrade", "head")

    with empty_engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, metadata)

    assert diff == []


def test_downgrade_base_removes_everything_and_upgrade_works_again(empty_engine):
    migrate(empty_engine, "upgrade", "head")
    migrate(empty_engine, "downgrade", "base")

    assert set(inspect(empty_engine).get_table_names()) == {"alembic_version"}

    migrate(empty_engine, "upgrade", "head")
    assert "awooop_run_state" in inspect(empty_engine).get_table_names()


def test_run_state_leaves_room_for_hot_updates(empty_engine):
    migrate(empty_engine, "upgrade", "head")

    with empty_engine.connect() as conn:
        options = conn.execute(
            text("SELECT reloptions FROM pg_class WHERE relname = 'awooop_run_state'")
        ).scalar_one()

    assert options == ["fillfactor=70"]
