"""``make bench-peers`` (``python -m bench.peers``): AwoooP beside Procrastinate and DBOS
Transact, the peers a user would pick instead.

One workload for each, one system after the other in the same run, on the server of
``AWOOOP_DATABASE_URL`` with a scratch database per system (created here, dropped at the
end): BENCH_PEERS_RUNS (2,000) three-step no-op workflows with durable steps are admitted
first, one library call each, with no worker running; then ONE worker process starts and
drains them. Measured per system:

- workflows/s over the drain: workflows / (first claim -> last completion), both read from
  the database's clock (AwoooP: the first claim's history row and the last ``finished_at``;
  Procrastinate: the first ``started`` and the last ``succeeded`` event; DBOS: the first
  ``started_at_epoch_ms`` — set by the dequeue — and the last ``completed_at``);
- PostgreSQL commits per workflow: ``xact_commit`` of the system's scratch database from
  ``pg_stat_database``, read (in a transaction that is rolled back, so the reads add none)
  after setup, after admission and after the drain, each time once the processes of the
  phase have closed their sessions — so the admission and drain shares come apart;
- worker CPU ms per workflow: user + system CPU of the worker's process tree from the
  first claim seen (polled every 0.1 s) to the last completion (start-up left out).

The systems:

- **AwoooP**: ``noop-3`` runs admitted with ``awooop.store.admission.admit`` (the statement
  the API channel runs, through ``bench.retention.Store``; no HTTP), their Celery messages
  pushed after the commits, then ``celery -A awooop.tasks.app worker -Q runs -c 1 -P
  prefork`` (``bench.run.start_worker``, task events off as in ``make bench``).
- **Procrastinate** (``bench/peers_procrastinate.py``): three ``async`` jobs per workflow,
  each deferring the next; ``procrastinate worker --concurrency`` BENCH_PEERS_PROCRASTINATE_
  CONCURRENCY (30, the value of its concurrency how-to), pool = concurrency + 1.
- **DBOS Transact** (``bench/peers_dbos.py``): an ``async`` ``@DBOS.workflow`` of three
  ``@DBOS.step``s enqueued with a ``DBOSClient`` on a queue with worker_concurrency
  BENCH_PEERS_DBOS_CONCURRENCY (1000) and max_executor_threads BENCH_PEERS_DBOS_THREADS
  (512), as DBOS's own queue benchmark runs its workers.

Then latency: a fresh worker of each system, warmed by WARM_UP workflows, and an open-loop
arrival rate of half the drain rate just measured for BENCH_PEERS_LATENCY_S (10) seconds;
p50 and p99 from each workflow's admission (the row its admission commits) to its first
step's start and to its completion, all from the system's own records (see
``_*_LATENCY``).

Targets: AwoooP runs/s ≥ 4× DBOS's workflows/s; AwoooP steps/s (runs/s × 3) ≥ 2×
Procrastinate's jobs/s; AwoooP's p50 to the first step ≤ 10 ms and the lowest of the
three. The figures go into docs/benchmarks.md between the peers markers (below the part
``make bench`` rewrites); BENCH_OUTPUT names another file. Knobs: BENCH_PEERS_RUNS,
BENCH_PEERS_SYSTEMS ("awooop,procrastinate,dbos"; a partial run writes no report unless
BENCH_OUTPUT is set), BENCH_PEERS_PROCRASTINATE_CONCURRENCY, BENCH_PEERS_DBOS_CONCURRENCY,
BENCH_PEERS_DBOS_THREADS, BENCH_PEERS_LATENCY_S, BENCH_TIMEOUT (whole run, s, 900),
BENCH_KEEP=1 (keep the scratch databases). A short trial: ``BENCH_PEERS_RUNS=300
BENCH_PEERS_LATENCY_S=3 BENCH_OUTPUT=/tmp/peers.md make bench-peers``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import redis
from sqlalchemy import Engine, create_engine
from sqlalchemy.exc import SQLAlchemyError

from bench import retention, run, scratch
from bench.run import BenchError, Proc

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
BEGIN = "<!-- peers:begin (written by `make bench-peers`) -->"
END = "<!-- peers:end -->"
SYSTEMS = ("awooop", "procrastinate", "dbos")
LABELS = {"awooop": "AwoooP `noop-3`", "procrastinate": "Procrastinate", "dbos": "DBOS Transact"}
STEPS = 3
DEFAULT_RUNS = 2000
TARGET_DBOS = 4.0  # AwoooP runs/s / DBOS workflows/s
TARGET_PROCRASTINATE = 2.0  # AwoooP steps/s / Procrastinate jobs/s
TARGET_FIRST_STEP_P50_MS = 10.0  # AwoooP, admission -> first step started, at half capacity
WARM_UP = 20  # workflows run before the latency phase's measured ones
POLL_S = 0.1
PACKAGES = (
    "procrastinate",
    "dbos",
    "celery",
    "kombu",
    "redis",
    "SQLAlchemy",
    "psycopg2-binary",
    "psycopg",
    "psycopg-pool",
)


def _int(name: str, default: int) -> int:
    try:
        return int(float(os.environ.get(name, default)))
    except ValueError as exc:
        raise BenchError(f"{name} must be a number") from exc


@dataclass(frozen=True)
class Knobs:
    runs: int = field(default_factory=lambda: _int("BENCH_PEERS_RUNS", DEFAULT_RUNS))
    systems: tuple[str, ...] = field(
        default_factory=lambda: tuple(
            s.strip()
            for s in os.environ.get("BENCH_PEERS_SYSTEMS", ",".join(SYSTEMS)).split(",")
            if s.strip()
        )
    )
    procrastinate_concurrency: int = field(
        default_factory=lambda: _int("BENCH_PEERS_PROCRASTINATE_CONCURRENCY", 30)
    )
    dbos_concurrency: int = field(
        default_factory=lambda: _int("BENCH_PEERS_DBOS_CONCURRENCY", 1000)
    )
    dbos_threads: int = field(default_factory=lambda: _int("BENCH_PEERS_DBOS_THREADS", 512))
    latency_s: int = field(default_factory=lambda: _int("BENCH_PEERS_LATENCY_S", 10))
    timeout: float = field(default_factory=lambda: float(_int("BENCH_TIMEOUT", 900)))
    keep: bool = field(default_factory=lambda: os.environ.get("BENCH_KEEP") == "1")
    output: Path = field(
        default_factory=lambda: ROOT / os.environ.get("BENCH_OUTPUT", "docs/benchmarks.md")
    )


log = run.log


# --- the database side ---------------------------------------------------------------------


def commits(url: str) -> int:
    """``xact_commit`` of the database, read in a transaction that is rolled back (so the
    read itself commits nothing), a second after the last session of a phase closed."""
    time.sleep(1.0)
    with run._pg(url, autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        value = int(cur.fetchone()[0])
        conn.rollback()
    return value


class Watch(run.Progress):
    """(claimed, done, failed) and the drain's span of one system's tables, polled inside
    ONE transaction that is rolled back at the end (so polling adds no ``xact_commit``)."""

    def __init__(self, url: str, counts_sql: str, span_sql: str, params: dict[str, Any]) -> None:
        super().__init__(url, "")
        self.counts_sql, self.span_sql, self.params = counts_sql, span_sql, params

    def progress(self) -> tuple[int, int, int]:
        with self.conn.cursor() as cur:
            cur.execute(self.counts_sql, self.params)
            claimed, done, failed = cur.fetchone()
        return int(claimed), int(done), int(failed)

    def span(self) -> float:
        """Seconds from the first claim to the last completion (timestamps or epoch ms)."""
        with self.conn.cursor() as cur:
            cur.execute(self.span_sql, self.params)
            first, last = cur.fetchone()
        if first is None or last is None:
            return float("nan")
        if isinstance(first, dt.datetime):
            return (last - first).total_seconds()
        return (float(last) - float(first)) / 1000.0


_AWOOOP_COUNTS = """
SELECT count(*) FILTER (WHERE status <> 'PENDING'),
       count(*) FILTER (WHERE status = 'COMPLETED'),
       count(*) FILTER (WHERE status IN ('FAILED', 'CANCELLED'))
FROM awooop_run_state WHERE project_id = %(p)s
"""

_PROCRASTINATE_COUNTS = """
SELECT count(*) FILTER (WHERE status <> 'todo'),
       count(*) FILTER (WHERE status = 'succeeded' AND task_name = %(last)s),
       count(*) FILTER (WHERE status IN ('failed', 'cancelled', 'aborted'))
FROM procrastinate_jobs
"""

_PROCRASTINATE_SPAN = """
SELECT min(at) FILTER (WHERE type = 'started'), max(at) FILTER (WHERE type = 'succeeded')
FROM procrastinate_events
"""

_DBOS_COUNTS = """
SELECT count(*) FILTER (WHERE status <> 'ENQUEUED'),
       count(*) FILTER (WHERE status = 'SUCCESS'),
       count(*) FILTER (WHERE status IN ('ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'))
FROM dbos.workflow_status WHERE name = %(wf)s
"""

_DBOS_SPAN = """
SELECT min(started_at_epoch_ms), max(completed_at)
FROM dbos.workflow_status WHERE name = %(wf)s AND status = 'SUCCESS'
"""


# Per workflow admitted since %(since)s (epoch s): admitted, first step started, completed
# (epoch s), each from the system's own records.
_AWOOOP_LATENCY = """
SELECT extract(epoch FROM created_at),
       extract(epoch FROM (saga_steps->0->>'recorded_at')::timestamptz)
         - (saga_steps->0->>'duration_ms')::float / 1000,
       extract(epoch FROM finished_at)
FROM awooop_run_state
WHERE project_id = %(p)s AND status = 'COMPLETED' AND created_at >= to_timestamp(%(since)s)
"""

_PROCRASTINATE_LATENCY = """
SELECT extract(epoch FROM d.at), extract(epoch FROM s.at), extract(epoch FROM f.at)
FROM procrastinate_jobs j1
JOIN procrastinate_events d ON d.job_id = j1.id AND d.type = 'deferred'
JOIN procrastinate_events s ON s.job_id = j1.id AND s.type = 'started'
JOIN procrastinate_jobs j3 ON j3.task_name = %(last)s AND j3.args->'run' = j1.args->'run'
JOIN procrastinate_events f ON f.job_id = j3.id AND f.type = 'succeeded'
WHERE j1.task_name = %(first)s AND d.at >= to_timestamp(%(since)s)
"""

_DBOS_LATENCY = """
SELECT w.created_at / 1000.0,
       (SELECT min(o.started_at_epoch_ms) FROM dbos.operation_outputs o
        WHERE o.workflow_uuid = w.workflow_uuid) / 1000.0,
       w.completed_at / 1000.0
FROM dbos.workflow_status w
WHERE w.name = %(wf)s AND w.status = 'SUCCESS' AND w.created_at >= %(since)s * 1000
"""


# --- processes -----------------------------------------------------------------------------


def run_to_end(
    name: str, argv: list[str], env: dict[str, str], logdir: Path, timeout: float
) -> float:
    """Run a command to its end (its own process group, output in a log file); seconds taken."""
    proc = Proc(name, argv, env, logdir)
    t0 = time.perf_counter()
    try:
        proc.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(
            f"{name} did not finish within {timeout:.0f} s; log {proc.log_path}:\n{proc.log_tail()}"
        ) from exc
    finally:
        proc.stop()
    if proc.popen.returncode != 0:
        raise BenchError(
            f"{name} exited with status {proc.popen.returncode}; log {proc.log_path}:\n"
            f"{proc.log_tail()}"
        )
    return time.perf_counter() - t0


def drain(
    label: str, watch: Watch, worker: Proc, n: int, noise: run.Noise, info: dict[str, Any]
) -> None:
    """Until the worker has completed all n workflows; CPU and span into ``info``."""
    timeout = max(120.0, n / 10)
    started = time.monotonic()
    deadline = started + timeout
    cpu_first: float | None = None
    last, last_change = (-1, -1), started
    with noise.measure(info):
        while True:
            claimed, done, failed = watch.progress()
            if cpu_first is None and claimed > 0:
                cpu_first = worker.cpu_seconds()
                info["startup_s"] = time.monotonic() - started
                info["startup_cpu_s"] = cpu_first
            if failed:
                raise BenchError(f"{label}: {failed} workflows failed; log {worker.log_path}")
            if done >= n:
                break
            worker.check()
            now = time.monotonic()
            if (claimed, done) != last:
                last, last_change = (claimed, done), now
            stalled = now - last_change > run.STALL_S
            if now > deadline or stalled:
                why = (
                    f"no progress for {run.STALL_S:.0f} s" if stalled else f"after {timeout:.0f} s"
                )
                raise BenchError(
                    f"{label}: {done}/{n} workflows done, {claimed} claimed ({why}); "
                    f"worker log {worker.log_path}:\n{worker.log_tail()}"
                )
            time.sleep(POLL_S)
    cpu_last = worker.cpu_seconds()
    info["wall_s"] = time.monotonic() - started
    info["worker_cpu_ms"] = (cpu_last - (cpu_first or 0.0)) * 1000 / n
    info["seconds"] = watch.span()
    info["per_s"] = n / info["seconds"] if info["seconds"] > 0 else float("nan")
    log(
        f"{label}: {n} workflows, first claim to last completion {info['seconds']:.2f} s = "
        f"{info['per_s']:.0f}/s; worker CPU {info['worker_cpu_ms']:.2f} ms/workflow; "
        f"other CPU {info['other_cpu_pct']:.0f}%"
    )


def measure(
    label: str,
    url: str,
    n: int,
    admit: Callable[[], None],
    start_worker: Callable[[], Proc],
    watch_sql: tuple[str, str, dict[str, Any]],
    noise: run.Noise,
    procs: list[Proc],
    latency: tuple[int, Callable[[int, int, float], None], str] | None = None,
) -> dict[str, Any]:
    """Admission, then the drain by one worker; commits counted around each. Then, with
    ``latency`` (seconds, the paced admission, its SQL), the latency phase at half the
    drain rate, on a worker of its own."""
    info: dict[str, Any] = {"runs": n, "other_db_clients": run.other_clients(url)}
    c0 = commits(url)
    t0 = time.perf_counter()
    admit()
    info["admit_s"] = time.perf_counter() - t0
    c1 = commits(url)
    log(f"{label}: {n} workflows admitted in {info['admit_s']:.1f} s ({c1 - c0} commits)")
    watch = Watch(url, *watch_sql)
    worker: Proc | None = None
    try:
        _, done, _ = watch.progress()
        if done:
            raise BenchError(f"{label}: {done} workflows done before the worker started")
        worker = start_worker()
        procs.append(worker)
        drain(label, watch, worker, n, noise, info)
    finally:
        watch.close()
        if worker is not None:
            worker.stop()  # its sessions close, which flushes their statistics
            procs.remove(worker)
    c2 = commits(url)
    info["commits_admission"], info["commits_drain"] = c1 - c0, c2 - c1
    info["commits_per_run"] = (c2 - c0) / n
    log(
        f"{label}: PostgreSQL commits {c1 - c0} admission + {c2 - c1} drain = "
        f"{info['commits_per_run']:.2f} per workflow"
    )
    if latency is not None and latency[0] > 0 and info["per_s"] == info["per_s"]:
        seconds, admit_paced, sql = latency
        info["latency"] = latency_phase(
            label,
            url,
            n,
            info["per_s"] / 2,
            seconds,
            admit_paced,
            start_worker,
            watch_sql,
            sql,
            procs,
        )
    return info


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values``, nearest rank; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def latencies(rows: list[tuple[float, float, float]]) -> dict[str, float]:
    """p50 and p99, in ms, from admission to the first step's start and to completion."""
    first = [(started - admitted) * 1000 for admitted, started, _ in rows]
    done = [(completed - admitted) * 1000 for admitted, _, completed in rows]
    return {
        "first_p50": percentile(first, 0.50),
        "first_p99": percentile(first, 0.99),
        "done_p50": percentile(done, 0.50),
        "done_p99": percentile(done, 0.99),
    }


def latency_phase(
    label: str,
    url: str,
    drained: int,
    rate: float,
    seconds: int,
    admit_paced: Callable[[int, int, float], None],
    start_worker: Callable[[], Proc],
    watch_sql: tuple[str, str, dict[str, Any]],
    latency_sql: str,
    procs: list[Proc],
) -> dict[str, Any]:
    """Open loop at ``rate`` a second (half the drain rate) for ``seconds`` with one worker
    running (warmed up by WARM_UP workflows first): each workflow's admission, first step's
    start and completion, from the system's records."""
    n = max(20, int(rate * seconds))
    info: dict[str, Any] = {"rate": rate, "workflows": n}
    watch = Watch(url, *watch_sql)
    worker = start_worker()
    procs.append(worker)
    try:

        def until_done(total: int) -> None:
            deadline = time.monotonic() + max(60.0, 4 * total / rate)
            while watch.progress()[1] < total:
                worker.check()
                if time.monotonic() > deadline:
                    raise BenchError(f"{label}: latency phase did not finish; {worker.log_path}")
                time.sleep(POLL_S)

        admit_paced(WARM_UP, drained, rate)
        until_done(drained + WARM_UP)
        since = time.time()
        admit_paced(n, drained + WARM_UP, rate)
        until_done(drained + WARM_UP + n)
        with watch.conn.cursor() as cur:
            cur.execute(latency_sql, {**watch_sql[2], "since": since})
            rows = [(float(a), float(b), float(c)) for a, b, c in cur.fetchall()]
    finally:
        watch.close()
        worker.stop()
        procs.remove(worker)
    if len(rows) != n:
        raise BenchError(f"{label}: {len(rows)} of the latency phase's {n} workflows found")
    info.update(latencies(rows))
    admitted = [a for a, _, _ in rows]
    # The arrival rate achieved, from the admissions' own times.
    info["admit_per_s"] = (n - 1) / (max(admitted) - min(admitted)) if n > 1 else float("nan")
    log(
        f"{label}: {n} workflows at {rate:.1f}/s (admitted at {info['admit_per_s']:.1f}/s): "
        f"to the first step p50 {info['first_p50']:.1f} ms p99 {info['first_p99']:.1f} ms; "
        f"to completion p50 {info['done_p50']:.1f} ms p99 {info['done_p99']:.1f} ms"
    )
    return info


# --- the three systems -----------------------------------------------------------------------


@dataclass
class Context:
    knobs: Knobs
    base: Any  # awooop.config.Settings
    admin: Engine
    logdir: Path
    broker: redis.Redis
    noise: run.Noise
    procs: list[Proc]
    databases: list[str] = field(default_factory=list)

    def database(self, system: str) -> tuple[str, str]:
        name = f"peers_{system}_{os.getpid()}"
        self.databases.append(name)
        return name, scratch.database_url(self.base.database_url, name)


def bench_awooop(ctx: Context) -> dict[str, Any]:
    from awooop.config import Settings
    from awooop.tasks import runs as run_tasks

    n = ctx.knobs.runs
    name, _ = ctx.database("awooop")
    url = scratch.create_database(ctx.admin, ctx.base.database_url, name)
    settings = Settings(**{**ctx.base.__dict__, "database_url": url})
    project = "bench-peers"
    run.create_projects(settings, [project])
    dropped = run.purge_queue(ctx.broker, "runs")
    if dropped:
        log(f"AwoooP: purged {dropped} messages left in the broker's 'runs' queue")

    def admit() -> None:
        store = retention.Store(url, settings)
        try:
            ids = [store.admit(project, f"peers-{i}") for i in range(n)]
        finally:
            store.close()
        sent = run_tasks.enqueue(ids)  # after the commits, as the web process does
        if sent != n:
            raise BenchError(f"AwoooP: {sent}/{n} run messages sent to the broker")

    def admit_paced(count: int, first: int, rate: float) -> None:
        store = retention.Store(url, settings)
        try:
            t0 = time.monotonic()
            for i in range(count):
                time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
                run_id = store.admit(project, f"peers-{first + i}")
                run_tasks.enqueue([run_id])
        finally:
            store.close()

    def start_worker() -> Proc:
        return run.start_worker(
            "worker-awooop",
            "awooop.tasks.app",
            "runs",
            ctx.logdir,
            AWOOOP_TASK_EVENTS="0",
            AWOOOP_DATABASE_URL=url,
        )

    return measure(
        "AwoooP",
        url,
        n,
        admit,
        start_worker,
        (_AWOOOP_COUNTS, run._SPAN, {"p": project, "since": run.EPOCH}),
        ctx.noise,
        ctx.procs,
        (ctx.knobs.latency_s, admit_paced, _AWOOOP_LATENCY),
    )


def bench_procrastinate(ctx: Context) -> dict[str, Any]:
    from bench import peers_procrastinate as names

    n, c = ctx.knobs.runs, ctx.knobs.procrastinate_concurrency
    name, url = ctx.database("procrastinate")
    scratch.create_empty(ctx.admin, name)
    env = run.child_env(
        BENCH_PEERS_PROCRASTINATE_DSN=scratch.libpq_url(url),
        BENCH_PEERS_PROCRASTINATE_CONCURRENCY=str(c),
    )
    app = "--app=bench.peers_procrastinate.app"
    cli = str(BIN / "procrastinate")
    run_to_end("procrastinate-schema", [cli, app, "schema", "--apply"], env, ctx.logdir, 120)

    def admit() -> None:
        code = "import sys; from bench import peers_procrastinate as p; p.main(sys.argv[1:])"
        argv = [sys.executable, "-c", code, "admit", str(n)]
        run_to_end("procrastinate-admit", argv, env, ctx.logdir, max(120.0, n / 10))

    def admit_paced(count: int, first: int, rate: float) -> None:
        code = "import sys; from bench import peers_procrastinate as p; p.main(sys.argv[1:])"
        argv = [sys.executable, "-c", code, "admit", str(count), str(first), str(rate)]
        run_to_end("procrastinate-admit-paced", argv, env, ctx.logdir, 60 + count / rate)

    def start_worker() -> Proc:
        argv = [cli, app, "worker", f"--concurrency={c}", "--name=bench-peers"]
        return Proc("worker-procrastinate", argv, env, ctx.logdir)

    info = measure(
        "Procrastinate",
        url,
        n,
        admit,
        start_worker,
        (
            _PROCRASTINATE_COUNTS,
            _PROCRASTINATE_SPAN,
            {"first": names.STEPS[0], "last": names.STEPS[-1]},
        ),
        ctx.noise,
        ctx.procs,
        (ctx.knobs.latency_s, admit_paced, _PROCRASTINATE_LATENCY),
    )
    info["concurrency"] = c
    return info


def bench_dbos(ctx: Context) -> dict[str, Any]:
    from bench import peers_dbos as names  # registers its workflow; launches nothing

    n, c, threads = ctx.knobs.runs, ctx.knobs.dbos_concurrency, ctx.knobs.dbos_threads
    name, url = ctx.database("dbos")
    scratch.create_empty(ctx.admin, name)
    env = run.child_env(
        BENCH_PEERS_DBOS_URL=scratch.libpq_url(url),
        BENCH_PEERS_DBOS_CONCURRENCY=str(c),
        BENCH_PEERS_DBOS_THREADS=str(threads),
    )
    module = [sys.executable, "-m", "bench.peers_dbos"]
    run_to_end("dbos-setup", [*module, "setup"], env, ctx.logdir, 120)

    def admit() -> None:
        run_to_end("dbos-admit", [*module, "admit", str(n)], env, ctx.logdir, max(120.0, n / 10))

    def admit_paced(count: int, first: int, rate: float) -> None:
        argv = [*module, "admit", str(count), str(first), str(rate)]
        run_to_end("dbos-admit-paced", argv, env, ctx.logdir, 60 + count / rate)

    def start_worker() -> Proc:
        return Proc("worker-dbos", [*module, "worker"], env, ctx.logdir)

    info = measure(
        "DBOS Transact",
        url,
        n,
        admit,
        start_worker,
        (_DBOS_COUNTS, _DBOS_SPAN, {"wf": names.WORKFLOW}),
        ctx.noise,
        ctx.procs,
        (ctx.knobs.latency_s, admit_paced, _DBOS_LATENCY),
    )
    info["concurrency"], info["threads"] = c, threads
    return info


BENCHES = {"awooop": bench_awooop, "procrastinate": bench_procrastinate, "dbos": bench_dbos}


# --- report ----------------------------------------------------------------------------------


def targets(results: dict[str, dict[str, Any]]) -> list[tuple[str, float, str, str]]:
    """(what, measured, target text, verdict)."""
    ours = results.get("awooop", {}).get("per_s")
    dbos = results.get("dbos", {}).get("per_s")
    procrastinate = results.get("procrastinate", {}).get("per_s")
    value = run._ratio(ours, dbos)
    rows = [
        (
            "AwoooP runs/s / DBOS Transact workflows/s",
            value,
            f">= {TARGET_DBOS:.2f}",
            run._verdict(value, TARGET_DBOS, True),
        )
    ]
    # steps/s over jobs/s: both sides times three steps (one job per step).
    value = run._ratio(
        ours * STEPS if ours else None, procrastinate * STEPS if procrastinate else None
    )
    rows.append(
        (
            "AwoooP steps/s (runs/s x 3) / Procrastinate jobs/s",
            value,
            f">= {TARGET_PROCRASTINATE:.2f}",
            run._verdict(value, TARGET_PROCRASTINATE, True),
        )
    )
    p50 = {k: r["latency"]["first_p50"] for k, r in results.items() if "latency" in r}
    value = p50.get("awooop", float("nan"))
    lowest = all(value <= v for k, v in p50.items() if k != "awooop")
    verdict = run._verdict(value, TARGET_FIRST_STEP_P50_MS, False)
    if verdict == "met" and not lowest:
        verdict = "MISSED"
    rows.append(
        (
            "AwoooP p50 ms, admission to first step, half capacity",
            value,
            f"<= {TARGET_FIRST_STEP_P50_MS:.0f}, lowest",
            verdict,
        )
    )
    return rows


def _f(value: Any, digits: int = 0) -> str:
    return run._fmt(float(value) if isinstance(value, int) else value, digits)


def render_table(
    results: dict[str, dict[str, Any]], rows: list[tuple[str, float, str, str]], n: int
) -> str:
    out = [
        "",
        f"Peers: {n} three-step no-op workflows per system, admitted first, then drained by "
        "one worker process",
        f"  {'':<18}{'drain s':>9}{'wf/s':>8}{'steps/s':>9}{'commits/wf':>12}"
        f"{'(admit + drain)':>17}{'worker CPU ms/wf':>18}{'other CPU':>11}",
    ]
    for system in SYSTEMS:
        r = results.get(system)
        if not r:
            continue
        admit, drain_ = r["commits_admission"] / n, r["commits_drain"] / n
        out.append(
            f"  {LABELS[system].replace('`', ''):<18}{r['seconds']:>9.2f}{r['per_s']:>8.0f}"
            f"{r['per_s'] * STEPS:>9.0f}{r['commits_per_run']:>12.2f}"
            f"{f'{admit:.2f} + {drain_:.2f}':>17}{r['worker_cpu_ms']:>18.2f}"
            f"{r['other_cpu_pct']:>10.0f}%"
        )
    out += [
        "",
        "Latency at half capacity (open loop at half the drain rate), ms: to the first step "
        "p50 / p99, to completion p50 / p99",
    ]
    for system in SYSTEMS:
        lat = results.get(system, {}).get("latency")
        if lat:
            out.append(
                f"  {LABELS[system].replace('`', ''):<18}{lat['rate']:>7.1f}/s"
                f"{lat['first_p50']:>10.1f}{lat['first_p99']:>10.1f}"
                f"{lat['done_p50']:>10.1f}{lat['done_p99']:>10.1f}"
            )
    out += ["", f"  {'ratio':<56}{'measured':>10}  {'target':<14}verdict"]
    for what, value, target, verdict in rows:
        out.append(f"  {what:<56}{_f(value, 2):>10}  {target:<14}{verdict}")
    return "\n".join(out)


def versions() -> dict[str, str]:
    found = {}
    for package in PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def render_markdown(
    machine: dict[str, str],
    knobs: Knobs,
    results: dict[str, dict[str, Any]],
    rows: list[tuple[str, float, str, str]],
    packages: dict[str, str],
) -> str:
    m, n = machine, knobs.runs
    lines = [
        BEGIN,
        "## Peers (`make bench-peers`)",
        "",
        f"Written by `make bench-peers` (`python -m bench.peers`) on {m['date']}, code "
        f"{m['code']}; PostgreSQL {m['postgresql']}, Redis {m['redis']}, Python {m['python']}, "
        f"on {m['cpus']} × {m['cpu_model']} ({m['memory']}, load average {m['load_before']} at "
        "the start), shared by everything. Packages: "
        + ", ".join(f"{p} {v}" for p, v in packages.items())
        + ".",
        "",
    ]
    if n != DEFAULT_RUNS:
        lines += [
            f"**A reduced run: {n:,} workflows per system** (`BENCH_PEERS_RUNS={n}`; the "
            f"benchmark's size is {DEFAULT_RUNS:,}). Start-up, the first poll and the tail "
            "weigh more in a short drain: read these figures as a trial, not as the comparison.",
            "",
        ]
    lines += [
        "| system | workflows | drain s | workflows/s | steps/s | commits / workflow | "
        "of which admission | of which drain | worker CPU ms / workflow | other CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for system in SYSTEMS:
        r = results.get(system)
        if not r:
            continue
        lines.append(
            f"| {LABELS[system]} | {n:,} | {r['seconds']:.2f} | {r['per_s']:,.0f} | "
            f"{r['per_s'] * STEPS:,.0f} | {r['commits_per_run']:.2f} | "
            f"{r['commits_admission'] / n:.2f} | {r['commits_drain'] / n:.2f} | "
            f"{r['worker_cpu_ms']:.2f} | {r['other_cpu_pct']:.0f}% |"
        )
    lines += [
        "",
        "| latency at half capacity | arrivals/s (achieved) | workflows | to first step p50 ms "
        "| p99 ms | to completion p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for system in SYSTEMS:
        lat = results.get(system, {}).get("latency")
        if lat:
            lines.append(
                f"| {LABELS[system]} | {lat['rate']:.1f} ({lat['admit_per_s']:.1f}) | "
                f"{lat['workflows']:,} | "
                f"{lat['first_p50']:.1f} | {lat['first_p99']:.1f} | {lat['done_p50']:.1f} | "
                f"{lat['done_p99']:.1f} |"
            )
    lines += ["", "| target | measured | target | |", "|---|---:|---|---|"]
    for what, value, target, verdict in rows:
        shown = target.replace(">=", "≥").replace("<=", "≤")
        lines.append(f"| {what.replace(' x ', ' × ')} | {_f(value, 2)} | {shown} | {verdict} |")
    pc = results.get("procrastinate", {}).get("concurrency", knobs.procrastinate_concurrency)
    dc = results.get("dbos", {}).get("concurrency", knobs.dbos_concurrency)
    dt_ = results.get("dbos", {}).get("threads", knobs.dbos_threads)
    lines += [
        "",
        f"The same workload for each system, one after the other: {n:,} three-step no-op "
        "workflows with durable steps, admitted first with one library call each and no worker "
        "running, then drained by ONE worker process, each system in a scratch database of its "
        "own on the server above and configured as its documentation recommends for "
        "throughput. AwoooP: `noop-3`, admitted with the API channel's statement "
        "(`awooop.store.admission.admit`, no HTTP), one prefork process (`-c 1`, task events "
        "off). Procrastinate (`bench/peers_procrastinate.py`): three `async` jobs per "
        "workflow, each deferring the next (a job is its unit of durability), "
        f"`--concurrency={pc}` and a pool of {pc + 1} connections. DBOS Transact "
        "(`bench/peers_dbos.py`): an `async` workflow of three steps on a queue with "
        f"`worker_concurrency={dc}` and `max_executor_threads={dt_}`, as DBOS's own queue "
        "benchmark runs it. workflows/s: workflows / (first claim → last completion), on the "
        "database's clock; commits: `xact_commit` of the system's database after admission and "
        "after the drain, everything that committed in it included; worker CPU: the worker's "
        "process tree over the drain. Why each setting: [bench/NOTES.md](../bench/NOTES.md).",
        "",
        "Latency: after the drain, a worker of the same kind is started again, "
        f"{WARM_UP} workflows are run to warm it, then workflows arrive on a fixed schedule "
        "(open loop, one library call each, as in admission) at half the drain rate just "
        f"measured, for {knobs.latency_s} s. From each system's own records: admitted = the "
        "row its admission commits (AwoooP `created_at`, Procrastinate the first job's "
        "`deferred` event, DBOS `workflow_status.created_at`); first step started = AwoooP "
        "the journal's first entry (`recorded_at` less its `duration_ms`), Procrastinate the "
        "first job's `started` event, DBOS the first step's `started_at_epoch_ms`; completed "
        "= AwoooP `finished_at`, Procrastinate the third job's `succeeded` event, DBOS "
        "`completed_at`. The target: AwoooP's p50 to the first step at most "
        f"{TARGET_FIRST_STEP_P50_MS:.0f} ms and the lowest of the three.",
        "",
        "`make bench-peers` installs the `bench` extra (procrastinate and dbos, pinned in "
        "`constraints.txt`, never runtime dependencies) and runs `python -m bench.peers`. "
        "Knobs: `BENCH_PEERS_RUNS` (2000), `BENCH_PEERS_SYSTEMS`, "
        "`BENCH_PEERS_PROCRASTINATE_CONCURRENCY` (30), `BENCH_PEERS_DBOS_CONCURRENCY` "
        "(1000), `BENCH_PEERS_DBOS_THREADS` (512), `BENCH_PEERS_LATENCY_S` (10; 0 leaves the "
        "latency phase out), `BENCH_TIMEOUT`, `BENCH_KEEP=1`.",
        "",
        END,
    ]
    return "\n".join(lines) + "\n"


# --- main ----------------------------------------------------------------------------------


def main() -> int:
    import signal

    from awooop.config import ConfigError, Settings

    try:
        knobs = Knobs()
        unknown = set(knobs.systems) - set(SYSTEMS)
        if unknown:
            raise BenchError(
                f"BENCH_PEERS_SYSTEMS: unknown {', '.join(sorted(unknown))}; "
                f"known: {', '.join(SYSTEMS)}"
            )
        missing = [p for p in ("procrastinate", "dbos") if importlib.util.find_spec(p) is None]
        if missing:
            raise BenchError(
                f"{' and '.join(missing)} not installed: `make bench-peers` installs the "
                "bench extra (pip install -c constraints.txt -e '.[bench]')"
            )
        base = Settings.from_env()
    except (BenchError, ConfigError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2

    logdir = Path(tempfile.mkdtemp(prefix="awooop-bench-peers-"))
    log(f"process logs in {logdir}")
    procs: list[Proc] = []

    def on_timeout(*_: object) -> None:
        raise run.Timeout()

    def on_term(*_: object) -> None:
        raise KeyboardInterrupt()

    signal.signal(signal.SIGALRM, on_timeout)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(int(knobs.timeout))
    admin = create_engine(scratch.server_url(base.database_url), isolation_level="AUTOCOMMIT")
    ctx: Context | None = None
    try:
        try:
            broker = redis.Redis.from_url(base.broker_url, socket_timeout=10)
            broker.ping()
        except redis.RedisError as exc:
            raise BenchError(f"no Redis at AWOOOP_BROKER_URL: {exc}") from exc
        try:
            machine = run.machine_info(base.database_url, base.broker_url)
        except psycopg2.Error as exc:
            raise BenchError(f"no PostgreSQL at AWOOOP_DATABASE_URL: {exc}") from exc
        log(
            f"{machine['cpus']} CPUs ({machine['cpu_model']}), PostgreSQL "
            f"{machine['postgresql']}, Redis {machine['redis']}, load {machine['load_before']}"
        )
        packages = versions()
        log("packages: " + ", ".join(f"{p} {v}" for p, v in packages.items()))
        if "awooop" in knobs.systems:
            consumers = [
                c
                for c in broker.client_list()
                if c.get("cmd") in ("brpop", "blpop", "bzpopmin")
                and c.get("db") == str(broker.connection_pool.connection_kwargs.get("db", 0))
            ]
            if consumers:
                log(
                    f"warning: {len(consumers)} other client(s) are blocked reading lists on "
                    "this broker database (Celery workers?); they may take AwoooP's run messages"
                )
        noise = run.Noise(lambda: [p for proc in procs for p in proc.pids()])
        ctx = Context(knobs, base, admin, logdir, broker, noise, procs)
        results: dict[str, dict[str, Any]] = {}
        for system in SYSTEMS:
            if system in knobs.systems:
                log(f"--- {LABELS[system].replace('`', '')}")
                results[system] = BENCHES[system](ctx)

        rows = targets(results)
        print(render_table(results, rows, knobs.runs), flush=True)
        (logdir / "results.json").write_text(
            json.dumps(
                {"machine": machine, "packages": packages, "results": results},
                indent=2,
                default=str,
            )
        )
        if set(knobs.systems) != set(SYSTEMS) and "BENCH_OUTPUT" not in os.environ:
            log(f"only {','.join(knobs.systems)} ran: {knobs.output} left as it was")
            return 0
        retention.write_section(
            knobs.output,
            render_markdown(machine, knobs, results, rows, packages),
            begin=BEGIN,
            end=END,
        )
        log(f"wrote {knobs.output} (raw figures: {logdir}/results.json)")
        return 0
    except (BenchError, psycopg2.Error, redis.RedisError, run.Timeout, KeyboardInterrupt) as exc:
        return run.failed("bench", exc, "BENCH_TIMEOUT", knobs.timeout, logdir)
    finally:
        signal.alarm(0)
        for proc in reversed(procs):
            proc.stop()
        run.stop_all()
        if ctx is not None:
            with contextlib.suppress(redis.RedisError):
                run.purge_queue(ctx.broker, "runs")
            if knobs.keep:
                log(f"kept the scratch databases: {', '.join(ctx.databases)}")
            else:
                for name in ctx.databases:
                    try:
                        scratch.drop_database(admin, name)
                    except SQLAlchemyError as exc:  # reported; the others still go
                        log(f"could not drop {name}: {exc}")
                log(f"dropped the scratch databases: {', '.join(ctx.databases)}")
        admin.dispose()


if __name__ == "__main__":
    sys.exit(main())
