"""Against a real primary and a real streaming standby (``pg_basebackup -R``) of this run:

- the start-up failover check (:mod:`awooop.failover`): a lone primary and a primary whose
  standby is synchronous are safe and logged as such; an asynchronous standby, or commits
  that wait for none (``synchronous_commit = local``), make one WARNING saying what could be
  lost and what to configure, and ``AWOOOP_DATABASE_FAILOVER_CHECK=refuse`` stops the start;
  a role that may not read ``pg_stat_replication``'s states says it could not check and
  starts.
- replica reads (``AWOOOP_DATABASE_REPLICA_URL``): the console's run list and ``/metrics``
  read the standby — a run admitted while the standby's replay is paused is missing from
  both, and appears once replay resumes — while the page of one run reads the primary.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from awooop import failover
from awooop.config import Settings
from awooop.web.app import create_app
from tests.chaos.services import Postgres
from tests.conftest import IN_CI
from tests.support import replication, tokens, waiting
from tests.support import runs as test_runs
from tests.support.console import login
from tests.support.console import text as page_text

DATABASE = "awooop"


def _need_binaries() -> None:
    reason = replication.missing_binaries()
    if reason:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def primary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    """A PostgreSQL cluster of this module, with a migrated ``awooop`` database."""
    _need_binaries()
    with replication.primary_with_database(tmp_path_factory.mktemp("primary"), DATABASE) as server:
        yield server


@pytest.fixture
def database_url(primary: Postgres) -> str:
    """The shared fixtures (engine, settings, project) over the primary's database."""
    return primary.url(DATABASE)


@pytest.fixture
def primary_admin(primary: Postgres) -> Iterator[Engine]:
    engine = replication.admin(primary)
    yield engine
    engine.dispose()


@pytest.fixture
def standby(primary: Postgres, tmp_path: Path) -> Iterator[Postgres]:
    """A hot standby streaming from the primary (asynchronously, unless a test says so)."""
    with replication.streaming_standby(tmp_path / "standby", primary) as server:
        yield server


def _check(settings: Settings) -> tuple[failover.Verdict, replication.Lines]:
    with replication.recorded("awooop.failover") as lines:
        verdict = failover.check(settings, "worker")
    return verdict, lines


# --- The start-up check ------------------------------------------------------------------


def test_a_lone_primary_is_safe_and_says_so_without_a_warning(settings, primary_admin):
    assert replication.sync_states(primary_admin) == {}
    verdict, lines = _check(settings)
    assert verdict.state == failover.SAFE, verdict
    assert lines.warnings() == []
    assert lines.actions() == ["database_failover_safe"]


def test_an_asynchronous_standby_makes_one_warning_saying_what_is_lost(settings, standby):
    verdict, lines = _check(settings)
    assert verdict.state == failover.AT_RISK, verdict
    [warning] = lines.warnings()
    assert lines.actions(logging.WARNING) == ["database_failover_at_risk"]
    assert "could lose committed transactions on failover" in warning
    assert "synchronous_standby_names is empty" in warning
    assert "acknowledged" in warning and "lease epochs are issued again" in warning
    assert "two workers could act on one step" in warning
    assert "synchronous_mode" in warning


def test_a_synchronous_standby_is_safe(settings, standby, primary_admin):
    replication.set_synchronous_standbys(primary_admin, "standby1")
    replication.wait_sync_state(primary_admin, "standby1", "sync")
    verdict, lines = _check(settings)
    assert verdict.state == failover.SAFE, verdict
    assert lines.warnings() == []


def test_an_asynchronous_standby_named_but_not_waited_for_is_at_risk(
    settings, standby, primary_admin
):
    # Another standby is named: the attached one stays async, and commits wait for nobody.
    replication.set_synchronous_standbys(primary_admin, "other")
    waiting.until(
        lambda: _setting(primary_admin, "synchronous_standby_names") == "other",
        30,
        "the primary to reload synchronous_standby_names",
    )
    verdict, lines = _check(settings)
    assert verdict.state == failover.AT_RISK, verdict
    assert "standby1: async" in verdict.reason
    assert lines.actions(logging.WARNING) == ["database_failover_at_risk"]


def test_commits_that_wait_for_no_standby_are_at_risk_though_one_is_synchronous(
    settings, standby, primary_admin, primary
):
    replication.set_synchronous_standbys(primary_admin, "standby1")
    replication.wait_sync_state(primary_admin, "standby1", "sync")
    with primary_admin.connect() as conn:
        conn.execute(text(f"ALTER DATABASE {DATABASE} SET synchronous_commit = local"))
    try:
        verdict, lines = _check(settings)
    finally:
        with primary_admin.connect() as conn:
            conn.execute(text(f"ALTER DATABASE {DATABASE} RESET synchronous_commit"))
    assert verdict.state == failover.AT_RISK, verdict
    assert "synchronous_commit is local" in verdict.reason
    assert len(lines.warnings()) == 1


def test_refuse_stops_a_start_on_an_asynchronous_standby_and_warn_does_not(
    settings, standby, capsys
):
    with pytest.raises(SystemExit) as stopped:
        failover.check_or_exit(
            dataclasses.replace(settings, database_failover_check="refuse"), "web"
        )
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "awooop: web: the database could lose committed transactions on failover" in err
    assert "AWOOOP_DATABASE_FAILOVER_CHECK=refuse" in err
    verdict = failover.check_or_exit(settings, "web")
    assert verdict is not None and verdict.state == failover.AT_RISK
    off = dataclasses.replace(settings, database_failover_check="off")
    with replication.recorded("awooop.failover") as lines:
        assert failover.check_or_exit(off, "web") is None
    assert lines.records == []


def test_a_role_that_may_not_read_the_standbys_state_says_it_could_not_check_and_starts(
    settings, standby, primary_admin, primary
):
    role = f"plain_{uuid.uuid4().hex[:8]}"
    with primary_admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN"))
    # Named, so that the empty-list verdict does not answer before the states are read.
    replication.set_synchronous_standbys(primary_admin, "standby1")
    replication.wait_sync_state(primary_admin, "standby1", "sync")
    url = f"postgresql+psycopg2://{role}@{primary.host}:{primary.port}/{DATABASE}"
    refusing = dataclasses.replace(settings, database_url=url, database_failover_check="refuse")
    try:
        with replication.recorded("awooop.failover") as lines:
            verdict = failover.check_or_exit(refusing, "worker")
    finally:
        with primary_admin.connect() as conn:
            conn.execute(text(f"DROP ROLE {role}"))
    assert verdict is not None and verdict.state == failover.UNKNOWN, verdict
    [warning] = lines.warnings()
    assert warning.startswith("could not check whether the database could lose committed")
    assert "pg_monitor" in warning


def test_a_database_that_does_not_answer_is_not_checked_and_the_start_goes_on(settings):
    gone = dataclasses.replace(
        settings,
        database_url="postgresql+psycopg2://postgres@127.0.0.1:1/awooop",
        database_failover_check="refuse",
    )
    with replication.recorded("awooop.failover") as lines:
        verdict = failover.check_or_exit(gone, "beat")
    assert verdict is not None and verdict.state == failover.UNKNOWN
    assert lines.actions(logging.WARNING) == ["database_failover_unknown"]


def test_a_standby_given_as_the_database_is_called_one(settings, standby):
    verdict, lines = _check(dataclasses.replace(settings, database_url=standby.url(DATABASE)))
    assert verdict.state == failover.STANDBY, verdict
    assert lines.actions(logging.WARNING) == ["database_failover_standby"]


def _setting(engine: Engine, name: str) -> str:
    with engine.connect() as conn:
        return str(conn.execute(text("SELECT current_setting(:n)"), {"n": name}).scalar_one())


# --- Replica reads ------------------------------------------------------------------------


def _on(engine: Engine, run_id: uuid.UUID) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text("SELECT count(*) FROM awooop_run_state WHERE run_id = :r"), {"r": run_id}
            ).scalar_one()
        )


def _unfinished_runs(metrics_page: str) -> int:
    return sum(
        int(float(m))
        for m in re.findall(r'^awooop_runs\{status="[A-Z_]+"\} (\S+)$', metrics_page, re.M)
    )


def test_console_lists_and_metrics_read_the_replica_and_lag_its_replay(
    settings, engine, project, standby
):
    replica = replication.admin(standby, DATABASE)
    standby_admin = replication.admin(standby)
    app = create_app(
        dataclasses.replace(settings, database_replica_url=standby.url(DATABASE)), engine
    )
    client = app.test_client()
    project_id = project["project_id"]
    token = tokens.add(engine, project_id, "viewer")
    assert login(client, project_id, token).status_code == 303
    try:
        seen = test_runs.admit(engine, project_id)
        waiting.until(lambda: _on(replica, seen), 30, "the standby to replay the first run")
        assert str(seen) in page_text(client.get("/console/runs"))
        before = _unfinished_runs(page_text(client.get("/metrics")))

        with standby_admin.connect() as conn:
            conn.execute(text("SELECT pg_wal_replay_pause()"))
        waiting.until(
            lambda: _paused(standby_admin),
            30,
            "the standby's replay to pause",
        )
        late = test_runs.admit(engine, project_id)
        listed = page_text(client.get("/console/runs"))
        assert str(seen) in listed and str(late) not in listed
        assert _unfinished_runs(page_text(client.get("/metrics"))) == before
        # The page of one run reads the primary: it is there already.
        assert client.get(f"/console/runs/{late}").status_code == 200

        with standby_admin.connect() as conn:
            conn.execute(text("SELECT pg_wal_replay_resume()"))
        waiting.until(
            lambda: str(late) in page_text(client.get("/console/runs")),
            30,
            "the run admitted during the pause to reach the list",
        )
        assert _unfinished_runs(page_text(client.get("/metrics"))) == before + 1
    finally:
        with standby_admin.connect() as conn:
            conn.execute(text("SELECT pg_wal_replay_resume()"))
        replica.dispose()
        standby_admin.dispose()


def _paused(engine: Engine) -> bool:
    with engine.connect() as conn:
        return conn.execute(text("SELECT pg_get_wal_replay_pause_state()")).scalar_one() == "paused"


def test_without_a_replica_url_lists_read_the_primary(settings, engine):
    app = create_app(settings, engine)
    assert app.extensions["awooop"]["read_engine"] is engine


def test_a_multi_host_url_reaches_the_primary_whichever_host_comes_first(
    settings, standby, primary
):
    # The URL docs/operations.md shows for a failover pair: libpq tries each host in turn
    # and keeps the one that accepts writes.
    url = (
        f"postgresql+psycopg2://postgres@/{DATABASE}?host={standby.host}:{standby.port}"
        f"&host={primary.host}:{primary.port}&target_session_attrs=read-write"
    )
    checked = Settings.from_env(
        {"AWOOOP_DATABASE_URL": url, "AWOOOP_DATABASE_FAILOVER_CHECK": "warn"},
        ("database_url",),
    )
    verdict, _ = _check(dataclasses.replace(settings, database_url=checked.database_url))
    assert verdict.state == failover.AT_RISK, verdict
