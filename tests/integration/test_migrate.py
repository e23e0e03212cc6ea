"""`awooop migrate` against real PostgreSQL: one migrate at a time (the advisory lock), a
lock timeout on each migration's transaction with retries, index builds that block no
writer, invalid indexes rebuilt, and the schema check of a starting process."""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from awooop import migrate
from awooop.config import Settings
from awooop.store import schema
from tests.support import commands
from tests.support.processes import BIN
from tests.support.waiting import until


@pytest.fixture
def empty_url(server_url: str) -> Iterator[str]:
    name = f"awooop_mg_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def db(empty_url: str) -> Iterator[Engine]:
    engine = create_engine(empty_url, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def settings_for(url: str, **values: object) -> Settings:
    return replace(Settings(database_url=url), **values)


def revision(db: Engine) -> str:
    with db.connect() as conn:
        return str(conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one())


def waiting_on(db: Engine, wait_event: str, query_like: str, longer_than: float = 0.0) -> bool:
    """Whether a session of this database runs a statement like ``query_like`` that waits on
    ``wait_event`` and started more than ``longer_than`` seconds ago."""
    with db.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event = :event AND query LIKE :like "
                    "AND now() - query_start > make_interval(secs => :longer)"
                ),
                {"event": wait_event, "like": query_like, "longer": longer_than},
            ).scalar_one()
        )


def add_runs(db: Engine, count: int) -> str:
    project = f"p{uuid.uuid4().hex[:8]}"
    with db.begin() as conn:
        conn.execute(
            text("INSERT INTO awooop_project (project_id, name) VALUES (:p, :p)"), {"p": project}
        )
        for _ in range(count):
            add_run(conn, project)
    return project


def add_run(conn, project: str) -> None:  # type: ignore[no-untyped-def]
    conn.execute(
        text(
            "INSERT INTO awooop_run_state (run_id, project_id, channel_type, workflow_name, "
            "workflow_version, workflow_digest, input) "
            "VALUES (gen_random_uuid(), :p, 'api', 'w', 1, 'd', '{}')"
        ),
        {"p": project},
    )


def test_a_second_migrate_waits_for_the_first_then_finds_nothing_to_do(db, empty_url):
    said: list[str] = []
    settings = settings_for(empty_url, migrate_wait_seconds=60.0)
    # The first migrate, held on the gate: a session holding the migration lock.
    with db.connect() as first:
        assert schema.try_migration_lock(first)
        second = threading.Thread(target=migrate.run, args=(settings,), kwargs={"say": said.append})
        second.start()
        until(lambda: said, 20, "the second migrate to say it waits")
        assert "another awooop migrate holds the migration lock (pid" in said[0]
        assert "waiting up to 60 s" in said[0]
        with db.connect() as conn:  # nothing migrated while the first holds it
            assert schema.revisions(conn) is None
        first.commit()
        migrate._alembic(first, "head", down=False)  # the first migrate's work, then it lets go
        schema.release_migration_lock(first)
        first.commit()
    second.join(30)

    assert not second.is_alive()
    assert said[-1] == "the migration lock is free: migrating"
    assert revision(db) == migrate.head_revision()


def test_a_second_migrate_gives_up_after_its_wait_naming_the_holder(db, empty_url):
    with db.connect() as first:
        assert schema.try_migration_lock(first)
        pid = first.execute(text("SELECT pg_backend_pid()")).scalar_one()
        result = subprocess.run(
            [str(BIN / "awooop"), "migrate"],
            env={
                **os.environ,
                "AWOOOP_DATABASE_URL": empty_url,
                "AWOOOP_MIGRATE_WAIT_SECONDS": "1",
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert result.returncode == 1, result.stderr
    assert "another awooop migrate holds the migration lock" in result.stderr
    assert (
        f"awooop: error: another awooop migrate still holds the migration lock after 1 s (pid {pid}"
        in result.stderr
    )
    with db.connect() as conn:
        assert schema.revisions(conn) is None


def test_a_migration_behind_a_long_transaction_gives_up_after_the_lock_timeout(db, empty_url):
    migrate.run(settings_for(empty_url), "0012")
    said: list[str] = []
    settings = settings_for(empty_url, migrate_lock_timeout_seconds=0.3, migrate_lock_retries=2)
    # A long transaction reading awooop_project: 0013's ALTER TABLE needs it alone.
    with db.connect() as reader:
        reader.execute(text("BEGIN"))
        reader.execute(text("LOCK TABLE awooop_project IN ACCESS SHARE MODE"))
        with pytest.raises(migrate.MigrateError) as raised:
            migrate.run(settings, say=said.append)
        reader.execute(text("ROLLBACK"))

    assert "waited more than 0.3 s for a table lock 3 times" in str(raised.value)
    assert said == [
        "a migration waited more than 0.3 s for a table lock and was rolled back; trying "
        f"again in 0.3 s ({n} of 2 retries)"
        for n in (1, 2)
    ]
    assert revision(db) == "0012"  # 0013 rolled back whole; the lock is free again
    with db.connect() as conn:
        assert schema.try_migration_lock(conn)


def test_a_migration_cancelled_by_the_lock_timeout_is_tried_again_and_completes(db, empty_url):
    migrate.run(settings_for(empty_url), "0012")
    retried = threading.Event()
    settings = settings_for(empty_url, migrate_lock_timeout_seconds=0.3, migrate_lock_retries=3)
    with db.connect() as reader:
        reader.execute(text("BEGIN"))
        reader.execute(text("LOCK TABLE awooop_project IN ACCESS SHARE MODE"))
        run = threading.Thread(
            target=migrate.run, args=(settings,), kwargs={"say": lambda _: retried.set()}
        )
        run.start()
        assert retried.wait(20)
        reader.execute(text("COMMIT"))  # the long transaction ends
    run.join(30)

    assert revision(db) == migrate.head_revision()


def test_an_index_build_blocks_no_admission_and_waits_past_the_lock_timeout(db, empty_url):
    migrate.run(settings_for(empty_url), "0012")
    project = add_runs(db, 1)
    settings = settings_for(empty_url, migrate_lock_timeout_seconds=0.3, migrate_lock_retries=0)
    # An open transaction with a snapshot: 0013's concurrent build waits for it to end.
    with db.connect() as holder:
        holder.execute(text("BEGIN ISOLATION LEVEL REPEATABLE READ"))
        holder.execute(text("SELECT count(*) FROM pg_class"))
        run = threading.Thread(target=migrate.run, args=(settings,))
        run.start()
        until(
            lambda: waiting_on(db, "virtualxid", "CREATE INDEX CONCURRENTLY%"),
            20,
            "the concurrent build to wait for the open transaction",
        )
        # Admissions write the table meanwhile, within a short lock timeout: a blocked one
        # fails after 1 s. (The engine commits each statement unless told BEGIN, and SET
        # LOCAL outside a transaction does nothing.)
        with db.connect() as conn:
            conn.execute(text("BEGIN"))
            conn.execute(text("SET LOCAL lock_timeout = '1s'"))
            assert conn.execute(text("SHOW lock_timeout")).scalar_one() == "1s"
            for _ in range(5):
                add_run(conn, project)
            conn.execute(text("COMMIT"))
        # The build waits on, past the lock timeout of the migration's transactions.
        until(
            lambda: waiting_on(db, "virtualxid", "CREATE INDEX CONCURRENTLY%", longer_than=1.0),
            20,
            "the concurrent build to have waited a second",
        )
        assert run.is_alive()
        holder.execute(text("COMMIT"))
    run.join(30)

    assert not run.is_alive()
    assert revision(db) == migrate.head_revision()
    with db.connect() as conn:
        assert schema.invalid_indexes(conn) == []
        assert conn.execute(text("SELECT count(*) FROM awooop_run_state")).scalar_one() == 6


def test_an_index_a_failed_concurrent_build_left_invalid_is_built_again(db, empty_url):
    migrate.run(settings_for(empty_url), "0012")
    add_runs(db, 2)
    # A concurrent build that failed (here: a unique index over duplicates) leaves its index
    # INVALID under the name 0013 builds.
    with db.connect() as conn, pytest.raises(Exception, match="could not create unique index"):
        conn.execute(
            text(
                "CREATE UNIQUE INDEX CONCURRENTLY ix_awooop_run_state_correlation "
                "ON awooop_run_state (project_id)"
            )
        )
    with db.connect() as conn:
        assert schema.invalid_indexes(conn) == ["ix_awooop_run_state_correlation"]
    said: list[str] = []

    migrate.run(settings_for(empty_url), say=said.append)

    assert said == [
        "dropping index ix_awooop_run_state_correlation: an earlier concurrent build left it "
        "invalid; rebuilt below"
    ]
    with db.connect() as conn:
        assert schema.invalid_indexes(conn) == []
        definition = conn.execute(
            text("SELECT pg_get_indexdef('ix_awooop_run_state_correlation'::regclass)")
        ).scalar_one()
    assert "correlation_key" in definition and "UNIQUE" not in definition


def test_the_schema_check_refuses_an_older_schema_and_accepts_head_or_a_later_one(db, empty_url):
    head = migrate.head_revision()

    def problem() -> str | None:
        with db.connect() as conn:
            return migrate.schema_problem(conn)

    assert "no AwoooP schema" in str(problem())
    migrate.run(settings_for(empty_url), "0007")
    assert problem() == (
        f"the database schema is at revision 0007 and this release needs {head}: run this "
        "release's `awooop migrate` before starting its processes (docs/upgrading.md)"
    )
    migrate.run(settings_for(empty_url))
    assert problem() is None
    with db.connect() as conn:  # a later release's migration, unknown to this one
        conn.execute(text("UPDATE alembic_version SET version_num = 'later'"))
    assert problem() is None


# --- a revision this release does not have ----------------------------------------------------


def one_error_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("awooop: error: "), err
    return err


def test_a_revision_no_migration_has_is_refused_on_one_line(db, empty_url, capsys, monkeypatch):
    settings = settings_for(empty_url, secret_key=os.environ["AWOOOP_SECRET_KEY"])

    code, out, err = commands.run(capsys, monkeypatch, settings, "migrate", "9999")

    assert (code, out) == (2, "")
    assert "'9999'" in one_error_line(err) and migrate.head_revision() in err
    with db.connect() as conn:  # nothing was migrated
        assert conn.execute(text("SELECT to_regclass('alembic_version')")).scalar() is None


def test_a_downgrade_to_a_revision_above_the_schema_is_refused_on_one_line(
    db, empty_url, capsys, monkeypatch
):
    settings = settings_for(empty_url, secret_key=os.environ["AWOOOP_SECRET_KEY"])
    migrate.run(settings, "0007")

    code, out, err = commands.run(capsys, monkeypatch, settings, "migrate", "--down", "0013")

    assert (code, out) == (2, "")
    assert "0013" in one_error_line(err) and "0007" in err
    assert revision(db) == "0007"
