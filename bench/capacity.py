"""``make bench-capacity`` (``python -m bench.capacity``): what one unit of work costs, so a team
can size a deployment (``docs/scaling.md``).

On the configured PostgreSQL (``AWOOOP_DATABASE_URL``) and Redis broker
(``AWOOOP_BROKER_URL``), each phase starts processes of its own with ``bench.run``'s helpers
(as ``make bench`` does) and stops them before the next:

1. **Admission, per request**: ``POST /v1/projects/{p}/runs`` (the API channel, routed to
   ``noop-3``, new events) from 16 keep-alive connections, no worker running: a warm-up batch,
   then BENCH_CAPACITY_RUNS measured requests. req/s; CPU of the gunicorn tree, PostgreSQL and
   Redis per request; PostgreSQL commits per request (over every request the web answered).
   The queued messages are purged; then the same web admits phase 2's first batch.
2. **Execution, per run**: BENCH_CAPACITY_RUNS ``noop-3`` runs admitted with no worker, then
   ONE worker (prefork, ``-c 1``) drains them; then the same with ``-c 2`` (its runs admitted by
   a web of its own, stopped before the worker starts). Per run: worker and PostgreSQL (and
   broker) CPU once the worker is warm, commits of the execution alone; runs/s.
3. **Lease keeping**: N (BENCH_CAPACITY_HOLD_RUNS) concurrent runs of ``bench-hold``
   (:mod:`bench.workflows`) held by one worker with ``-c N``, the heartbeat shortened to 1 s.
   Once all N are RUNNING, over a window of BENCH_CAPACITY_WINDOW seconds: commits/s,
   PostgreSQL and worker CPU ms/s, lease renewals (the worker's own counter) per run per
   heartbeat, and the projection to the default heartbeat (N / 30 renewals/s plus one liveness
   write per worker process per liveness interval). The runs then finish by themselves.
4. **Broker**: phases 1 and 2 (``-c 1``) again with RabbitMQ (BENCH_CAPACITY_AMQP_URL), the rate
   limiter on the Redis above; skipped, with a line saying so, when RabbitMQ does not answer.
5. **PostgreSQL's commit ceiling**: ``pgbench`` (the server's, or the ``pgserver`` wheel's) with
   16 clients, each transaction one single-row ``INSERT`` into a scratch table of this
   database, for BENCH_CAPACITY_CEILING_SECONDS: durable commits/s with the server's own
   ``fsync`` / ``synchronous_commit`` — what runs/s can never exceed at the commits a run
   costs. Skipped, with a line saying so, without ``pgbench``.

How it measures:

- CPU: ``utime + stime + cutime + cstime`` from ``/proc/<pid>/stat``, the delta over the
  measured part. PostgreSQL is the server's process tree — its postmaster (the parent of the
  bench's own backend) and every child (backends, walwriter, checkpointer, autovacuum); the
  postmaster's ``cutime``/``cstime`` carry the backends that exited. So sessions on other
  databases of the same server count too (the sessions seen at the start are printed), while
  another PostgreSQL server on the machine does not. Redis: the process its ``INFO`` names.
  RabbitMQ: the ``beam.smp`` processes running ``rabbit``, with their children. "other CPU" is
  the share of all CPUs that nothing measured here (nor this process) used.
- Commits: ``xact_commit`` of the database (``pg_stat_database``), read with every process of
  the phase stopped, so their statistics are flushed (as ``bench.commits`` does), and
  the other databases' commits alongside (a line says when they were busy meanwhile). Phase 3
  reads them while the worker runs (an active backend flushes its statistics about once a
  second; the window opens once the claims' statistics are in), and the server's next
  transaction id, which counts write transactions exactly.
- Every bench project has an ingress rate limit far above the load, so each admission request
  also counts in Redis, as in a deployment that sets limits.
- The run tables are vacuumed before each phase, so that autovacuum's work on the rows of the
  phases before lands outside its figures.

Knobs (environment): BENCH_CAPACITY_RUNS (2000), BENCH_CAPACITY_HOLD_RUNS ("8,32"),
BENCH_CAPACITY_WINDOW (s, 20), BENCH_CAPACITY_AMQP_URL (``amqp://guest:guest@127.0.0.1:5672//``),
BENCH_CAPACITY_TIMEOUT (s, whole run, 900), BENCH_CAPACITY_OUTPUT (``docs/scaling.md``);
BENCH_CAPACITY_QUICK=1 or ``--quick`` (a smoke test, about 40 s): 100 runs, N = 4, a 4 s window
opened 1.5 s after the last run started, two gunicorn workers, no ``-c 2`` phase, and no
markdown written.
The figures are printed and written to ``.awooop/capacity.json``, and (not in quick mode) as a
markdown block between ``<!-- capacity:begin -->`` and ``<!-- capacity:end -->`` in the output
file; everything outside the markers is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import redis

from bench import load
from bench.run import (
    STALL_S,
    BenchError,
    Proc,
    Progress,
    Timeout,
    _cpu_busy,
    _cpu_seconds,
    _env_float,
    _env_int,
    _pg,
    _requests,
    _tree,
    create_projects,
    delete_projects,
    failed,
    log,
    machine_info,
    other_clients,
    purge_queue,
    spread_over,
    start_web,
    start_worker,
    stop_all,
    wait_http,
)
from bench.workflows import HOLD

ROOT = Path(__file__).resolve().parent.parent
APP = "awooop.web.app:create_app()"
BEGIN = "<!-- capacity:begin -->"
END = "<!-- capacity:end -->"
NEW_DOCUMENT = (
    "# Scaling\n\n"
    "What a deployment needs for a given load; the figures between the markers below are "
    "written by `make bench-capacity`.\n"
)
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"

CONNECTIONS = 16
# Far above any load here: the limiter asks Redis on every request, and never refuses.
INGRESS_LIMIT_PER_MINUTE = 10_000_000
# Progress polls (in one rolled-back transaction, so they commit nothing) this often.
POLL_S = 0.2
# After the processes (or connections) of a phase are gone, their backends have exited, and
# so flushed their statistics, within this long.
FLUSH_S = 0.3
# Phase 3's timings: a short heartbeat, so a window sees many renewals. The TTL (at least
# three heartbeats, awooop.config) leaves room for a busy machine: a keeper that cannot renew
# for ttl - heartbeat seconds gives the run up. No reaper runs here; its interval only has to
# be valid (shorter than the TTL).
HEARTBEAT_S = 1.0
HOLD_TIMINGS = {
    "AWOOOP_HEARTBEAT_INTERVAL_SECONDS": f"{HEARTBEAT_S:g}",
    "AWOOOP_LEASE_TTL_SECONDS": f"{10 * HEARTBEAT_S:g}",
    "AWOOOP_REAPER_INTERVAL_SECONDS": f"{5 * HEARTBEAT_S:g}",
}
# A backend that committed less than a second after its last statistics flush and then sits
# idle flushes them only this long after (PostgreSQL's PGSTAT_IDLE_INTERVAL, 10 s).
IDLE_FLUSH_S = 10.0
# A worker whose runs are all COMPLETED has this long to stop before it is killed (a warm
# shutdown on RabbitMQ takes about 5 s; nothing measured waits for it).
DRAINED_STOP_S = 3.0


def _int_list(name: str, default: str) -> tuple[int, ...]:
    raw = os.environ.get(name, default)
    try:
        values = tuple(int(v) for v in raw.split(",") if v.strip())
    except ValueError as exc:
        raise BenchError(f"{name} must be comma-separated whole numbers, not {raw!r}") from exc
    if not values or min(values) < 1:
        raise BenchError(f"{name} must name at least one positive number, not {raw!r}")
    return values


@dataclass(frozen=True)
class Knobs:
    quick: bool
    runs: int
    hold_runs: tuple[int, ...]
    window: float
    amqp_url: str
    timeout: float
    output: Path
    ceiling_seconds: float = 15.0
    json_path: Path = ROOT / ".awooop" / "capacity.json"

    @classmethod
    def from_env(cls, quick: bool) -> Knobs:
        quick = quick or os.environ.get("BENCH_CAPACITY_QUICK") == "1"
        knobs = cls(
            quick=quick,
            runs=_env_int("BENCH_CAPACITY_RUNS", 100 if quick else 2000),
            hold_runs=_int_list("BENCH_CAPACITY_HOLD_RUNS", "4" if quick else "8,32"),
            window=_env_float("BENCH_CAPACITY_WINDOW", 4 if quick else 20),
            amqp_url=os.environ.get("BENCH_CAPACITY_AMQP_URL", DEFAULT_AMQP_URL),
            timeout=_env_float("BENCH_CAPACITY_TIMEOUT", 120 if quick else 900),
            output=ROOT / os.environ.get("BENCH_CAPACITY_OUTPUT", "docs/scaling.md"),
            ceiling_seconds=_env_float("BENCH_CAPACITY_CEILING_SECONDS", 3 if quick else 15),
        )
        if knobs.runs < 20:
            raise BenchError("BENCH_CAPACITY_RUNS must be at least 20")
        if knobs.window <= 2 * HEARTBEAT_S:
            raise BenchError(f"BENCH_CAPACITY_WINDOW must exceed {2 * HEARTBEAT_S:g} s")
        return knobs

    @property
    def warmup_requests(self) -> int:
        return max(20, min(200, self.runs // 5))

    @property
    def concurrencies(self) -> tuple[int, ...]:
        """Worker processes of the Redis execution phases (quick mode: only one; ``-c 2``
        is the same code with another number)."""
        return (1,) if self.quick else (1, 2)

    @property
    def settle_s(self) -> float:
        """Phase 3: from the last run RUNNING to the window. Past IDLE_FLUSH_S, the statistics
        of the claims (and of the worker's start) are in before the window opens, so its
        commits are the renewals' and the liveness writes' alone; quick mode waits only for
        every keeper to have renewed once (its commits/s then include some of the start)."""
        return HEARTBEAT_S + 0.5 if self.quick else IDLE_FLUSH_S + 1.0

    @property
    def web_workers(self) -> dict[str, str]:
        """The measured admission's gunicorn workers: the configured number (quick mode: 2,
        which start sooner)."""
        return {"AWOOOP_WEB_WORKERS": "2"} if self.quick else {}

    @property
    def start_spread_s(self) -> float:
        """Phase 3: how far apart the first and the last run may start (the hold covers it)."""
        return 1.5 if self.quick else 10.0


# --- CPU ---------------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _tree_cpu(pid: int) -> float:
    return sum(_cpu_seconds(p) for p in _tree(pid))


def postgres_server_pid(url: str) -> int | None:
    """The postmaster of the server at ``url`` (the parent of our own backend), when that
    server runs on this machine in this process namespace; None otherwise."""
    with _pg(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend = int(cur.fetchone()[0])
        fields = _stat_fields(backend)
    if fields is None or _comm(backend) != "postgres":
        return None
    parent = int(fields[1])
    return parent if _comm(parent) == "postgres" else None


def redis_server_pid(url: str) -> int | None:
    """The process of the Redis at ``url`` (its ``INFO``), when it runs on this machine."""
    try:
        pid = int(redis.Redis.from_url(url, socket_timeout=5).info("server")["process_id"])
    except (redis.RedisError, KeyError, ValueError):
        return None
    return pid if _comm(pid) == "redis-server" else None


def rabbitmq_pids() -> list[int]:
    """The Erlang VMs running RabbitMQ on this machine (their children come with them)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _comm(int(entry.name)) == "beam.smp":
            with contextlib.suppress(OSError), open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if b"rabbit" in f.read():
                    found.append(int(entry.name))
    return found


CpuSource = Callable[[], float]


@dataclass
class Snapshot:
    cpu: dict[str, float]  # CPU seconds so far, by what was measured
    busy: float  # all CPUs of the machine: busy and total seconds (/proc/stat)
    total: float
    at: float = field(default_factory=time.monotonic)


def snapshot(sources: dict[str, CpuSource]) -> Snapshot:
    busy, total = _cpu_busy()
    return Snapshot({name: read() for name, read in sources.items()}, busy, total)


@dataclass(frozen=True)
class Interval:
    """What happened between two snapshots."""

    cpu: dict[str, float]  # CPU seconds, by what was measured
    seconds: float
    other_cpu_pct: float  # share of all CPUs used by nothing measured

    @classmethod
    def between(cls, a: Snapshot, b: Snapshot) -> Interval:
        cpu = {name: b.cpu[name] - a.cpu[name] for name in a.cpu}
        others = (b.busy - a.busy) - sum(cpu.values())
        return cls(cpu, b.at - a.at, max(0.0, others / max(b.total - a.total, 1e-9) * 100))

    def ms_per(self, name: str, count: float) -> float | None:
        if name not in self.cpu or count <= 0:
            return None
        return self.cpu[name] * 1000 / count


# --- brokers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Broker:
    """The broker a phase's processes use: the environment they get, and how to empty the
    ``runs`` queue on it."""

    name: str  # "Redis" or "RabbitMQ"
    env: dict[str, str]
    purge: Callable[[], int]
    version: str
    # Clients already consuming the broker's queues (they would take the bench's messages).
    consumers: Callable[[], int]


def redis_broker(url: str) -> Broker:
    client = redis.Redis.from_url(url, socket_timeout=10)
    version = str(client.info("server").get("redis_version", "?"))
    db = str(client.connection_pool.connection_kwargs.get("db", 0))

    def consumers() -> int:
        """Clients blocked reading lists on this database (Celery workers)."""
        return sum(
            1
            for c in client.client_list()
            if c.get("cmd") in ("brpop", "blpop", "bzpopmin") and c.get("db") == db
        )

    return Broker("Redis", {}, lambda: purge_queue(client, "runs"), version, consumers)


def rabbitmq_broker(amqp_url: str, rate_limit_url: str) -> Broker | None:
    """RabbitMQ at ``amqp_url`` (the rate limiter on ``rate_limit_url``); None when it does
    not answer (logged)."""
    import kombu
    from kombu.utils.url import sanitize_url

    try:
        with kombu.Connection(amqp_url, connect_timeout=5) as conn:
            conn.ensure_connection(max_retries=1)
            properties = getattr(conn.connection, "server_properties", {}) or {}
            version = properties.get("version", "?")
            if isinstance(version, bytes):
                version = version.decode()
    except Exception as exc:  # any failure to connect means "skip"
        log(f"RabbitMQ phases skipped: no answer at {sanitize_url(amqp_url)} ({exc})")
        return None

    def purge() -> int:
        with kombu.Connection(amqp_url, connect_timeout=5) as conn:
            channel = conn.channel()
            try:
                return int(channel.queue_purge("runs") or 0)
            except conn.channel_errors:  # no such queue yet
                return 0

    def consumers() -> int:
        """Consumers of the ``runs`` queue."""
        with kombu.Connection(amqp_url, connect_timeout=5) as conn:
            channel = conn.channel()
            try:
                return int(channel.queue_declare("runs", passive=True).consumer_count)
            except conn.channel_errors:  # no such queue yet
                return 0

    env = {"AWOOOP_BROKER_URL": amqp_url, "AWOOOP_RATE_LIMIT_REDIS_URL": rate_limit_url}
    return Broker("RabbitMQ", env, purge, str(version), consumers)


# --- the bench ---------------------------------------------------------------------------------


@dataclass
class Bench:
    """What every phase uses: settings, where logs go, the processes started, the projects."""

    knobs: Knobs
    settings: Any
    logdir: Path
    tokens: dict[str, str]
    postgres_pid: int | None
    redis_pids: list[int]
    procs: list[Proc] = field(default_factory=list)

    @property
    def url(self) -> str:
        return str(self.settings.database_url)

    def cpu_sources(self, broker: Broker, **procs: Proc) -> dict[str, CpuSource]:
        """What a phase measures the CPU of: its processes, PostgreSQL, Redis, RabbitMQ (when
        it is the broker) and this process (the load generator, the polling)."""
        sources: dict[str, CpuSource] = {name: proc.cpu_seconds for name, proc in procs.items()}
        me = os.getpid()
        sources["bench"] = lambda: _cpu_seconds(me)
        if self.postgres_pid is not None:
            sources["postgres"] = lambda: _tree_cpu(self.postgres_pid or 0)
        if self.redis_pids:
            sources["redis"] = lambda: sum(_cpu_seconds(p) for p in self.redis_pids)
        rabbits = rabbitmq_pids() if broker.name == "RabbitMQ" else []
        if rabbits:
            sources["rabbitmq"] = lambda: sum(_tree_cpu(p) for p in rabbits)
        return sources

    def start(self, proc: Proc) -> Proc:
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc | None, timeout: float = 15.0) -> None:
        if proc is not None and proc in self.procs:
            proc.stop(timeout)
            self.procs.remove(proc)


def hold_env() -> dict[str, str]:
    """Phase 3's processes: the bench workflows registered, the short lease timings."""
    modules = [os.environ.get("AWOOOP_WORKFLOW_MODULES", ""), "bench.workflows"]
    return {"AWOOOP_WORKFLOW_MODULES": ",".join(m for m in modules if m), **HOLD_TIMINGS}


def admit(
    label: str, web: Proc, port: int, source: load.Requests, n: int, spread: bool = True
) -> load.LoadResult:
    """``n`` requests over CONNECTIONS connections; every one must be answered 202.
    ``spread``: the connections spread evenly over the gunicorn workers (``bench.load.Spread``)
    — for measured requests; runs merely queued for a later phase go as accepted."""
    result = load.run(
        f"http://127.0.0.1:{port}/",
        source,
        CONNECTIONS,
        timeout=max(60.0, n / 50),
        spread=spread_over(web, port) if spread else None,
    )
    accepted = result.statuses.get(202, 0)
    if accepted != n:
        raise BenchError(
            f"{label}: {accepted}/{n} requests answered 202 ({dict(result.statuses)}, "
            f"{result.errors} dropped); log {web.log_path}:\n{web.log_tail()}"
        )
    return result


def hold_requests(project_id: str, token: str, hold: float, n: int) -> load.Requests:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    body = json.dumps({"summary": "capacity bench: hold the run", "hold": hold}).encode()
    return load.Requests(
        "POST",
        f"/v1/projects/{project_id}/runs",
        headers,
        body,
        key_header="Idempotency-Key",
        keys=load.unique_keys(),
        limit=n,
    )


def admit_with_fresh_web(
    bench: Bench, label: str, broker: Broker, source: load.Requests, n: int, **env: str
) -> None:
    """Start a web server, admit ``n`` runs, stop it (its statistics flushed). Its CPU is not
    measured, so one gunicorn worker does (it starts sooner than four)."""
    env = {"AWOOOP_WEB_WORKERS": "1", **broker.env, **env}
    web, port = start_web(f"web-{label}", APP, bench.logdir, **env)
    bench.start(web)
    try:
        wait_http(web, port)
        result = admit(label, web, port, source, n, spread=False)
    finally:
        bench.stop(web)
    time.sleep(FLUSH_S)
    log(f"{label}: admitted {n} runs ({result.rps:.0f} req/s), web stopped")


def wait_for_runs(
    progress: Progress,
    worker: Proc,
    expected: int,
    timeout: float,
    on_poll: Callable[[int], None] = lambda done: None,
) -> None:
    """Until ``expected`` runs of the project are COMPLETED; a FAILED or CANCELLED run, no
    progress for STALL_S seconds or ``timeout`` is a BenchError naming the worker's log."""
    deadline = time.monotonic() + timeout
    last_done, last_change = -1, time.monotonic()
    while True:
        done, failed, total = progress.counts()
        on_poll(done)
        if failed:
            raise BenchError(f"{failed} runs failed; worker log {worker.log_path}")
        if done >= expected:
            return
        worker.check()
        now = time.monotonic()
        if done != last_done:
            last_done, last_change = done, now
        if now > deadline or now - last_change > STALL_S:
            why = f"no progress for {STALL_S:.0f} s" if now < deadline else f"after {timeout:.0f} s"
            raise BenchError(
                f"only {done}/{expected} runs COMPLETED ({why}; {total} admitted; another "
                "consumer of the broker's 'runs' queue would take the bench's messages); "
                f"worker log {worker.log_path}:\n{worker.log_tail()}"
            )
        time.sleep(POLL_S)


@dataclass(frozen=True)
class Counts:
    commits: int  # xact_commit of this database
    other_commits: int  # of the server's other databases
    next_xid: int  # the server's next transaction id: one per write transaction


def read_counts(conn: Any) -> Counts:
    """One statement, its own transaction (autocommit), whose end clears the statistics
    snapshot: each read sees fresh counts, and adds one commit."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT sum(xact_commit) FILTER (WHERE datname = current_database()),"
            " coalesce(sum(xact_commit) FILTER (WHERE datname <> current_database()), 0),"
            " pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
            " FROM pg_stat_database"
        )
        commits, other, next_xid = cur.fetchone()
    return Counts(int(commits), int(other), int(next_xid))


def database_counts(url: str) -> Counts:
    """:func:`read_counts` over a fresh connection, whose backend exits (flushing its own
    statistics) when it closes — as ``bench.commits`` reads ``xact_commit``."""
    with _pg(url) as conn:
        return read_counts(conn)


def vacuum(url: str) -> None:
    """The run tables vacuumed and analysed before a phase, so that autovacuum's work on the
    rows of the phases before does not land in this one's figures."""
    with _pg(url) as conn, conn.cursor() as cur:
        cur.execute(
            "VACUUM (ANALYZE) awooop_run_state, awooop_run_event, awooop_channel_event_dedupe"
        )
    time.sleep(FLUSH_S)


# --- 1. admission ------------------------------------------------------------------------------


def measure_admission(
    bench: Bench, broker: Broker, project_id: str, batch_project: str
) -> dict[str, Any]:
    """Phase 1; then the same web admits the first execution batch (into ``batch_project``),
    whose messages stay queued for :func:`measure_execution`."""
    n, warm = bench.knobs.runs, bench.knobs.warmup_requests
    token = bench.tokens[project_id]
    broker.purge()
    vacuum(bench.url)
    counts0 = database_counts(bench.url)
    web, port = start_web(
        f"web-admission-{broker.name.lower()}",
        APP,
        bench.logdir,
        **bench.knobs.web_workers,
        **broker.env,
    )
    bench.start(web)
    try:
        wait_http(web, port)
        prefix = secrets.token_hex(4)
        admit(
            "admission warm-up",
            web,
            port,
            _requests(project_id, token, _keys(prefix, "w"), warm),
            warm,
        )
        sources = bench.cpu_sources(broker, web=web)
        before = snapshot(sources)
        result = admit(
            "admission", web, port, _requests(project_id, token, _keys(prefix, "m"), n), n
        )
        interval = Interval.between(before, snapshot(sources))
        purged = broker.purge()
        batch = _requests(batch_project, bench.tokens[batch_project], _keys(prefix, "b"), n)
        admit("first execution batch", web, port, batch, n, spread=False)
    finally:
        bench.stop(web)
    time.sleep(FLUSH_S)
    counts1 = database_counts(bench.url)
    commits, others = (
        counts1.commits - counts0.commits,
        counts1.other_commits - counts0.other_commits,
    )
    info: dict[str, Any] = {
        "broker": broker.name,
        "connections": CONNECTIONS,
        "requests": n,
        "warmup_requests": warm,
        "req_per_s": result.rps,
        "p50_ms": result.p50,
        "p99_ms": result.p99,
        "web_cpu_ms": interval.ms_per("web", n),
        "postgres_cpu_ms": interval.ms_per("postgres", n),
        "redis_cpu_ms": interval.ms_per("redis", n),
        "rabbitmq_cpu_ms": interval.ms_per("rabbitmq", n),
        "commits": commits,
        # Every request the web answered: warm-up, measured, and the execution batch.
        "commits_per_request": commits / (warm + 2 * n),
        "other_databases_commits": others,
        "other_cpu_pct": interval.other_cpu_pct,
        "purged_messages": purged,
    }
    log(
        f"admission ({broker.name}): {n} requests, {result.rps:.0f} req/s, web "
        f"{_ms(info['web_cpu_ms'])} / PostgreSQL {_ms(info['postgres_cpu_ms'])} / Redis "
        f"{_ms(info['redis_cpu_ms'])}"
        + (f" / RabbitMQ {_ms(info['rabbitmq_cpu_ms'])}" if broker.name == "RabbitMQ" else "")
        + f" CPU ms per request, {info['commits_per_request']:.2f} commits per request; "
        f"purged {purged} messages; other CPU {interval.other_cpu_pct:.0f}%; then admitted "
        f"{n} runs for the execution phase"
    )
    return info


def _keys(prefix: str, part: str) -> Iterator[str]:
    return load.unique_keys(f"{prefix}-{part}")


# --- 2. execution ------------------------------------------------------------------------------


def measure_execution(
    bench: Bench, broker: Broker, project_id: str, concurrency: int, queued: bool = False
) -> dict[str, Any]:
    """Phase 2 with ``concurrency`` worker processes; ``queued``: the project's runs were
    admitted (and their messages queued) by the admission phase's web."""
    n = bench.knobs.runs
    label = f"execution-{broker.name.lower()}-c{concurrency}"
    if not queued:
        broker.purge()
        source = _requests(project_id, bench.tokens[project_id], load.unique_keys(), n)
        admit_with_fresh_web(bench, label, broker, source, n)
    vacuum(bench.url)
    counts0 = database_counts(bench.url)
    progress = Progress(bench.url, project_id)
    worker: Proc | None = None
    # CPU is measured once the worker is warm: from the first tenth of the runs to the last.
    warm_at = max(1, n // 10)
    marks: dict[str, tuple[Snapshot, int]] = {}
    try:
        worker = bench.start(
            start_worker(
                f"worker-{label}",
                "awooop.tasks.app",
                "runs",
                bench.logdir,
                concurrency,
                AWOOOP_TASK_EVENTS="0",
                **broker.env,
            )
        )
        sources = bench.cpu_sources(broker, worker=worker)

        def mark(done: int) -> None:
            if "warm" not in marks and done >= warm_at:
                marks["warm"] = (snapshot(sources), done)
            if "end" not in marks and done >= n:
                marks["end"] = (snapshot(sources), done)

        wait_for_runs(progress, worker, n, timeout=max(90.0, n / 10), on_poll=mark)
        seconds = progress.span()
    finally:
        progress.close()
        bench.stop(worker, DRAINED_STOP_S)
    time.sleep(FLUSH_S)
    counts1 = database_counts(bench.url)
    commits, others = (
        counts1.commits - counts0.commits,
        counts1.other_commits - counts0.other_commits,
    )
    (warm, done0), (end, done1) = marks["warm"], marks["end"]
    measured = done1 - done0
    interval = Interval.between(warm, end)
    info: dict[str, Any] = {
        "broker": broker.name,
        "worker_processes": concurrency,
        "runs": n,
        "runs_per_s": n / seconds if seconds > 0 else float("nan"),
        "seconds": seconds,
        "cpu_measured_runs": measured,
        "worker_cpu_ms": interval.ms_per("worker", measured),
        "postgres_cpu_ms": interval.ms_per("postgres", measured),
        "redis_cpu_ms": interval.ms_per("redis", measured),
        "rabbitmq_cpu_ms": interval.ms_per("rabbitmq", measured),
        "commits": commits,
        "commits_per_run": commits / n,
        "other_databases_commits": others,
        "other_cpu_pct": interval.other_cpu_pct,
    }
    log(
        f"execution ({broker.name}, -c {concurrency}): {n} runs in {seconds:.2f} s = "
        f"{info['runs_per_s']:.0f} runs/s; worker {_ms(info['worker_cpu_ms'])} / PostgreSQL "
        f"{_ms(info['postgres_cpu_ms'])} CPU ms per run (over {measured} warm runs), "
        f"{info['commits_per_run']:.2f} commits per run; other CPU "
        f"{interval.other_cpu_pct:.0f}%"
    )
    return info


# --- 3. lease keeping --------------------------------------------------------------------------

_STATUS_COUNT = (
    "SELECT count(*) FILTER (WHERE status = 'RUNNING') FROM awooop_run_state WHERE project_id = %s"
)


def count_running(progress: Progress) -> int:
    with progress.conn.cursor() as cur:
        cur.execute(_STATUS_COUNT, (progress.project_id,))
        return int(cur.fetchone()[0])


def wait_all_running(progress: Progress, worker: Proc, n: int, spread_s: float) -> None:
    """Until ``n`` runs are RUNNING; the worker's start is allowed a minute, and the last run
    must start within ``spread_s`` of the first (the hold covers that much)."""
    deadline = time.monotonic() + 60.0 + n
    first: float | None = None
    while True:
        running = count_running(progress)
        now = time.monotonic()
        if running >= n:
            return
        if running and first is None:
            first = now
        worker.check()
        if now > deadline or (first is not None and now - first > spread_s):
            raise BenchError(
                f"only {running}/{n} runs RUNNING "
                + (f"{now - first:.1f} s after the first" if first else "after a minute")
                + f"; worker log {worker.log_path}:\n{worker.log_tail()}"
            )
        time.sleep(POLL_S)


class DatabaseCounters:
    """:func:`read_counts` over one connection, so reading adds no connection (no backend
    start) to the window."""

    def __init__(self, url: str) -> None:
        self._cm = _pg(url)
        self._conn = self._cm.__enter__()

    def read(self) -> Counts:
        return read_counts(self._conn)

    def close(self) -> None:
        self._cm.__exit__(None, None, None)


def lease_renewals(metrics_dir: Path, outcome: str) -> float:
    """``awooop_lease_renewals_total{outcome}`` summed over the worker's processes (their
    prometheus_client multiprocess files)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics_dir))
    return sum(
        sample.value
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name == "awooop_lease_renewals_total" and sample.labels.get("outcome") == outcome
    )


def measure_lease_keeping(bench: Bench, broker: Broker, project_id: str, n: int) -> dict[str, Any]:
    from awooop.config import Settings

    knobs, window = bench.knobs, bench.knobs.window
    # Every run is still holding when the window ends, however late in the spread it started.
    hold = knobs.start_spread_s + knobs.settle_s + window + 1.0
    label = f"hold-{n}"
    broker.purge()
    vacuum(bench.url)
    admit_with_fresh_web(
        bench,
        label,
        broker,
        hold_requests(project_id, bench.tokens[project_id], hold, n),
        n,
        **hold_env(),
    )
    metrics_dir = bench.logdir / f"metrics-{label}"
    metrics_dir.mkdir()
    progress = Progress(bench.url, project_id)
    counters: DatabaseCounters | None = None
    worker: Proc | None = None
    try:
        worker = bench.start(
            start_worker(
                f"worker-{label}",
                "awooop.tasks.app",
                "runs",
                bench.logdir,
                n,
                AWOOOP_TASK_EVENTS="0",
                PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
                **broker.env,
                **hold_env(),
            )
        )
        wait_all_running(progress, worker, n, knobs.start_spread_s)
        time.sleep(knobs.settle_s)
        sources = bench.cpu_sources(broker, worker=worker)
        counters = DatabaseCounters(bench.url)
        counts0 = counters.read()
        renewed0 = lease_renewals(metrics_dir, "renewed")
        before = snapshot(sources)
        time.sleep(window)
        interval = Interval.between(before, snapshot(sources))
        renewed1 = lease_renewals(metrics_dir, "renewed")
        counts1 = counters.read()
        still = count_running(progress)
        if still != n:
            raise BenchError(
                f"{label}: {still}/{n} runs RUNNING at the end of the window (the hold, "
                f"{hold:.0f} s, should outlast it); worker log {worker.log_path}"
            )
        wait_for_runs(progress, worker, n, timeout=hold + 30.0)
    finally:
        if counters is not None:
            counters.close()
        progress.close()
        bench.stop(worker, DRAINED_STOP_S)
    lost = lease_renewals(metrics_dir, "lost") + lease_renewals(metrics_dir, "error")
    seconds = interval.seconds
    renewals = renewed1 - renewed0
    renewals_per_s = renewals / seconds
    liveness = bench.settings.worker_liveness_interval_seconds  # the worker's too
    liveness_per_s = n / liveness  # one row per worker process (-c n: n processes)
    commits_per_s = (counts1.commits - counts0.commits) / seconds
    postgres_ms_per_s = interval.ms_per("postgres", seconds)
    postgres_ms = float("nan") if postgres_ms_per_s is None else postgres_ms_per_s
    writes_per_s = renewals_per_s + liveness_per_s
    default = Settings()
    default_writes = (
        n / default.heartbeat_interval_seconds + n / default.worker_liveness_interval_seconds
    )
    info: dict[str, Any] = {
        "runs": n,
        "worker_processes": n,
        "heartbeat_s": HEARTBEAT_S,
        "liveness_interval_s": liveness,
        "hold_s": hold,
        "window_s": seconds,
        "renewals": renewals,
        "renewals_per_s": renewals_per_s,
        "renewals_per_run_per_heartbeat": renewals / (n * seconds / HEARTBEAT_S),
        "renewals_lost_or_failed": lost,
        "liveness_writes_per_s": liveness_per_s,
        "commits": counts1.commits - counts0.commits,
        "commits_per_s": commits_per_s,
        "write_transactions_per_s": (counts1.next_xid - counts0.next_xid) / seconds,
        "other_databases_commits": counts1.other_commits - counts0.other_commits,
        "other_databases_commits_per_s": (counts1.other_commits - counts0.other_commits) / seconds,
        "postgres_cpu_ms_per_s": postgres_ms_per_s,
        "worker_cpu_ms_per_s": interval.ms_per("worker", seconds),
        "commits_per_write": commits_per_s / writes_per_s,
        "postgres_cpu_ms_per_write": postgres_ms / writes_per_s,
        "other_cpu_pct": interval.other_cpu_pct,
        "default": {
            "heartbeat_s": default.heartbeat_interval_seconds,
            "liveness_interval_s": default.worker_liveness_interval_seconds,
            "renewals_per_s": n / default.heartbeat_interval_seconds,
            "liveness_writes_per_s": n / default.worker_liveness_interval_seconds,
            "commits_per_s": default_writes * commits_per_s / writes_per_s,
            "postgres_cpu_ms_per_s": default_writes * postgres_ms / writes_per_s,
        },
    }
    log(
        f"lease keeping, {n} runs: {renewals:.0f} renewals in {seconds:.1f} s = "
        f"{info['renewals_per_run_per_heartbeat']:.2f} per run per heartbeat; "
        f"{commits_per_s:.1f} commits/s ({info['write_transactions_per_s']:.1f} write "
        f"transactions/s on the server; other databases: "
        f"{info['other_databases_commits_per_s']:.1f} commits/s), PostgreSQL "
        f"{_ms(postgres_ms_per_s)} / worker "
        f"{_ms(info['worker_cpu_ms_per_s'])} CPU ms/s; lost or failed renewals {lost:.0f}; "
        f"other CPU {interval.other_cpu_pct:.0f}%"
    )
    return info


# --- report ------------------------------------------------------------------------------------


def _ms(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None or value != value else f"{value:,.{digits}f}"


def render_console(results: dict[str, Any]) -> str:
    out = ["", "Admission, per request (16 connections, no worker)"]
    out.append(
        f"  {'broker':<10}{'req/s':>8}{'web ms':>9}{'PG ms':>8}{'Redis ms':>10}{'Rabbit ms':>11}"
        f"{'commits':>9}{'other CPU':>11}"
    )
    for r in results["admission"]:
        out.append(
            f"  {r['broker']:<10}{r['req_per_s']:>8.0f}{_ms(r['web_cpu_ms']):>9}"
            f"{_ms(r['postgres_cpu_ms']):>8}{_ms(r['redis_cpu_ms']):>10}"
            f"{_ms(r['rabbitmq_cpu_ms']):>11}{r['commits_per_request']:>9.2f}"
            f"{r['other_cpu_pct']:>10.0f}%"
        )
    out += ["", "Execution of a noop-3 run, per run (queue filled first)"]
    out.append(
        f"  {'broker':<10}{'procs':>6}{'runs/s':>8}{'worker ms':>11}{'PG ms':>8}{'Redis ms':>10}"
        f"{'Rabbit ms':>11}{'commits':>9}{'other CPU':>11}"
    )
    for r in results["execution"]:
        out.append(
            f"  {r['broker']:<10}{r['worker_processes']:>6}{r['runs_per_s']:>8.0f}"
            f"{_ms(r['worker_cpu_ms']):>11}{_ms(r['postgres_cpu_ms']):>8}"
            f"{_ms(r['redis_cpu_ms']):>10}{_ms(r['rabbitmq_cpu_ms']):>11}"
            f"{r['commits_per_run']:>9.2f}{r['other_cpu_pct']:>10.0f}%"
        )
    out += ["", f"Lease keeping (heartbeat {HEARTBEAT_S:g} s; projected to the default)"]
    out.append(
        f"  {'runs':>5}{'renew/run/hb':>14}{'commits/s':>11}{'xids/s':>8}{'PG ms/s':>9}"
        f"{'worker ms/s':>13}   at default: {'writes/s':>9}{'commits/s':>11}{'PG ms/s':>9}"
    )
    for r in results["lease_keeping"]:
        d = r["default"]
        out.append(
            f"  {r['runs']:>5}{r['renewals_per_run_per_heartbeat']:>14.2f}"
            f"{r['commits_per_s']:>11.1f}{r['write_transactions_per_s']:>8.1f}"
            f"{_ms(r['postgres_cpu_ms_per_s'], 1):>9}{_ms(r['worker_cpu_ms_per_s'], 1):>13}"
            f"   {'':>11}{d['renewals_per_s'] + d['liveness_writes_per_s']:>9.2f}"
            f"{d['commits_per_s']:>11.2f}{_ms(d['postgres_cpu_ms_per_s'], 1):>9}"
        )
    ceiling = results.get("commit_ceiling")
    if ceiling:
        out += [
            "",
            f"PostgreSQL commit ceiling: {ceiling['commits_per_s']:,.0f} commits/s "
            f"(pgbench, {ceiling['clients']} clients, one-row INSERT per transaction, "
            f"fsync={ceiling['fsync']}, synchronous_commit={ceiling['synchronous_commit']})",
        ]
    for line in results.get("notes", []):
        out.append(f"  note: {line}")
    return "\n".join(out)


def render_block(results: dict[str, Any]) -> str:
    """The markdown written between the capacity markers."""
    m = results["machine"]
    lines = [
        f"Measured by `{results['command']}` on {m['date']}: {m['cpus']} × {m['cpu_model']}, "
        f"PostgreSQL {m['postgresql']}, Redis {m['redis']}"
        + (f", RabbitMQ {results['rabbitmq']}" if results.get("rabbitmq") else "")
        + f"; code {m['code']}. Everything shares these CPUs. PostgreSQL CPU is the whole "
        "server's (other databases on it count too; sessions on it at the start: "
        f'{_sessions(results["sessions_at_start"])}); "other CPU" is the share of all CPUs '
        "used by processes not measured here.",
        "",
        f"**Admission**, per request: `POST /v1/projects/{{p}}/runs` (API channel, `noop-3`, new "
        f"events), {CONNECTIONS} keep-alive connections, no worker running, "
        f"{results['knobs']['runs']} requests after {results['knobs']['warmup_requests']} "
        "warm-up requests. Each project has an ingress rate limit far above the load, so each "
        "request also counts in Redis; RabbitMQ rows: RabbitMQ is the broker, the rate "
        "limiter stays on Redis. Commits: over every request the web answered (the warm-up, "
        "the measured ones, and the execution phase's first batch; its start included).",
        "",
        "| broker | req/s | web CPU ms | PostgreSQL CPU ms | Redis CPU ms | RabbitMQ CPU ms "
        "| commits | other CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["admission"]:
        lines.append(
            f"| {r['broker']} | {r['req_per_s']:,.0f} | {_ms(r['web_cpu_ms'])} | "
            f"{_ms(r['postgres_cpu_ms'])} | {_ms(r['redis_cpu_ms'])} | "
            f"{_ms(r['rabbitmq_cpu_ms'])} | {r['commits_per_request']:.2f} | "
            f"{r['other_cpu_pct']:.0f}% |"
        )
    lines += [
        "",
        f"**Execution** of a `noop-3` run (3 steps), per run: {results['knobs']['runs']} runs "
        "admitted with no worker, then one prefork worker (`-c 1`, or `-c 2`: two processes) "
        "drains them. runs/s: from the first claim to the last completion (database clock). "
        "CPU: from the first tenth of the runs completed to the last (warm processes). "
        "Commits: the execution alone (admission not included).",
        "",
        "| broker | worker processes | runs/s | worker CPU ms | PostgreSQL CPU ms | Redis CPU ms "
        "| RabbitMQ CPU ms | commits | other CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["execution"]:
        lines.append(
            f"| {r['broker']} | {r['worker_processes']} | {r['runs_per_s']:,.0f} | "
            f"{_ms(r['worker_cpu_ms'])} | {_ms(r['postgres_cpu_ms'])} | "
            f"{_ms(r['redis_cpu_ms'])} | {_ms(r['rabbitmq_cpu_ms'])} | "
            f"{r['commits_per_run']:.2f} | {r['other_cpu_pct']:.0f}% |"
        )
    if results.get("rabbitmq") is None:
        lines += ["", "RabbitMQ was not reachable: its rows are missing."]
    lines += ["", lease_paragraph(results), ""]
    lines += [
        "| N | renewals per run per heartbeat | commits/s | xids/s | PostgreSQL CPU ms/s "
        "| worker CPU ms/s | default: writes/s | default: commits/s | default: PostgreSQL CPU "
        "ms/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["lease_keeping"]:
        d = r["default"]
        lines.append(
            f"| {r['runs']} | {r['renewals_per_run_per_heartbeat']:.2f} | "
            f"{r['commits_per_s']:.1f} | {r['write_transactions_per_s']:.1f} | "
            f"{_ms(r['postgres_cpu_ms_per_s'], 1)} | {_ms(r['worker_cpu_ms_per_s'], 1)} | "
            f"{d['renewals_per_s'] + d['liveness_writes_per_s']:.2f} | "
            f"{d['commits_per_s']:.2f} | {_ms(d['postgres_cpu_ms_per_s'], 1)} |"
        )
    ceiling = results.get("commit_ceiling")
    if ceiling:
        lines += [
            "",
            f"**PostgreSQL's commit ceiling**: {ceiling['commits_per_s']:,.0f} commits/s — "
            f"`pgbench` with {ceiling['clients']} clients for {ceiling['seconds']:g} s, each "
            "transaction one single-row `INSERT` into a scratch table of this database "
            f"(`fsync={ceiling['fsync']}`, `synchronous_commit={ceiling['synchronous_commit']}`,"
            " as the server is configured), with nothing else of the bench running.",
        ]
    else:
        lines += ["", "**PostgreSQL's commit ceiling**: not measured (no `pgbench`)."]
    lines += [""] + [f"- {note}" for note in results.get("notes", [])]
    return "\n".join(lines).rstrip("\n") + "\n"


def lease_paragraph(results: dict[str, Any]) -> str:
    measured = results["lease_keeping"]
    if not measured:
        return "**Lease keeping**: not measured."
    first, default = measured[0], measured[0]["default"]
    beat, every = default["heartbeat_s"], default["liveness_interval_s"]
    return (
        "**Lease keeping**: N runs of `bench-hold` (one step waiting on its lease) held by one "
        f"worker with `-c N` (N processes), heartbeat {first['heartbeat_s']:g} s, worker "
        f"liveness every {first['liveness_interval_s']:g} s; measured over "
        f"{results['knobs']['window']:g} s from {results['knobs']['settle']:g} s after the last "
        "run was RUNNING (so the statistics of the claims are in). Renewals: the worker's own "
        "counter. xids/s: write transactions (the server's next transaction id, so all its "
        f"databases). Projected to the defaults (heartbeat {beat:g} s, liveness {every:g} s): "
        f"N / {beat:g} renewals/s + N / {every:g} liveness writes/s, at the commits and "
        "PostgreSQL CPU per write measured here. Worker CPU at the short heartbeat is an upper "
        "bound for the default (its keeper wakes every heartbeat / 4)."
    )


def contention_notes(results: dict[str, Any]) -> list[str]:
    """A line for each measurement during which the server's other databases committed more
    than a twentieth of what the bench's own did: its PostgreSQL CPU includes their work."""
    notes = []
    rows = [(f"admission ({r['broker']})", r) for r in results["admission"]]
    rows += [
        (f"execution ({r['broker']}, {r['worker_processes']} processes)", r)
        for r in results["execution"]
    ]
    rows += [(f"lease keeping (N = {r['runs']})", r) for r in results["lease_keeping"]]
    for label, r in rows:
        others, ours = r["other_databases_commits"], r["commits"]
        if others > ours / 20:
            notes.append(
                f"{label}: other databases on the server committed {others} transactions "
                f"meanwhile (this database: {ours}); its PostgreSQL CPU includes their work"
            )
    return notes


def _sessions(sessions: dict[str, int]) -> str:
    return ", ".join(f"{n} on `{db}`" for db, n in sorted(sessions.items())) or "none"


def replace_block(current: str | None, block: str) -> str:
    """The document with the text between the capacity markers replaced by ``block``, and
    everything outside them kept. No document yet (None): a title, one sentence and the
    markers. A document without the markers gets them, with the block, at its end."""
    section = f"{BEGIN}\n{block.strip(chr(10))}\n{END}"
    if current is None:
        return f"{NEW_DOCUMENT}\n{section}\n"
    head, found, rest = current.partition(BEGIN)
    if found and END in rest:
        _, _, tail = rest.partition(END)
        return head + section + tail
    return current.rstrip("\n") + "\n\n" + section + "\n"


def write_block(path: Path, block: str) -> None:
    try:
        current: str | None = path.read_text()
    except FileNotFoundError:
        current = None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(replace_block(current, block))


# --- main --------------------------------------------------------------------------------------


def server_sessions(url: str) -> dict[str, int]:
    """Client sessions on the whole server by database (this one's excluded)."""
    with _pg(url) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT coalesce(datname, '?'), count(*) FROM pg_stat_activity"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " GROUP BY 1"
        )
        return {str(db): int(n) for db, n in cur.fetchall()}


CEILING_CLIENTS = 16
CEILING_TABLE = "bench_capacity_commit_probe"


def pgbench_path() -> str | None:
    """The server's ``pgbench`` (on PATH or Debian's versioned directory), else the one the
    ``pgserver`` wheel ships (the embedded development server)."""
    found = shutil.which("pgbench")
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"), reverse=True):
        return str(candidate)
    with contextlib.suppress(ImportError):
        import pgserver

        wheel = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench"
        if wheel.exists():
            return str(wheel)
    return None


def measure_commit_ceiling(url: str, seconds: float, logdir: Path) -> dict[str, Any] | None:
    """Durable single-row commits/s the server takes from CEILING_CLIENTS clients (pgbench,
    one ``INSERT`` per transaction into a scratch table, dropped afterwards); None without
    pgbench."""
    binary = pgbench_path()
    if binary is None:
        log("commit ceiling: no pgbench found (PATH, /usr/lib/postgresql/*/bin, pgserver); skipped")
        return None
    dsn = psycopg2.extensions.parse_dsn(url.replace("postgresql+psycopg2://", "postgresql://"))
    script = logdir / "commit_probe.sql"
    script.write_text(f"INSERT INTO {CEILING_TABLE} (at) VALUES (now());\n")
    with _pg(url) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {CEILING_TABLE} (id bigserial, at timestamptz)")
    argv = [binary, "-n", "-c", str(CEILING_CLIENTS), "-j", "2", "-T", f"{seconds:.0f}"]
    argv += ["-f", str(script)]
    env = {**os.environ, "PGHOST": dsn.get("host", "127.0.0.1"), "PGPORT": dsn.get("port", "5432")}
    env.update(PGUSER=dsn.get("user", "postgres"), PGDATABASE=dsn.get("dbname", "postgres"))
    if dsn.get("password"):
        env["PGPASSWORD"] = dsn["password"]
    log(f"commit ceiling: {binary} with {CEILING_CLIENTS} clients for {seconds:.0f} s")
    try:
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=seconds + 60, check=False
        )
        with _pg(url) as conn, conn.cursor() as cur:
            cur.execute("SHOW fsync")
            fsync = cur.fetchone()[0]
            cur.execute("SHOW synchronous_commit")
            synchronous_commit = cur.fetchone()[0]
    finally:
        with _pg(url) as conn, conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {CEILING_TABLE}")
    (logdir / "pgbench.log").write_text(done.stdout + done.stderr)
    match = re.search(r"tps = ([0-9.]+)", done.stdout)
    if done.returncode != 0 or match is None:
        raise BenchError(f"pgbench failed (exit {done.returncode}); log {logdir / 'pgbench.log'}")
    return {
        "clients": CEILING_CLIENTS,
        "seconds": seconds,
        "commits_per_s": float(match.group(1)),
        "fsync": fsync,
        "synchronous_commit": synchronous_commit,
        "pgbench": binary,
    }


def command_line(quick_flag: bool) -> str:
    """How this run was started: the make target (make sets MAKELEVEL for its recipes) or the
    module, with the BENCH_CAPACITY_* knobs set."""
    knobs = [
        f"{k}={shlex.quote(v)}"
        for k, v in sorted(os.environ.items())
        if k.startswith("BENCH_CAPACITY_") and k != "BENCH_CAPACITY_AMQP_URL"
    ]
    command = "make bench-capacity" if os.environ.get("MAKELEVEL") else "python -m bench.capacity"
    return " ".join([*knobs, command] + (["--quick"] if quick_flag else []))


def run_phases(
    bench: Bench, redis_: Broker, rabbit: Broker | None, ids: dict[str, str]
) -> dict[str, Any]:
    results: dict[str, Any] = {"admission": [], "execution": [], "lease_keeping": []}
    for broker, concurrencies in ((redis_, bench.knobs.concurrencies), (rabbit, (1,))):
        if broker is None:
            continue
        key = broker.name.lower()
        first = ids[f"c1-{key}"]
        results["admission"].append(measure_admission(bench, broker, ids[f"adm-{key}"], first))
        results["execution"].append(measure_execution(bench, broker, first, 1, queued=True))
        for concurrency in concurrencies[1:]:
            project_id = ids[f"c{concurrency}-{key}"]
            results["execution"].append(measure_execution(bench, broker, project_id, concurrency))
        if broker is redis_:
            for n in bench.knobs.hold_runs:
                project_id = ids[f"hold-{n}"]
                results["lease_keeping"].append(measure_lease_keeping(bench, broker, project_id, n))
    results["commit_ceiling"] = measure_commit_ceiling(
        bench.url, bench.knobs.ceiling_seconds, bench.logdir
    )
    return results


def setup_projects(
    settings: Any, knobs: Knobs, tag: str, rabbitmq: bool
) -> tuple[dict[str, str], dict[str, str]]:
    """The bench's projects (role -> project id) and their API tokens: all routed to
    ``noop-3``, the hold projects to ``bench-hold``; every one with an ingress limit."""
    from awooop import db
    from awooop.store import projects

    roles = ["adm-redis"] + [f"c{c}-redis" for c in knobs.concurrencies]
    roles += [f"hold-{n}" for n in knobs.hold_runs]
    roles += ["adm-rabbitmq", "c1-rabbitmq"] if rabbitmq else []
    ids = {role: f"{tag}-{role}" for role in roles}
    tokens = create_projects(settings, list(ids.values()))
    engine = db.make_engine(settings.database_url, pool_size=1)
    try:
        with engine.begin() as conn:
            for role, project_id in ids.items():
                if role.startswith("hold-"):
                    projects.set_routes(conn, project_id, {"api": HOLD})
                projects.set_limits(
                    conn, project_id, {"ingress_per_minute": INGRESS_LIMIT_PER_MINUTE}
                )
    finally:
        engine.dispose()
    return ids, tokens


def main(argv: list[str] | None = None) -> int:
    from awooop.config import ConfigError, Settings

    parser = argparse.ArgumentParser(
        prog="python -m bench.capacity", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes; no markdown written")
    args = parser.parse_args(argv)
    try:
        knobs = Knobs.from_env(args.quick)
        settings = Settings.from_env()
    except (BenchError, ConfigError) as exc:
        print(f"bench-capacity: {exc}", file=sys.stderr)
        return 2
    if not settings.broker_url.startswith(("redis://", "rediss://")):
        print(
            "bench-capacity: AWOOOP_BROKER_URL must be Redis (phases 1-3 measure it; RabbitMQ "
            "is BENCH_CAPACITY_AMQP_URL)",
            file=sys.stderr,
        )
        return 2
    url = settings.database_url
    logdir = Path(tempfile.mkdtemp(prefix="awooop-capacity-"))
    log(
        f"process logs in {logdir}"
        + (" (quick mode: tiny sizes, no markdown)" if knobs.quick else "")
    )

    def on_timeout(*_: object) -> None:
        raise Timeout()

    def on_term(*_: object) -> None:
        raise KeyboardInterrupt()

    signal.signal(signal.SIGALRM, on_timeout)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(int(knobs.timeout))
    tag = f"cap-{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(2)}"
    ids: dict[str, str] = {}
    brokers: list[Broker] = []
    try:
        try:
            redis_ = redis_broker(settings.broker_url)
        except redis.RedisError as exc:
            raise BenchError(f"no Redis at AWOOOP_BROKER_URL: {exc}") from exc
        brokers.append(redis_)
        try:
            machine = machine_info(url, settings.broker_url)
            postgres_pid = postgres_server_pid(url)
            sessions = server_sessions(url)
        except psycopg2.Error as exc:
            raise BenchError(f"no PostgreSQL at AWOOOP_DATABASE_URL: {exc}") from exc
        redis_pids = sorted(
            {
                p
                for p in (
                    redis_server_pid(settings.broker_url),
                    redis_server_pid(settings.rate_limit_url),
                )
                if p
            }
        )
        notes = []
        if postgres_pid is None:
            notes.append(
                "PostgreSQL does not run on this machine (or not in this process namespace): "
                "its CPU is not measured"
            )
        if not redis_pids:
            notes.append("Redis does not run on this machine: its CPU is not measured")
        log(
            f"{machine['cpus']} CPUs ({machine['cpu_model']}), PostgreSQL {machine['postgresql']} "
            f"(server pid {postgres_pid}), Redis {machine['redis']} (pid {redis_pids}); "
            f"{other_clients(url)} other sessions on this database; on the server: "
            f"{_sessions(sessions)}"
        )
        rabbit = rabbitmq_broker(knobs.amqp_url, settings.rate_limit_url)
        if rabbit is not None:
            brokers.append(rabbit)
            if not rabbitmq_pids():
                notes.append("RabbitMQ does not run on this machine: its CPU is not measured")
        for broker in brokers:
            if broker.consumers():
                log(
                    f"warning: {broker.name} has other consumers of the bench's queues "
                    "(Celery workers?); they may take the bench's run messages"
                )
        ids, tokens = setup_projects(settings, knobs, tag, rabbit is not None)
        log(f"projects {tag}-* created ({len(ids)})")
        bench = Bench(knobs, settings, logdir, tokens, postgres_pid, redis_pids)
        results = run_phases(bench, redis_, rabbit, ids)
        notes += contention_notes(results)
        results.update(
            quick=knobs.quick,
            command=command_line(args.quick),
            machine=machine,
            rabbitmq=rabbit.version if rabbit else None,
            sessions_at_start=sessions,
            knobs={
                "runs": knobs.runs,
                "warmup_requests": knobs.warmup_requests,
                "hold_runs": list(knobs.hold_runs),
                "window": knobs.window,
                "settle": knobs.settle_s,
            },
            notes=notes,
        )
        print(render_console(results), flush=True)
        knobs.json_path.parent.mkdir(parents=True, exist_ok=True)
        knobs.json_path.write_text(json.dumps(results, indent=2, default=str) + "\n")
        log(f"wrote {knobs.json_path}")
        if knobs.quick:
            log(f"quick mode: {knobs.output} left as it was")
        else:
            write_block(knobs.output, render_block(results))
            log(f"wrote the capacity block of {knobs.output}")
        return 0
    except (BenchError, Timeout, KeyboardInterrupt) as exc:
        return failed("bench-capacity", exc, "BENCH_CAPACITY_TIMEOUT", knobs.timeout, logdir)
    finally:
        signal.alarm(0)
        stop_all()
        for broker in brokers:
            with contextlib.suppress(Exception):
                broker.purge()
        if ids:
            try:
                delete_projects(url, list(ids.values()))
                log(f"deleted the bench projects' rows ({tag}-*)")
            except psycopg2.Error as exc:
                log(f"could not delete the bench projects' rows: {exc}")


if __name__ == "__main__":
    sys.exit(main())
