"""The benchmark's own PostgreSQL commits, counted exactly (the target: ≤ 5 per 3-step run).

``make bench`` runs in a scratch database of its own (:mod:`bench.scratch`) with autovacuum off
on its tables, so ``xact_commit`` of that database counts only what the bench's processes
commit. Of that, what is not run work is counted where it happens and subtracted:

- **harness**: the bench's own connections to the scratch database (:class:`Tally`): one
  commit per connection (the backend's start-up transaction), one per statement run in
  autocommit, one per committed transaction; a transaction rolled back counts none;
- **liveness**: the worker's liveness upserts on ``awooop_worker`` (one statement, one
  row inserted or updated, one transaction each): Δ(``n_tup_ins`` + ``n_tup_upd``) of that
  table in ``pg_stat_user_tables`` of the scratch database;
- **auth loads**: the web's project-auth cache reads (one statement, one transaction each):
  Δ``awooop_project_auth_loads_total`` summed over the processes' multiprocess metrics
  directory;
- **autovacuum visits**: PostgreSQL's autovacuum launcher sends a worker into every database
  once per ``autovacuum_naptime`` (1 min), whatever the tables' settings. With nothing to
  vacuum, a visit commits 2 transactions and scans ``pg_class`` sequentially 3 times (twice
  to list the tables, once to update ``datfrozenxid``; measured on PostgreSQL 15 and 16). The
  bench's processes never scan ``pg_class`` sequentially (their catalog lookups go through
  the caches and the indexes, and the harness reads its counters by oid), so Δ``seq_scan`` of
  ``pg_class`` in the scratch database counts the visits: 2 commits per 3 scans. A count of
  scans that is not a multiple of 3 is not explained, and nothing is subtracted for it.

``xact_commit`` is read from a connection to the configured database (``pg_stat_database``
is cluster-wide), so those reads add nothing to the scratch database; every figure is read
after the processes of the window exited (a backend flushes its statistics when it ends).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extensions
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from bench import scratch

AUTH_LOADS = "awooop_project_auth_loads_total"


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
        conn = psycopg2.connect(
            scratch.libpq_url(url),
            application_name="awooop-bench",
            connect_timeout=5,
            connection_factory=_Connection,
        )
        assert isinstance(conn, _Connection)
        self.sessions += 1
        conn.autocommit = autocommit
        self._open.append(conn)
        try:
            yield conn
        finally:
            conn.close()
            self._open.remove(conn)
            self._closed += conn.commits


def database_counters(maintenance_url: str, database: str) -> tuple[int, int]:
    """``xact_commit`` and ``sessions`` of ``database``, read in a transaction of the
    configured database that is rolled back."""
    conn = psycopg2.connect(
        scratch.libpq_url(maintenance_url), application_name="awooop-bench", connect_timeout=5
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_stat_clear_snapshot()")
            cur.execute(
                "SELECT xact_commit, sessions FROM pg_stat_database WHERE datname = %s",
                (database,),
            )
            row = cur.fetchone()
        conn.rollback()
    finally:
        conn.close()
    if row is None:
        raise LookupError(f"no database {database!r} in pg_stat_database")
    return int(row[0]), int(row[1])


# What a visit of the autovacuum launcher leaves in a database with nothing to vacuum.
AUTOVACUUM_VISIT_COMMITS = 2
AUTOVACUUM_VISIT_CATALOG_SCANS = 3


def scratch_counters(tally: Tally, url: str) -> tuple[int, int]:
    """Rows inserted or updated in ``awooop_worker``, and sequential scans of ``pg_class``
    (table statistics exist per database: read on the scratch database itself, through the
    tally, rolled back). Read by oid, not through the ``pg_stat_*_tables`` views, whose
    query would scan ``pg_class`` itself."""
    with tally.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute(
            "SELECT coalesce(pg_stat_get_tuples_inserted(w) + pg_stat_get_tuples_updated(w), 0),"
            " pg_stat_get_numscans('pg_catalog.pg_class'::regclass)"
            " FROM (SELECT to_regclass('awooop_worker') AS w) AS t"
        )
        liveness, scans = cur.fetchone()
        conn.rollback()
    return int(liveness), int(scans)


def auth_loads(metrics_dir: Path) -> int:
    """``awooop_project_auth_loads_total`` over every process that wrote to ``metrics_dir``
    (counters of exited processes included)."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics_dir))
    return int(registry.get_sample_value(AUTH_LOADS) or 0)


class Meter:
    """Reads the counters of one scratch database: ``xact_commit`` through the configured
    (maintenance) database, the liveness writes through the tally, the auth loads from the
    processes' metrics directory."""

    def __init__(self, maintenance_url: str, url: str, database: str, metrics_dir: Path) -> None:
        self.maintenance_url, self.url, self.database = maintenance_url, url, database
        self.metrics_dir = metrics_dir
        self.tally = Tally()

    def read(self) -> Reading:
        """Call it once the sessions to count have closed. Each of its own reads on the
        scratch database is a session that flushes its statistics as it exits: it waits a
        second after one before reading ``xact_commit``, and counts the harness's commits as
        they were at that moment (the last read's land in the next reading, on both sides).
        A liveness upsert (or an autovacuum visit) between the counters and the scratch
        database's own would count on one side only: then it reads again."""
        counters = scratch_counters(self.tally, self.url)
        while True:
            time.sleep(1.0)
            harness, harness_sessions = self.tally.commits, self.tally.sessions
            commits, sessions = database_counters(self.maintenance_url, self.database)
            again = scratch_counters(self.tally, self.url)
            if again == counters:
                break
            counters = again
        liveness, catalog_scans = counters
        return Reading(
            xact_commit=commits,
            sessions=sessions,
            liveness=liveness,
            catalog_scans=catalog_scans,
            auth_loads=auth_loads(self.metrics_dir),
            harness=harness,
            harness_sessions=harness_sessions,
        )


# --- the arithmetic --------------------------------------------------------------------------


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
    # Sessions the bench's processes started in the window (the harness's own left out). Each
    # commits its start-up, SQLAlchemy's first-connect queries and a PREPARE per hot
    # statement: set-up, not run work, and not counted apart, so a window that counts runs
    # exactly has none (the bench counts runs over warm processes).
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
        """Visits of the autovacuum launcher told by their scans of ``pg_class``; none when
        the scans are not a whole number of visits (then they are not explained)."""
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
