"""AwoooP behind PgBouncer in transaction pooling mode (docs/operations.md "Behind PgBouncer").

Each test starts Debian's pgbouncer (``make pgbouncer``) in front of its own database with two
server connections, so that the transactions of more client connections than that move
between them, and the statement and lock timeouts set by the pooler (``connect_query``).
With ``AWOOOP_DATABASE_PREPARED_STATEMENTS`` and ``AWOOOP_DATABASE_SESSION_OPTIONS`` off, runs
are admitted, claimed and driven to the end from several threads; with them on, the failures
that made them settings. With PostgreSQL cut off behind the pooler (a proxy between them
stops forwarding, and PgBouncer keeps answering its clients), a claim and an admission end at
the ``query_timeout`` the docs set, not when the network heals. And ``awooop migrate``'s
session-level lock stays behind when its release lands on another server connection, which is
why the docs have it go to PostgreSQL itself. Without pgbouncer the tests skip, or fail under
``CI=true``.
"""

from __future__ import annotations

import configparser
import dataclasses
import os
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
from awooop.store import admission, schema
from awooop.web.app import create_app
from awooop.workflows import registry
from tests.support import db as rows
from tests.support import debian_tools, processes, runs
from tests.support.docs import ROOT, fenced
from tests.support.netproxy import FaultProxy

SERVER_CONNECTIONS = 2
THREADS = 5
RUNS = 50
# What the pooler sets on each server connection, since the clients send no timeouts.
STATEMENT_TIMEOUT_MS, LOCK_TIMEOUT_MS = 30000, 10000


def documented_settings() -> dict[str, str]:
    """The ``[pgbouncer]`` settings of docs/operations.md's pgbouncer.ini."""
    blocks = [b.code for lang, b in fenced(ROOT / "docs/operations.md") if lang == "ini"]
    [block] = [code for code in blocks if code.startswith("[pgbouncer]")]
    parser = configparser.ConfigParser(inline_comment_prefixes=(";",))
    parser.read_string(block)
    return dict(parser["pgbouncer"])


@contextmanager
def started_pgbouncer(
    database_url: str,
    *,
    via: tuple[str, int] | None = None,
    statement_timeout_ms: int = STATEMENT_TIMEOUT_MS,
    query_timeout: float | None = None,
) -> Iterator[str]:
    """The URL of a PgBouncer of the test's own, set up as docs/operations.md says
    (transaction pooling, its ``query_timeout`` unless given), with two server connections to
    the test's database (through ``via``, a proxy, if given), the statement and lock timeouts
    set by ``connect_query``, and clients trusted (the user must be in its auth_file)."""
    executable = debian_tools.executable("pgbouncer")
    server = make_url(database_url)
    host, port = via or (server.host or "127.0.0.1", server.port or 5432)
    listen = devstack.free_port()
    documented = documented_settings()
    # PgBouncer refuses to run as root; it reads its files before taking the other identity.
    as_user = ["-u", "nobody"] if os.geteuid() == 0 else []
    with tempfile.TemporaryDirectory(prefix="awooop-pgbouncer-") as directory:
        here = Path(directory)
        target = f"host={host} port={port} dbname={server.database} user={server.username}"
        if server.password:
            target += f" password={server.password}"
        timeouts = f"SET statement_timeout = {statement_timeout_ms}; "
        timeouts += f"SET lock_timeout = {LOCK_TIMEOUT_MS}"
        (here / "users.txt").write_text(f'"{server.username}" ""\n')
        (here / "pgbouncer.ini").write_text(
            f"""[databases]
{server.database} = {target} connect_query='{timeouts}'

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {here / "users.txt"}
pool_mode = {documented["pool_mode"]}
default_pool_size = {SERVER_CONNECTIONS}
max_client_conn = 100
query_timeout = {query_timeout if query_timeout is not None else documented["query_timeout"]}
"""
        )
        argv = [executable, *as_user, str(here / "pgbouncer.ini")]
        with processes.serving("pgbouncer", argv, listen, here):
            url = server.set(host="127.0.0.1", port=listen, password=None)
            yield url.render_as_string(hide_password=False)


@pytest.fixture
def pgbouncer(database_url: str) -> Iterator[str]:
    with started_pgbouncer(database_url) as url:
        yield url


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


_RUN = "SELECT status, worker_id, lease_epoch FROM awooop_run_state WHERE run_id = :r"
# The tests' query_timeout (the docs' is 90 s), above the statement timeout they set.
QUERY_TIMEOUT_S = 3
QUICK_STATEMENT_TIMEOUT_MS = 2000


@contextmanager
def _cut_off_behind_pgbouncer(database_url: str) -> Iterator[tuple[FaultProxy, str]]:
    """A PgBouncer set up as the docs say, whose server connections go through a proxy to
    PostgreSQL (to be partitioned: PgBouncer's clients keep talking to PgBouncer)."""
    url = make_url(database_url)
    with (
        FaultProxy(url.host or "127.0.0.1", url.port or 5432) as proxy,
        started_pgbouncer(
            database_url,
            via=proxy.address,
            statement_timeout_ms=QUICK_STATEMENT_TIMEOUT_MS,
            query_timeout=QUERY_TIMEOUT_S,
        ) as bouncer,
    ):
        yield proxy, bouncer


def _ended_within(work, seconds: float) -> tuple[list, float, bool]:
    """``work()`` on a thread: what it returned (or raised), how long it took, and whether it
    was still waiting after ``seconds``."""
    done: list = []

    def call() -> None:
        try:
            done.append(work())
        except Exception as error:
            done.append(error)

    thread = threading.Thread(target=call)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    return done, time.monotonic() - started, thread.is_alive()


def test_the_documented_query_timeout_is_above_every_statement_timeout():
    documented = float(documented_settings()["query_timeout"])
    defaults = Settings(database_url="postgresql://x/y", broker_url="redis://x")

    assert documented > max(defaults.statement_timeout(role) for role in db.ROLES)


def test_a_claim_behind_pgbouncer_ends_at_its_query_timeout_when_the_database_is_cut_off(
    database_url, settings, engine, project
):
    # Given a run waiting to be claimed, and a worker behind PgBouncer whose pooled
    # connection (and PgBouncer's to the server) is open
    run_id = runs.admit(engine, project["project_id"])
    with _cut_off_behind_pgbouncer(database_url) as (proxy, bouncer):
        behind = _behind(settings, bouncer)
        pooled = db.make_engine(behind.database_url, 1, role=db.WORKER, settings=behind)
        try:
            with pooled.connect() as conn:
                _server_pid(conn)
            # When PostgreSQL stops answering PgBouncer, and the worker claims the run
            proxy.partition()
            done, took, waiting = _ended_within(
                lambda: runner.execute(pooled, behind, run_id), QUERY_TIMEOUT_S + 10
            )
            run_meanwhile = rows.rows(engine, _RUN, r=run_id)
            # (The proxy may deliver the claim late once healed: a claim that commits after
            # its worker gave up on it is the reaper's, once its lease expires.)
            proxy.heal()
        finally:
            lease.stop_keeper()
            pooled.dispose()

    # Then PgBouncer ends the claim's wait at its query_timeout, and the claim says the
    # database did not answer
    assert not waiting, "the claim still waited past PgBouncer's query_timeout"
    assert done == [runner.Outcome.UNREACHABLE]
    assert took >= QUERY_TIMEOUT_S - 0.5
    # And meanwhile the run was as it had been, for a worker that reaches the database
    assert run_meanwhile == [{"status": "PENDING", "worker_id": None, "lease_epoch": 0}]


def test_an_admission_behind_pgbouncer_is_answered_503_when_the_database_is_cut_off(
    database_url, settings, project
):
    # Given the web behind PgBouncer, which has admitted an event
    with _cut_off_behind_pgbouncer(database_url) as (proxy, bouncer):
        behind = _behind(settings, bouncer)
        pooled = db.make_engine(behind.database_url, 1, role=db.WEB, settings=behind)
        client = create_app(behind, pooled, enqueue=len, notify=len).test_client()
        path = f"/v1/projects/{project['project_id']}/runs"

        def admit(key: str):
            headers = {"Authorization": f"Bearer {project['api_token']}", "Idempotency-Key": key}
            return client.post(path, json={"n": 1}, headers=headers)

        try:
            assert admit("before").status_code == 202
            # When PostgreSQL stops answering PgBouncer, and another event arrives
            proxy.partition()
            done, took, waiting = _ended_within(lambda: admit("during"), 2 * QUERY_TIMEOUT_S + 10)
            proxy.heal()
        finally:
            pooled.dispose()

    # Then it is answered 503 once PgBouncer gives up on the statement
    assert not waiting, "the admission still waited past PgBouncer's query_timeout"
    [response] = done
    assert response.status_code == 503, response.get_json()
    assert response.get_json()["error"]["code"] == "E-UNAVAILABLE-001"
    assert int(response.headers["Retry-After"]) > 0
    assert took >= QUERY_TIMEOUT_S - 0.5


def test_the_migration_lock_stays_behind_when_migrate_runs_through_the_pooler(pgbouncer):
    # Why docs/operations.md has `awooop migrate` run against PostgreSQL itself: it holds a
    # session-level advisory lock across its transactions (one per migration, index builds
    # outside any), and a transaction pooler runs its release wherever a server connection
    # is free. Given migrate's connection, which took the lock on one server connection
    migrating = create_engine(pgbouncer, poolclass=NullPool)
    try:
        with migrating.connect() as conn:
            assert schema.try_migration_lock(conn)
            locked_on = _server_pid(conn)
            conn.commit()
            # When a web or worker transaction has that server connection as migrate ends
            with _holding(pgbouncer, locked_on):
                schema.release_migration_lock(conn)
                conn.commit()
            # Then that server connection still holds the lock, and the next migrate,
            # landing on the other one, cannot take it
            holders = [h["pid"] for h in schema.migration_lock_holders(conn)]
            conn.commit()
            with _holding(pgbouncer, locked_on), migrating.connect() as following:
                taken = schema.try_migration_lock(following)
                following.commit()
    finally:
        migrating.dispose()

    assert holders == [locked_on]
    assert not taken
