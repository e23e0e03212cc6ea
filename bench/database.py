"""The benches' databases: scratch databases (created beside ``AWOOOP_DATABASE_URL``'s, dropped
at the end), the bench projects in them, progress polled without committing (and a batch of
runs drained by one worker), and the commits counted exactly (what is not run work counted
where it happens and subtracted; sessions that are not the bench's noted; bench/NOTES.md).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extensions
import redis
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from bench.report import ROOT, BenchError, log

AUTH_LOADS = "awooop_project_auth_loads_total"


# --- URLs and connections ------------------------------------------------------------------


def database_url(url: str, name: str) -> str:
    """``url`` with its database replaced by ``name``."""
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """The SQLAlchemy URL as libpq (psycopg2, psycopg 3) spells it."""
    return url.replace("postgresql+psycopg2://", "postgresql://", 1)


@contextlib.contextmanager
def connect(url: str, autocommit: bool = True, **kw: Any) -> Iterator[Any]:
    """A fresh connection (its backend exits, flushing its statistics, on close)."""
    conn = psycopg2.connect(
        libpq_url(url), application_name="awooop-bench", connect_timeout=5, **kw
    )
    conn.autocommit = autocommit
    try:
        yield conn
    finally:
        conn.close()


def query(url: str, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    """The rows of one statement, on a connection of its own (autocommit)."""
    with connect(url) as conn, conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall()) if cur.description else []


# --- scratch databases -----------------------------------------------------------------------


class Scratch:
    """Databases beside ``url``'s, dropped by :meth:`close` (unless ``keep``)."""

    def __init__(self, url: str, keep: bool = False) -> None:
        self.url, self.keep = url, keep
        self.names: list[str] = []
        server = database_url(url, "postgres")
        self.admin: Engine = create_engine(server, isolation_level="AUTOCOMMIT")

    def empty(self, prefix: str) -> tuple[str, str]:
        """A new empty database: its name and URL."""
        name = f"{prefix}_{time.strftime('%Y%m%d%H%M%S')}_{secrets.token_hex(3)}"
        try:
            with self.admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        except Exception as exc:
            raise BenchError(f"could not create the scratch database {name}: {exc}") from exc
        self.names.append(name)
        return name, database_url(self.url, name)

    def migrated(self, prefix: str) -> tuple[str, str]:
        """A new database migrated to head (``awooop migrate``'s Alembic upgrade)."""
        from alembic import command
        from alembic.config import Config

        name, url = self.empty(prefix)
        engine = create_engine(url)
        config = Config(str(ROOT / "alembic.ini"))
        with engine.connect() as conn:  # outside a transaction: concurrent index builds
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
        engine.dispose()
        log(f"scratch database {name} created and migrated")
        return name, url

    def close(self) -> None:
        if self.keep and self.names:
            log(f"kept the scratch databases (BENCH_KEEP=1): {', '.join(self.names)}")
        for name in [] if self.keep else self.names:
            try:
                with self.admin.connect() as conn:
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                log(f"dropped the scratch database {name}")
            except Exception as exc:  # reported; the others still go
                log(f"could not drop the scratch database {name}: {exc}")
        self.admin.dispose()


def _tables(cur: Any) -> list[str]:
    cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1")
    return [str(row[0]) for row in cur.fetchall()]


def autovacuum_off(url: str) -> list[str]:
    """Autovacuum (and autoanalyze) off on every table of the schema, TOAST included."""
    with connect(url) as conn, conn.cursor() as cur:
        tables = _tables(cur)
        for table in tables:
            cur.execute(
                f'ALTER TABLE "{table}" SET '
                "(autovacuum_enabled = off, toast.autovacuum_enabled = off)"
            )
    return tables


def vacuum_analyze(url: str, maintenance_url: str | None = None, tables: str = "") -> None:
    """``VACUUM (ANALYZE)`` of ``tables`` (default: every table of the schema). With
    ``maintenance_url``: returns once its session has ended on the server (a backend flushes
    its statistics, here a commit per table, as it exits)."""
    with connect(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        (pid,) = cur.fetchone()
        cur.execute("VACUUM (ANALYZE) " + (tables or ", ".join(f'"{t}"' for t in _tables(cur))))
    if maintenance_url is not None:
        wait_gone(maintenance_url, "pid = %s", pid, f"the VACUUM session (pid {pid})")


def vacuum_database(url: str) -> None:
    """``VACUUM (ANALYZE)`` of every table of the database, whatever its schema."""
    with connect(url) as conn, conn.cursor() as cur:
        cur.execute("VACUUM (ANALYZE)")


def vacuum_runs(url: str) -> None:
    """The run tables vacuumed before a phase, so that autovacuum's work on the rows of the
    phases before lands outside its figures; returns once the session's statistics are in."""
    vacuum_analyze(url, tables="awooop_run_state, awooop_run_event, awooop_channel_event_dedupe")
    time.sleep(0.3)


def wait_gone(
    maintenance_url: str, where: str, arg: object, what: str, timeout: float = 15
) -> None:
    """Until no session of ``pg_stat_activity`` matches ``where``."""
    with connect(maintenance_url) as conn, conn.cursor() as cur:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cur.execute(f"SELECT 1 FROM pg_stat_activity WHERE {where} LIMIT 1", (arg,))
            if cur.fetchone() is None:
                return
            time.sleep(0.05)
    raise BenchError(f"{what} still connected after {timeout:.0f} s")


def sessions(url: str, database: str | None = None) -> int:
    """Sessions on ``database`` (default: ``url``'s own) other than this one."""
    return int(
        query(
            url,
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = coalesce(%s, current_database()) AND pid <> pg_backend_pid()",
            (database,),
        )[0][0]
    )


# --- projects and queues ---------------------------------------------------------------------


def create_projects(
    url: str,
    ids: Sequence[str],
    routes: dict[str, str] | None = None,
    limits: dict[str, int | None] | None = None,
) -> dict[str, str]:
    """Each project with an operator API token, its ``api`` channel routed to ``noop-3`` (or
    ``routes``), in one transaction; the tokens."""
    from awooop import db
    from awooop import secrets as crypto
    from awooop.config import Settings
    from awooop.store import projects

    tokens = {project_id: crypto.new_token() for project_id in ids}
    settings = Settings.from_env()
    engine = db.make_engine(url, pool_size=1, settings=settings)
    try:
        with db.transaction(engine) as conn:
            for p in ids:
                projects.create_project(conn, p, p, routes or {"api": "noop-3"})
                projects.add_api_token(conn, p, "operator", crypto.sha256_hex(tokens[p]))
                if limits:
                    projects.set_limits(conn, p, limits)
    finally:
        engine.dispose()
    gc.collect()
    return tokens


def delete_projects(url: str, ids: list[str], tag: str) -> None:
    """The bench projects' rows deleted (a failure is logged: the bench's figures stand)."""
    try:
        with connect(url, autocommit=False) as conn, conn.cursor() as cur:
            # Children first; awooop_run_event goes with its runs (ON DELETE CASCADE).
            for table in ("channel_event_dedupe", "run_state", "credential", "project"):
                cur.execute(f"DELETE FROM awooop_{table} WHERE project_id = ANY(%s)", (ids,))
            conn.commit()
        log(f"deleted the bench projects' rows ({len(ids):,} projects, {tag}-*)")
    except psycopg2.Error as exc:
        log(f"could not delete the bench projects' rows: {exc}")


def purge_queue(r: redis.Redis, queue: str = "runs") -> int:
    """Delete a kombu Redis queue (and its priority sub-queues); returns messages dropped."""
    names = [queue] + [f"{queue}\x06\x16{p}" for p in range(1, 10)]
    dropped = sum(int(r.llen(n)) for n in names)
    r.delete(*names)
    return dropped


# --- progress ----------------------------------------------------------------------------------

RUNS_COUNTS = """
SELECT count(*) FILTER (WHERE status = 'COMPLETED'),
       count(*) FILTER (WHERE status IN ('FAILED', 'CANCELLED')),
       count(*),
       count(*) FILTER (WHERE status = 'RUNNING')
FROM awooop_run_state WHERE project_id = ANY(%(p)s)
"""

RUNS_SPAN = """
SELECT (SELECT min(e.at) FROM awooop_run_event e JOIN awooop_run_state r USING (run_id)
        WHERE r.project_id = ANY(%(p)s) AND e.kind = 'lease' AND e.trigger_id LIKE 'claim:%%'
          AND e.at >= %(since)s),
       (SELECT max(finished_at) FROM awooop_run_state
        WHERE project_id = ANY(%(p)s) AND finished_at >= %(since)s)
"""

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
STALL_S = 20.0
DRAINED_STOP_S = 3.0  # a drained worker's time to stop before it is killed


class Progress:
    """Counts polled inside ONE transaction (READ COMMITTED: each statement sees the latest
    commits), rolled back at the end, so polling adds no ``xact_commit`` beyond its session's
    start-up (counted by ``tally`` when given). ``counts`` returns (done, failed, total, …)
    and ``span`` (first, last) as timestamps or epoch milliseconds."""

    def __init__(
        self,
        url: str,
        params: dict[str, Any],
        counts: str = RUNS_COUNTS,
        span: str = RUNS_SPAN,
        tally: Tally | None = None,
    ) -> None:
        self._cm = tally.connect(url) if tally is not None else connect(url, autocommit=False)
        self.conn = self._cm.__enter__()
        self.params = {"since": EPOCH, **params}
        self._counts, self._span = counts, span

    @classmethod
    def runs(cls, url: str, project_ids: list[str], tally: Tally | None = None) -> Progress:
        return cls(url, {"p": project_ids}, tally=tally)

    def one(self, sql: str, **params: Any) -> tuple[Any, ...]:
        with self.conn.cursor() as cur:
            cur.execute(sql, {**self.params, **params})
            return tuple(cur.fetchone())

    def counts(self) -> tuple[int, ...]:
        return tuple(int(v) for v in self.one(self._counts))

    def clock(self) -> dt.datetime:
        """The database's clock now (not the transaction's start)."""
        return self.one("SELECT clock_timestamp()")[0]

    def span(self, since: dt.datetime = EPOCH) -> float:
        """Seconds from the first claim to the last completion (of the runs claimed since)."""
        first, last = self.one(self._span, since=since)
        if first is None or last is None:
            return float("nan")
        if isinstance(first, dt.datetime):
            return (last - first).total_seconds()
        return (float(last) - float(first)) / 1000.0

    def wait(
        self,
        expected: int,
        checks: Sequence[Any],
        timeout: float,
        on_poll: Any = None,
        poll: float = 0.1,
    ) -> None:
        """Until ``expected`` are done (``counts()[0]``); a failed one, a process of
        ``checks`` gone, no progress for STALL_S or ``timeout`` is a BenchError naming the
        first process's log. ``on_poll(done)`` after each poll."""
        deadline = time.monotonic() + timeout
        last, last_change = None, time.monotonic()
        while True:
            counts = self.counts()
            done, failed = counts[0], counts[1]
            if on_poll is not None:
                on_poll(done)
            if failed:
                raise checks[0].failure(f"{failed} runs failed")
            if done >= expected:
                return
            for proc in checks:
                proc.check()
            now = time.monotonic()
            if counts[:3] != last:
                last, last_change = counts[:3], now
            stalled = now - last_change > STALL_S
            if now > deadline or stalled:
                why = f"no progress for {STALL_S:.0f} s" if stalled else f"after {timeout:.0f} s"
                raise checks[0].failure(
                    f"only {done}/{expected} done ({why}; counts {counts}; another consumer of "
                    "the broker's queue, e.g. a `make run` worker, takes the bench's messages)"
                )
            time.sleep(poll)

    def close(self) -> None:
        self.conn.rollback()
        self._cm.__exit__(None, None, None)


@dataclass(frozen=True)
class Drained:
    """A batch drained by one worker: ``seconds`` from its first claim to its last completion
    on the database's clock (``wall_s`` on ours), the worker sampled once a tenth of the runs
    were done (``warm``: by then the worker is warm) and at the end, ``warm_runs`` done in
    between."""

    seconds: float
    wall_s: float
    warm: Any
    end: Any
    warm_runs: int

    def per_s(self, runs: int) -> float:
        return runs / self.seconds if self.seconds > 0 else float("nan")


def drain(
    label: str,
    url: str,
    project_ids: list[str],
    n: int,
    start_worker: Callable[[], Any],
    sample: Callable[[Any], Any],
    during: contextlib.AbstractContextManager[Any] | None = None,
) -> Drained:
    """The ``n`` runs of ``project_ids``, admitted with no worker running, drained by ONE
    worker that ``start_worker()`` starts (and this stops); ``sample(worker)`` when a tenth
    are done and when all are; ``during`` entered around the drain (the noise measured)."""
    progress = Progress.runs(url, project_ids)
    worker: Any = None
    marks: list[tuple[Any, int]] = []  # (sample, runs done)

    def mark(done: int) -> None:
        while len(marks) < 2 and done >= (max(1, n // 10), n)[len(marks)]:
            marks.append((sample(worker), done))

    try:
        if (total := progress.counts()[2]) != n:
            raise BenchError(f"{label}: {total} runs admitted, expected {n}")
        worker = start_worker()
        started = time.perf_counter()
        with during or contextlib.nullcontext():
            progress.wait(n, [worker], max(90.0, n / 10), mark, poll=0.2)
        wall_s = time.perf_counter() - started
        (warm, done0), (end, done1) = marks
        return Drained(progress.span(), wall_s, warm, end, done1 - done0)
    finally:
        progress.close()
        if worker is not None:
            worker.stop(DRAINED_STOP_S)


# --- commit counting -------------------------------------------------------------------------


class _Cursor(psycopg2.extensions.cursor):
    def execute(self, query: Any, vars: Any = None) -> None:  # noqa: A002 - psycopg2's name
        super().execute(query, vars)
        conn = self.connection
        if conn.autocommit and isinstance(conn, _Connection):
            conn.commits += 1  # a statement in autocommit is a transaction of its own


class _Connection(psycopg2.extensions.connection):
    """Counts the commits this session makes: its start-up transaction, each autocommit
    statement, each ``commit()`` of an open transaction (read-only ones count too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commits = 1  # the backend's start-up transaction
        self.cursor_factory = _Cursor

    def commit(self) -> None:
        if self.status == psycopg2.extensions.STATUS_BEGIN:
            self.commits += 1
        super().commit()


class Tally:
    """The harness's commits on the scratch database, over all its connections."""

    def __init__(self) -> None:
        self._closed = 0
        self._open: list[_Connection] = []
        self.sessions = 0  # connections it opened

    @property
    def commits(self) -> int:
        return self._closed + sum(c.commits for c in self._open)

    @contextlib.contextmanager
    def connect(self, url: str, autocommit: bool = False) -> Iterator[Any]:
        with connect(url, autocommit, connection_factory=_Connection) as conn:
            assert isinstance(conn, _Connection)
            self.sessions += 1
            self._open.append(conn)
            try:
                yield conn
            finally:
                self._open.remove(conn)
                self._closed += conn.commits


def xact_commit(url: str, database: str | None = None) -> tuple[int, int]:
    """``xact_commit`` and ``sessions`` of ``database`` (default ``url``'s), read in a
    transaction that is rolled back (the read commits nothing)."""
    with connect(url, autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute(
            "SELECT xact_commit, sessions FROM pg_stat_database"
            " WHERE datname = coalesce(%s, current_database())",
            (database,),
        )
        row = cur.fetchone()
        conn.rollback()
    if row is None:
        raise LookupError(f"no database {database!r} in pg_stat_database")
    return int(row[0]), int(row[1])


@dataclass(frozen=True)
class Counts:
    """A server-wide reading: this database's commits, the others', the next transaction id
    (one per write transaction, whatever the database)."""

    commits: int
    other_commits: int
    next_xid: int

    def __sub__(self, before: Counts) -> Counts:
        return Counts(
            self.commits - before.commits,
            self.other_commits - before.other_commits,
            self.next_xid - before.next_xid,
        )


def server_counts(conn: Any) -> Counts:
    """One autocommit statement, whose end clears the statistics snapshot (fresh counts each
    time; adds one commit)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT sum(xact_commit) FILTER (WHERE datname = current_database()),"
            " coalesce(sum(xact_commit) FILTER (WHERE datname <> current_database()), 0),"
            " pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
            " FROM pg_stat_database"
        )
        return Counts(*(int(v) for v in cur.fetchone()))


# What a visit of the autovacuum launcher leaves in a database with nothing to vacuum.
AUTOVACUUM_VISIT_COMMITS = 2
AUTOVACUUM_VISIT_CATALOG_SCANS = 3


def metric_sum(metrics_dir: Path, name: str, **labels: str) -> float:
    """A counter summed over every process that wrote to ``metrics_dir`` (exited ones too)."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics_dir))
    return sum(
        s.value
        for metric in registry.collect()
        for s in metric.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


class Meter:
    """Reads the counters of one scratch database: ``xact_commit`` through the configured
    (maintenance) database, the liveness writes and catalog scans through the tally, the auth
    loads from the processes' metrics directory."""

    def __init__(self, maintenance_url: str, url: str, database: str, metrics_dir: Path) -> None:
        self.maintenance_url, self.url, self.database = maintenance_url, url, database
        self.metrics_dir = metrics_dir
        self.tally = Tally()

    def _scratch_counters(self) -> tuple[int, int]:
        # Read by oid, not through the pg_stat_*_tables views, whose query scans pg_class.
        with self.tally.connect(self.url) as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_stat_clear_snapshot()")
            cur.execute(
                "SELECT coalesce(pg_stat_get_tuples_inserted(w)"
                " + pg_stat_get_tuples_updated(w), 0),"
                " pg_stat_get_numscans('pg_catalog.pg_class'::regclass)"
                " FROM (SELECT to_regclass('awooop_worker') AS w) AS t"
            )
            liveness, scans = cur.fetchone()
            conn.rollback()
        return int(liveness), int(scans)

    def read(self) -> Reading:
        """Call it once the sessions to count have closed. Each of its own reads on the
        scratch database is a session that flushes its statistics as it exits: it waits a
        second before reading ``xact_commit``, and counts the harness's commits as they were
        then. A liveness upsert (or autovacuum visit) between the reads would count on one
        side only: then it reads again."""
        counters = self._scratch_counters()
        while True:
            time.sleep(1.0)
            harness, harness_sessions = self.tally.commits, self.tally.sessions
            commits, n_sessions = xact_commit(self.maintenance_url, self.database)
            again = self._scratch_counters()
            if again == counters:
                break
            counters = again
        return Reading(
            xact_commit=commits,
            sessions=n_sessions,
            liveness=counters[0],
            catalog_scans=counters[1],
            auth_loads=int(metric_sum(self.metrics_dir, AUTH_LOADS)),
            harness=harness,
            harness_sessions=harness_sessions,
        )

    def idle_window(self, seconds: float = 2.0) -> Count:
        """A window with nothing of the bench running: the subtraction must leave 0."""
        gc.collect()  # engines the setup dropped close their pooled connections now
        wait_gone(self.maintenance_url, "datname = %s", self.database, "sessions")
        before = self.read()
        time.sleep(seconds)
        idle = Count.between(before, self.read())
        log(
            f"commit counting, idle window of {seconds:.0f} s: {idle.runs} commits left "
            f"({idle.total} in all; {idle.background_text()})"
        )
        return idle


class SessionWatch(threading.Thread):
    """Notes, twice a second, every session on the meter's scratch database, from one
    transaction that is rolled back: those that are neither the bench's nor its children's
    (``foreign``), and when each of its children's started and under which application name
    (``children``), so that a session opened inside a counted window can be named."""

    def __init__(self, meter: Meter) -> None:
        super().__init__(name="bench-session-watch", daemon=True)
        self.meter, self.error, self.halt = meter, None, threading.Event()
        self.foreign: dict[tuple[int, str], str] = {}  # (pid, backend_start) -> app name
        self.children: dict[tuple[int, str], tuple[float, str]] = {}  # -> (start, app name)
        self.mine: set[tuple[int, str]] = set()  # every session of the bench or a child

    def run(self) -> None:
        sql = (
            "SELECT pid, backend_start::text, extract(epoch FROM backend_start),"
            " application_name, client_port FROM pg_stat_activity"
            " WHERE datname = %s AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        try:
            url = self.meter.maintenance_url
            with connect(url, autocommit=False) as conn, conn.cursor() as cur:
                while not self.halt.wait(0.5):
                    cur.execute("SELECT pg_stat_clear_snapshot()")
                    cur.execute(sql, (self.meter.database,))
                    for pid, started, epoch, app, client_port in cur.fetchall():
                        self.note((pid, started), float(epoch), app, client_port, conn.info.port)
                conn.rollback()
        except psycopg2.Error as exc:
            self.error = str(exc)

    def note(
        self, key: tuple[int, str], epoch: float, app: str, client_port: int, port: int
    ) -> None:
        from bench import procs

        if key not in self.mine and key not in self.foreign:
            inode = procs.tcp_inode(client_port, port) if client_port else None
            owner = procs.socket_owner([os.getpid(), *procs.running_pids()], inode)
            if owner is None:
                self.foreign[key] = app or "?"
                return
            self.mine.add(key)
            if owner != os.getpid():
                self.children[key] = (epoch, app or "?")

    def children_started(self, since: float, until: float) -> list[str]:
        """The child sessions seen that started between two ``time.time()`` readings, as
        "application name at HH:MM:SS" (a session that lived less than half a second may not
        have been seen)."""
        return [
            f"{app} at {time.strftime('%H:%M:%S', time.localtime(epoch))}"
            for epoch, app in sorted(self.children.values())
            if since <= epoch <= until
        ]

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=5)


@dataclass(frozen=True)
class Reading:
    """The counters at one moment."""

    xact_commit: int
    liveness: int
    auth_loads: int
    harness: int
    sessions: int = 0  # sessions ever started on the database (the harness's included)
    harness_sessions: int = 0
    catalog_scans: int = 0  # sequential scans of pg_class in the database


@dataclass(frozen=True)
class Count:
    """What committed in a window, and what of it was not the benchmark's run work."""

    total: int
    liveness: int
    auth_loads: int
    harness: int
    # Sessions the bench's processes started in the window (set-up commits, not counted
    # apart: a window that counts runs exactly has none).
    sessions: int = 0
    catalog_scans: int = 0

    @classmethod
    def between(cls, before: Reading, after: Reading) -> Count:
        return cls(
            total=after.xact_commit - before.xact_commit,
            sessions=(after.sessions - before.sessions)
            - (after.harness_sessions - before.harness_sessions),
            liveness=after.liveness - before.liveness,
            auth_loads=after.auth_loads - before.auth_loads,
            harness=after.harness - before.harness,
            catalog_scans=after.catalog_scans - before.catalog_scans,
        )

    @property
    def autovacuum_visits(self) -> int:
        """Visits told by their scans of ``pg_class``; none when the scans are not a whole
        number of visits (then they are not explained)."""
        visits, rest = divmod(self.catalog_scans, AUTOVACUUM_VISIT_CATALOG_SCANS)
        return visits if rest == 0 else 0

    @property
    def unexplained_catalog_scans(self) -> int:
        return self.catalog_scans if self.catalog_scans % AUTOVACUUM_VISIT_CATALOG_SCANS else 0

    @property
    def autovacuum(self) -> int:
        return AUTOVACUUM_VISIT_COMMITS * self.autovacuum_visits

    @property
    def background(self) -> int:
        return self.liveness + self.auth_loads + self.harness + self.autovacuum

    @property
    def runs(self) -> int:
        """The commits of the benchmark's own work: the total less the background."""
        return self.total - self.background

    def per_run(self, runs: int) -> float:
        return self.runs / runs if runs > 0 else float("nan")

    def background_text(self) -> str:
        text = (
            f"{self.background} background commits subtracted: {self.liveness} worker "
            f"liveness upserts, {self.auth_loads} project-auth loads, {self.harness} the "
            f"harness's own, {self.autovacuum} from {self.autovacuum_visits} autovacuum visits"
        )
        if self.unexplained_catalog_scans:
            text += (
                f"; {self.unexplained_catalog_scans} sequential scans of pg_class are not a "
                "whole number of autovacuum visits: nothing subtracted for them"
            )
        return text


# --- admission and claim at the store --------------------------------------------------------


class Store:
    """Admission (a web thread's statement) and claim (a worker's), one connection each."""

    def __init__(self, url: str, settings: Any) -> None:
        from awooop import db
        from awooop.workflows import registry

        self.web = db.make_engine(url, pool_size=1, role=db.WEB, settings=settings)
        self.worker = db.make_engine(url, pool_size=1, role=db.WORKER, settings=settings)
        self.workflow = registry.latest("noop-3")
        self.tag = secrets.token_hex(4)
        self.count = 0
        self.claimed: list[Any] = []

    def new_run(self, project_id: str, key: str) -> Any:
        from awooop.store import admission

        assert self.workflow is not None
        event = {"summary": "disk almost full on db-1"}
        payload = {"channel": "api", "provider_event_id": key, "event": event, "meta": {}}
        return admission.NewRun.of(self.workflow, project_id, {**payload, "project": {}}, key)

    def admit(self, project_id: str, key: str) -> Any:
        """Admit one event as the API channel does; its run's id."""
        from awooop.store import admission

        with self.web.connect() as conn:
            admitted = admission.admit(conn, self.new_run(project_id, key))
        if not admitted.created:
            raise BenchError(f"event {key} was not admitted")
        return admitted.run_id

    def admit_and_claim(self, project_id: str) -> tuple[float, float, float]:
        """One admission then the claim of its run: (when, admission s, claim s)."""
        from awooop.store import admission, leases

        self.count += 1
        new = self.new_run(project_id, f"lat-{self.tag}-{self.count}")
        t0 = time.perf_counter()
        with self.web.connect() as conn:
            admitted = admission.admit(conn, new)
        t1 = time.perf_counter()
        with self.worker.connect() as conn:
            claim = leases.claim(conn, "bench:1:retention", 300.0, admitted.run_id)
        t2 = time.perf_counter()
        if not admitted.created or claim is None:
            raise BenchError(f"admission {admitted} / claim {claim} did not happen")
        self.claimed.append(admitted.run_id)
        if len(self.claimed) >= 200:
            self.finish_claimed()
        return t0, t1 - t0, t2 - t1

    def finish_claimed(self) -> None:
        """The claimed runs COMPLETED (untimed), so the unfinished set stays as it was."""
        if not self.claimed:
            return
        with self.worker.connect() as conn:
            conn.execute(
                text(
                    "UPDATE awooop_run_state SET status = 'COMPLETED', saga_status = 'COMPLETED',"
                    " lease_until = NULL, finished_at = now(), updated_at = now()"
                    " WHERE run_id = ANY(:ids)"
                ),
                {"ids": self.claimed},
            )
        self.claimed = []

    def close(self) -> None:
        self.finish_claimed()
        self.web.dispose()
        self.worker.dispose()
