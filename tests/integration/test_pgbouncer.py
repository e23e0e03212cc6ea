"""AwoooP behind PgBouncer in transaction pooling mode (docs/operations.md "Behind PgBouncer").

Each test starts Debian's pgbouncer (``make pgbouncer``) in front of its own database with two
server connections, so that the transactions of more client connections than that move
between them, and the statement and lock timeouts set by the pooler (``connect_query``).
With ``AWOOOP_DATABASE_PREPARED_STATEMENTS`` and ``AWOOOP_DATABASE_SESSION_OPTIONS`` off, runs
are admitted, claimed and driven to the end from several threads; with them on, the failures
that made them settings. Without pgbouncer the tests skip, or fail under ``CI=true``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Connection, create_engine, exc, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from awooop import db, devstack
from awooop.config import Settings
from awooop.domain.workflow import Workflow
from awooop.engine import lease, runner
from awooop.store import admission
from awooop.web.app import create_app
from awooop.workflows import registry
from tests.conftest import IN_CI
from tests.support import db as rows
from tests.support import runs

SERVER_CONNECTIONS = 2
THREADS = 5
RUNS = 50
# What the pooler sets on each server connection, since the clients send no timeouts.
STATEMENT_TIMEOUT_MS, LOCK_TIMEOUT_MS = 30000, 10000


def _executable() -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if found is None:
        message = (
            "pgbouncer is not installed: run `make pgbouncer` (as root on Debian), or "
            "`sudo apt-get install --no-install-recommends pgbouncer` (its service need not run)"
        )
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture
def pgbouncer(database_url: str) -> Iterator[str]:
    """The URL of a PgBouncer of this test's own: transaction pooling, two server
    connections to the test's database, clients trusted (the user must be in its auth_file)."""
    executable = _executable()
    server = make_url(database_url)
    port = devstack.free_port()
    # PgBouncer refuses to run as root; it reads its files before taking the other identity.
    as_user = ["-u", "nobody"] if os.geteuid() == 0 else []
    with tempfile.TemporaryDirectory(prefix="awooop-pgbouncer-") as directory:
        here = Path(directory)
        target = f"host={server.host or '127.0.0.1'} port={server.port or 5432}"
        target += f" dbname={server.database} user={server.username}"
        if server.password:
            target += f" password={server.password}"
        timeouts = f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}; "
        timeouts += f"SET lock_timeout = {LOCK_TIMEOUT_MS}"
        (here / "users.txt").write_text(f'"{server.username}" ""\n')
        (here / "pgbouncer.ini").write_text(
            f"""[databases]
{server.database} = {target} connect_query='{timeouts}'

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {here / "users.txt"}
pool_mode = transaction
default_pool_size = {SERVER_CONNECTIONS}
max_client_conn = 100
"""
        )
        log = here / "pgbouncer.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [executable, *as_user, str(here / "pgbouncer.ini")],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 10
            while not devstack.port_open(port, timeout=0.2):
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"pgbouncer did not start: {log.read_text()[-2000:]}")
                time.sleep(0.05)
            url = server.set(host="127.0.0.1", port=port, password=None)
            yield url.render_as_string(hide_password=False)
        finally:
            process.terminate()
            process.wait(10)


def _behind(settings: Settings, pgbouncer: str, *, prepared: bool = False) -> Settings:
    return dataclasses.replace(
        settings,
        database_url=pgbouncer,
        database_prepared_statements=prepared,
        database_session_options=False,
    )


def _noop() -> Workflow:
    # Looked up before any thread starts: the registry loads its built-in workflows on first
    # use, and a thread asking while another one loads them would find none yet.
    wf = registry.latest("noop-3")
    assert wf is not None
    return wf


def _admit(conn: Connection, project_id: str, wf: Workflow) -> uuid.UUID:
    """Admit a run of ``wf`` as the ingress does, within an active-run quota (so the
    statement takes the project's advisory lock in the same round trip)."""
    admitted = admission.admit(conn, runs.new_run(project_id, wf), max_active_runs=10 * RUNS)
    assert admitted.created
    return admitted.run_id


def _server_pid(conn: Connection) -> int:
    return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


@contextmanager
def _holding(pgbouncer: str, pid: int | None = None) -> Iterator[int]:
    """Keep one server connection (the one with ``pid``, if given) busy in another client's
    open transaction; yields its pid. The pooler hands a transaction any idle server
    connection, so this opens transactions until one holds the wanted one."""
    holder = create_engine(pgbouncer, poolclass=NullPool)
    held: list[Connection] = []
    try:
        while True:
            assert len(held) < SERVER_CONNECTIONS, f"no server connection has pid {pid}"
            held.append(holder.connect())
            got = _server_pid(held[-1])  # psycopg2 began a transaction: the server stays
            if pid is None or got == pid:
                break
        for other in held[:-1]:
            other.close()
        yield got
    finally:
        for conn in held:
            conn.close()
        holder.dispose()


def test_runs_admitted_and_driven_from_several_threads_complete(
    pgbouncer, settings, engine, project
):
    # Given AwoooP behind a transaction pooler, without prepared statements or session options
    behind = _behind(settings, pgbouncer)
    pooled = db.make_engine(behind.database_url, THREADS, role=db.WORKER, settings=behind)
    noop = _noop()
    admitted: list[uuid.UUID] = []
    outcomes: list[runner.Outcome] = []
    servers: list[set[int]] = []  # per client connection, the server connections it ran on
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(count: int) -> None:
        try:
            seen: set[int] = set()
            with pooled.connect() as conn:  # this thread's own client connection
                for _ in range(count):
                    seen.add(_server_pid(conn))
                    run_id = _admit(conn, project["project_id"], noop)
                    outcome = runner.execute(pooled, behind, run_id)
                    with lock:
                        admitted.append(run_id)
                        outcomes.append(outcome)
            with lock:
                servers.append(seen)
        except BaseException as error:  # reported below, in the test's thread
            with lock:
                errors.append(error)

    # When several threads each admit runs and drive them through claim, steps and finish
    threads = [threading.Thread(target=work, args=(RUNS // THREADS,)) for _ in range(THREADS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
    finally:
        lease.stop_keeper()  # it renews through the pooler too
        pooled.dispose()

    # Then every statement succeeded and every run completed, each step recorded once
    assert errors == []
    assert len(admitted) == RUNS and outcomes == [runner.Outcome.COMPLETED] * RUNS
    finished = rows.rows(
        engine, "SELECT status, saga_status, attempt_count, saga_steps FROM awooop_run_state"
    )
    assert len(finished) == RUNS
    for run in finished:
        assert (run["status"], run["saga_status"], run["attempt_count"]) == (
            "COMPLETED",
            "COMPLETED",
            1,
        )
        assert [(e["step"], e["status"]) for e in run["saga_steps"]] == [
            ("one", "SUCCEEDED"),
            ("two", "SUCCEEDED"),
            ("three", "SUCCEEDED"),
        ]
    history = rows.rows(
        engine, "SELECT kind, to_status, count(*) AS n FROM awooop_run_event GROUP BY 1, 2"
    )
    assert sorted((e["kind"], e["to_status"], e["n"]) for e in history) == [
        ("lease", "RUNNING", RUNS),
        ("transition", "COMPLETED", RUNS),
        ("transition", "PENDING", RUNS),
    ]
    # ... over the pooler's two server connections, which the clients' transactions shared
    assert len(set().union(*servers)) <= SERVER_CONNECTIONS
    assert any(len(seen) > 1 for seen in servers), servers


def test_the_timeouts_are_the_ones_the_pooler_sets(pgbouncer, settings):
    behind = _behind(settings, pgbouncer)
    pooled = db.make_engine(behind.database_url, 1, role=db.WORKER, settings=behind)
    try:
        with pooled.connect() as conn:
            timeouts = [
                conn.execute(text(f"SHOW {name}")).scalar_one()
                for name in ("statement_timeout", "lock_timeout")
            ]
    finally:
        pooled.dispose()

    assert timeouts == ["30s", "10s"]


def test_prepared_statements_fail_once_a_transaction_moves_to_another_server_connection(
    pgbouncer, settings, project
):
    # Given a client connection that prepared the admission statement on one server
    # connection (the other one busy meanwhile)
    behind = _behind(settings, pgbouncer, prepared=True)
    pooled = db.make_engine(behind.database_url, 1, settings=behind)
    try:
        with _holding(pgbouncer) as other, pooled.connect() as conn:
            _admit(conn, project["project_id"], _noop())
            prepared_on = _server_pid(conn)
        assert prepared_on != other

        # When its next admission can only run on the other server connection
        with (
            _holding(pgbouncer, prepared_on),
            pooled.connect() as conn,
            pytest.raises(exc.DBAPIError) as error,
        ):
            _admit(conn, project["project_id"], _noop())
    finally:
        pooled.dispose()

    # Then the server connection there has no such statement
    assert getattr(error.value.orig, "pgcode", None) == "26000"  # invalid_sql_statement_name
    assert 'prepared statement "awooop_admit_within_quota" does not exist' in str(error.value)


def test_plain_statements_run_on_whichever_server_connection_is_free(
    pgbouncer, settings, engine, project
):
    # Given the same moves as above, without prepared statements
    behind = _behind(settings, pgbouncer)
    pooled = db.make_engine(behind.database_url, 1, settings=behind)
    try:
        with _holding(pgbouncer) as other, pooled.connect() as conn:
            first = _admit(conn, project["project_id"], _noop())
            ran_on = _server_pid(conn)
        assert ran_on != other
        # When the next admission can only run on the other server connection
        with _holding(pgbouncer, ran_on), pooled.connect() as conn:
            second = _admit(conn, project["project_id"], _noop())
            assert _server_pid(conn) != ran_on
    finally:
        pooled.dispose()

    # Then both admissions stored their run
    assert first != second
    assert rows.count(engine, "awooop_run_state") == 2


def test_pgbouncer_refuses_the_session_options_unless_they_are_turned_off(pgbouncer, settings):
    refused = db.make_engine(
        pgbouncer, 1, settings=dataclasses.replace(settings, database_url=pgbouncer)
    )
    try:
        with pytest.raises(exc.OperationalError) as error, refused.connect():
            pass
    finally:
        refused.dispose()

    assert "unsupported startup parameter: options" in str(error.value)


def test_the_web_app_is_ready_behind_pgbouncer(pgbouncer, settings, redis_client):
    # Its readiness check connects afresh each time, without session options either
    behind = _behind(settings, pgbouncer)
    pooled = db.make_engine(behind.database_url, 1, settings=behind)
    try:
        response = create_app(behind, pooled).test_client().get("/readyz")
    finally:
        pooled.dispose()

    assert response.status_code == 200, response.get_json()
