"""``make bench-capacity`` (``python -m bench.capacity``): what one unit of work costs (a
request, a run, a held lease), so a team can size a deployment (``docs/scaling.md``). The
phases: bench/NOTES.md.

Knobs: BENCH_CAPACITY_RUNS (2000), BENCH_CAPACITY_HOLD_RUNS ("8,32"),
BENCH_CAPACITY_WINDOW (s, 20), BENCH_CAPACITY_AMQP_URL, BENCH_CAPACITY_CEILING_SECONDS (15),
BENCH_CAPACITY_TIMEOUT (s, 900), BENCH_CAPACITY_OUTPUT (docs/scaling.md);
BENCH_CAPACITY_QUICK=1 or ``--quick``: tiny sizes, no ``-c 2`` phase, no markdown. The
figures go to ``.awooop/capacity.json`` and (not in quick mode) between the capacity markers
of the output file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import redis

from bench import database, load, procs, report
from bench.report import ROOT, BenchError, env_float, env_int, env_ints, fmt, log, table
from bench.workflows import HOLD

BEGIN, END = "<!-- capacity:begin -->", "<!-- capacity:end -->"
NEW_DOCUMENT = (
    "# Scaling\n\n"
    "What a deployment needs for a given load; the figures between the markers below are "
    "written by `make bench-capacity`.\n"
)
CONNECTIONS = 16
INGRESS_LIMIT_PER_MINUTE = 10_000_000  # asked on every request, never refuses
POLL_S = 0.2
FLUSH_S = 0.3  # a phase's backends have exited, and flushed their statistics, within this
HEARTBEAT_S = 1.0  # phase 3: many renewals per window; TTL and reaper interval only valid
HOLD_TIMINGS = {
    "AWOOOP_HEARTBEAT_INTERVAL_SECONDS": f"{HEARTBEAT_S:g}",
    "AWOOOP_LEASE_TTL_SECONDS": f"{10 * HEARTBEAT_S:g}",
    "AWOOOP_REAPER_INTERVAL_SECONDS": f"{5 * HEARTBEAT_S:g}",
}
IDLE_FLUSH_S = 10.0  # PostgreSQL's PGSTAT_IDLE_INTERVAL
DRAINED_STOP_S = 3.0  # a drained worker's time to stop before it is killed
CEILING_CLIENTS = 16
CEILING_TABLE = "bench_capacity_commit_probe"


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
            runs=env_int("BENCH_CAPACITY_RUNS", 100 if quick else 2000),
            hold_runs=env_ints("BENCH_CAPACITY_HOLD_RUNS", "4" if quick else "8,32"),
            window=env_float("BENCH_CAPACITY_WINDOW", 4 if quick else 20),
            amqp_url=os.environ.get(
                "BENCH_CAPACITY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//"
            ),
            timeout=env_float("BENCH_CAPACITY_TIMEOUT", 120 if quick else 900),
            output=ROOT / os.environ.get("BENCH_CAPACITY_OUTPUT", "docs/scaling.md"),
            ceiling_seconds=env_float("BENCH_CAPACITY_CEILING_SECONDS", 3 if quick else 15),
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
        return (1,) if self.quick else (1, 2)

    @property
    def settle_s(self) -> float:
        """Phase 3: from the last run RUNNING to the window; past IDLE_FLUSH_S the claims'
        statistics are in (quick mode: only until every keeper renewed once)."""
        return HEARTBEAT_S + 0.5 if self.quick else IDLE_FLUSH_S + 1.0

    @property
    def web_workers(self) -> dict[str, str]:
        return {"AWOOOP_WEB_WORKERS": "2"} if self.quick else {}

    @property
    def start_spread_s(self) -> float:
        """Phase 3: how far apart the first and the last run may start (the hold covers it)."""
        return 1.5 if self.quick else 10.0


# --- CPU ---------------------------------------------------------------------------------------


@dataclass
class Snapshot:
    cpu: dict[str, float]  # CPU seconds so far, by what is measured
    machine: procs.Sample
    ours: set[int]  # the processes the bench runs (and RabbitMQ's), alive at the snapshot
    at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Interval:
    """What happened between two snapshots."""

    cpu: dict[str, float]
    seconds: float
    other_cpu_pct: float
    io_cpu_pct: float

    def ms_per(self, name: str, count: float) -> float | None:
        if name not in self.cpu or count <= 0:
            return None
        return self.cpu[name] * 1000 / count


@dataclass(frozen=True)
class Broker:
    """The broker a phase's processes use: their environment, how to empty ``runs``."""

    name: str  # "Redis" or "RabbitMQ"
    env: dict[str, str]
    purge: Callable[[], int]
    version: str
    consumers: Callable[[], int]  # clients already consuming its queues


def redis_broker(url: str) -> Broker:
    client = redis.Redis.from_url(url, socket_timeout=10)
    version = str(client.info("server").get("redis_version", "?"))
    return Broker(
        "Redis",
        {},
        lambda: database.purge_queue(client),
        version,
        lambda: sum(1 for c in client.client_list() if c.get("cmd") in ("brpop", "blpop")),
    )


def rabbitmq_broker(amqp_url: str, rate_limit_url: str) -> Broker | None:
    """RabbitMQ at ``amqp_url``; None when it does not answer (logged)."""
    import kombu
    from kombu.utils.url import sanitize_url

    try:
        with kombu.Connection(amqp_url, connect_timeout=5) as conn:
            conn.ensure_connection(max_retries=1)
            version = (getattr(conn.connection, "server_properties", {}) or {}).get("version", "?")
            version = version.decode() if isinstance(version, bytes) else version
    except Exception as exc:  # any failure to connect means "skip"
        log(f"RabbitMQ phases skipped: no answer at {sanitize_url(amqp_url)} ({exc})")
        return None

    def on_runs(act: Callable[[Any], Any]) -> int:
        with kombu.Connection(amqp_url, connect_timeout=5) as conn:
            try:
                return int(act(conn.channel()) or 0)
            except conn.channel_errors:  # no such queue yet
                return 0

    return Broker(
        "RabbitMQ",
        {"AWOOOP_BROKER_URL": amqp_url, "AWOOOP_RATE_LIMIT_REDIS_URL": rate_limit_url},
        lambda: on_runs(lambda ch: ch.queue_purge("runs")),
        str(version),
        lambda: on_runs(lambda ch: ch.queue_declare("runs", passive=True).consumer_count),
    )


@dataclass
class Bench:
    knobs: Knobs
    settings: Any
    logdir: Path
    tokens: dict[str, str]
    postgres_pid: int | None
    redis_pids: list[int]

    @property
    def url(self) -> str:
        return str(self.settings.database_url)

    def sources(self, broker: Broker, **measured: procs.Proc) -> dict[str, Callable[[], float]]:
        """What a phase measures the CPU of: its processes, PostgreSQL's tree, Redis,
        RabbitMQ (when it is the broker) and this process (the load, the polling)."""
        out: dict[str, Callable[[], float]] = {n: p.cpu_seconds for n, p in measured.items()}
        me = os.getpid()
        out["bench"] = lambda: procs.cpu_seconds(me)
        if (pg := self.postgres_pid) is not None:
            out["postgres"] = lambda: sum(map(procs.cpu_seconds, procs.tree(pg)))
        if self.redis_pids:
            out["redis"] = lambda: sum(map(procs.cpu_seconds, self.redis_pids))
        if broker.name == "RabbitMQ" and (rabbits := procs.rabbitmq_pids()):
            out["rabbitmq"] = lambda: sum(
                procs.cpu_seconds(p) for r in rabbits for p in procs.tree(r)
            )
        return out

    def snapshot(self, sources: dict[str, Callable[[], float]]) -> Snapshot:
        ours = set(procs.running_pids()) | {os.getpid()}
        ours |= {p for r in procs.rabbitmq_pids() for p in procs.tree(r)}
        return Snapshot({n: read() for n, read in sources.items()}, self.noise.sample(), ours)

    def between(self, a: Snapshot, b: Snapshot) -> Interval:
        # Whose processes were ours is read at the snapshots: a phase's worker may be stopped
        # by the time its interval is computed (it would count as other CPU otherwise).
        split = procs.split(a.machine, b.machine, a.ours | b.ours)
        cpu = {n: b.cpu[n] - a.cpu[n] for n in a.cpu}
        return Interval(cpu, b.at - a.at, split["other"], split["io"])

    noise: procs.Noise = field(default_factory=lambda: procs.Noise(procs.running_pids))


def hold_env() -> dict[str, str]:
    """Phase 3's processes: the bench workflows registered, the short lease timings."""
    modules = [os.environ.get("AWOOOP_WORKFLOW_MODULES", ""), "bench.workflows"]
    return {"AWOOOP_WORKFLOW_MODULES": ",".join(m for m in modules if m), **HOLD_TIMINGS}


def admit(web: procs.Web, label: str, source: load.Source, n: int, spread: bool = True) -> Any:
    """``n`` requests over CONNECTIONS connections; every one must be answered 202. Runs
    merely queued for a later phase go as accepted (``spread`` False)."""
    result = web.run(source, CONNECTIONS, spread=spread, timeout=max(60.0, n / 50))
    if (accepted := result.statuses.get(202, 0)) != n:
        raise web.failure(
            f"{label}: {accepted}/{n} requests answered 202 ({dict(result.statuses)}, "
            f"{result.errors} dropped)"
        )
    return result


def admit_with_fresh_web(
    b: Bench, label: str, broker: Broker, source: load.Source, n: int, **env: str
) -> None:
    """Start a web (one gunicorn worker: its CPU is not measured), admit ``n`` runs, stop it."""
    env = {"AWOOOP_WEB_WORKERS": "1", **broker.env, **env}
    with procs.started(procs.Web(f"web-{label}", b.logdir, **env)) as web:
        result = admit(web.wait(), label, source, n, spread=False)
    time.sleep(FLUSH_S)
    log(f"{label}: admitted {n} runs ({result.rps:.0f} req/s), web stopped")


def counts(url: str) -> database.Counts:
    with database.connect(url) as conn:
        return database.server_counts(conn)


def cpu_fields(interval: Interval, count: float, *names: str) -> dict[str, Any]:
    return {f"{n}_cpu_ms": interval.ms_per(n, count) for n in names} | {
        "other_cpu_pct": interval.other_cpu_pct,
        "io_cpu_pct": interval.io_cpu_pct,
    }


# --- 1. admission ------------------------------------------------------------------------------


def measure_admission(b: Bench, broker: Broker, project_id: str, batch: str) -> dict[str, Any]:
    """Phase 1; then the same web admits the first execution batch (into ``batch``)."""
    n, warm = b.knobs.runs, b.knobs.warmup_requests
    broker.purge()
    database.vacuum_runs(b.url)
    counts0 = counts(b.url)
    name = f"web-admission-{broker.name.lower()}"
    with procs.started(procs.Web(name, b.logdir, **b.knobs.web_workers, **broker.env)) as web:
        web.wait()
        prefix = os.urandom(4).hex()

        def source(project: str, part: str, limit: int) -> load.Source:
            return load.events(b.tokens, [project], load.unique_keys(f"{prefix}-{part}"), limit)

        admit(web, "admission warm-up", source(project_id, "w", warm), warm)
        sources = b.sources(broker, web=web)
        before = b.snapshot(sources)
        result = admit(web, "admission", source(project_id, "m", n), n)
        interval = b.between(before, b.snapshot(sources))
        purged = broker.purge()
        admit(web, "first execution batch", source(batch, "b", n), n, spread=False)
    time.sleep(FLUSH_S)
    delta = counts(b.url) - counts0
    info: dict[str, Any] = {
        "broker": broker.name,
        "connections": CONNECTIONS,
        "requests": n,
        "warmup_requests": warm,
        "req_per_s": result.rps,
        "p50_ms": result.p50,
        "p99_ms": result.p99,
        **cpu_fields(interval, n, "web", "postgres", "redis", "rabbitmq"),
        "commits": delta.commits,
        # Every request the web answered: warm-up, measured, and the execution batch.
        "commits_per_request": delta.commits / (warm + 2 * n),
        "other_databases_commits": delta.other_commits,
        "purged_messages": purged,
    }
    log(
        f"admission ({broker.name}): {n} requests, {result.rps:.0f} req/s, web "
        f"{fmt(info['web_cpu_ms'], 2)} / PostgreSQL {fmt(info['postgres_cpu_ms'], 2)} / Redis "
        f"{fmt(info['redis_cpu_ms'], 2)}"
        + (f" / RabbitMQ {fmt(info['rabbitmq_cpu_ms'], 2)}" if broker.name == "RabbitMQ" else "")
        + f" CPU ms per request, {info['commits_per_request']:.2f} commits per request; "
        f"purged {purged} messages; {procs.noise_text(info)}; then admitted "
        f"{n} runs for the execution phase"
    )
    return info


# --- 2. execution ------------------------------------------------------------------------------


def measure_execution(
    b: Bench, broker: Broker, project_id: str, concurrency: int, queued: bool = False
) -> dict[str, Any]:
    """Phase 2 with ``concurrency`` worker processes; ``queued``: the runs were admitted (and
    their messages queued) by the admission phase's web."""
    n = b.knobs.runs
    label = f"execution-{broker.name.lower()}-c{concurrency}"
    if not queued:
        broker.purge()
        admit_with_fresh_web(b, label, broker, load.events(b.tokens, [project_id], limit=n), n)
    database.vacuum_runs(b.url)
    counts0 = counts(b.url)
    progress = database.Progress.runs(b.url, [project_id])
    worker = procs.start_worker(f"worker-{label}", b.logdir, concurrency, **broker.env)
    try:
        sources = b.sources(broker, worker=worker)
        # CPU once the worker is warm: from a tenth of the runs done to the last.
        marks = progress.drain(n, worker, lambda: b.snapshot(sources), POLL_S)
        seconds = progress.span()
    finally:
        progress.close()
        worker.stop(DRAINED_STOP_S)
    time.sleep(FLUSH_S)
    delta = counts(b.url) - counts0
    (warm, done0), (end, done1) = marks
    measured = done1 - done0
    interval = b.between(warm, end)
    info: dict[str, Any] = {
        "broker": broker.name,
        "worker_processes": concurrency,
        "runs": n,
        "runs_per_s": n / seconds if seconds > 0 else float("nan"),
        "seconds": seconds,
        "cpu_measured_runs": measured,
        **cpu_fields(interval, measured, "worker", "postgres", "redis", "rabbitmq"),
        "commits": delta.commits,
        "commits_per_run": delta.commits / n,
        "other_databases_commits": delta.other_commits,
    }
    log(
        f"execution ({broker.name}, -c {concurrency}): {n} runs in {seconds:.2f} s = "
        f"{info['runs_per_s']:.0f} runs/s; worker {fmt(info['worker_cpu_ms'], 2)} / PostgreSQL "
        f"{fmt(info['postgres_cpu_ms'], 2)} CPU ms per run (over {measured} warm runs), "
        f"{info['commits_per_run']:.2f} commits per run; {procs.noise_text(info)}"
    )
    return info


# --- 3. lease keeping --------------------------------------------------------------------------


def wait_all_running(
    progress: database.Progress, worker: procs.Proc, n: int, spread: float
) -> None:
    """Until ``n`` runs are RUNNING; the worker's start is allowed a minute, and the last run
    must start within ``spread`` of the first (the hold covers that much)."""
    deadline = time.monotonic() + 60.0 + n
    first: float | None = None
    while (running := progress.counts()[3]) < n:
        now = time.monotonic()
        first = first if first is not None or not running else now
        worker.check()
        if now > deadline or (first is not None and now - first > spread):
            when = f"{now - first:.1f} s after the first" if first else "after a minute"
            raise worker.failure(f"only {running}/{n} runs RUNNING {when}")
        time.sleep(POLL_S)


def measure_lease_keeping(b: Bench, broker: Broker, project_id: str, n: int) -> dict[str, Any]:
    from awooop.config import Settings

    knobs, window = b.knobs, b.knobs.window
    # Every run is still holding when the window ends, however late in the spread it started.
    hold = knobs.start_spread_s + knobs.settle_s + window + 1.0
    label = f"hold-{n}"
    broker.purge()
    database.vacuum_runs(b.url)
    body = json.dumps({"summary": "capacity bench: hold the run", "hold": hold}).encode()
    source = load.events(b.tokens, [project_id], limit=n, body=body)
    admit_with_fresh_web(b, label, broker, source, n, **hold_env())
    metrics_dir = b.logdir / f"metrics-{label}"
    metrics_dir.mkdir()
    progress = database.Progress.runs(b.url, [project_id])
    worker = procs.start_worker(
        f"worker-{label}",
        b.logdir,
        n,
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
        **broker.env,
        **hold_env(),
    )

    def renewals(*outcomes: str) -> float:
        name = "awooop_lease_renewals_total"
        return sum(database.metric_sum(metrics_dir, name, outcome=o) for o in outcomes)

    try:
        wait_all_running(progress, worker, n, knobs.start_spread_s)
        time.sleep(knobs.settle_s)
        sources = b.sources(broker, worker=worker)
        # One connection for both readings: no backend start inside the window.
        with database.connect(b.url) as conn:
            counts0, renewed0 = database.server_counts(conn), renewals("renewed")
            before = b.snapshot(sources)
            time.sleep(window)
            interval = b.between(before, b.snapshot(sources))
            renewed1, counts1 = renewals("renewed"), database.server_counts(conn)
        if (still := progress.counts()[3]) != n:
            raise worker.failure(
                f"{label}: {still}/{n} runs RUNNING at the end of the window (the hold, "
                f"{hold:.0f} s, should outlast it)"
            )
        progress.wait(n, [worker], hold + 30.0, poll=POLL_S)
    finally:
        progress.close()
        worker.stop(DRAINED_STOP_S)
    lost = renewals("lost", "error")
    seconds, delta = interval.seconds, counts1 - counts0
    renewed = renewed1 - renewed0
    renewals_per_s = renewed / seconds
    liveness = b.settings.worker_liveness_interval_seconds  # the worker's too
    liveness_per_s = n / liveness  # one row per worker process (-c n: n processes)
    commits_per_s = delta.commits / seconds
    postgres_ms_per_s = interval.ms_per("postgres", seconds)
    postgres_ms = float("nan") if postgres_ms_per_s is None else postgres_ms_per_s
    writes_per_s = renewals_per_s + liveness_per_s
    default = Settings()
    beat, every = default.heartbeat_interval_seconds, default.worker_liveness_interval_seconds
    default_writes = n / beat + n / every
    info: dict[str, Any] = {
        "runs": n,
        "worker_processes": n,
        "heartbeat_s": HEARTBEAT_S,
        "liveness_interval_s": liveness,
        "hold_s": hold,
        "window_s": seconds,
        "renewals": renewed,
        "renewals_per_s": renewals_per_s,
        "renewals_per_run_per_heartbeat": renewed / (n * seconds / HEARTBEAT_S),
        "renewals_lost_or_failed": lost,
        "liveness_writes_per_s": liveness_per_s,
        "commits": delta.commits,
        "commits_per_s": commits_per_s,
        "write_transactions_per_s": delta.next_xid / seconds,
        "other_databases_commits": delta.other_commits,
        "other_databases_commits_per_s": delta.other_commits / seconds,
        "postgres_cpu_ms_per_s": postgres_ms_per_s,
        "worker_cpu_ms_per_s": interval.ms_per("worker", seconds),
        "commits_per_write": commits_per_s / writes_per_s,
        "postgres_cpu_ms_per_write": postgres_ms / writes_per_s,
        "other_cpu_pct": interval.other_cpu_pct,
        "io_cpu_pct": interval.io_cpu_pct,
        "default": {
            "heartbeat_s": beat,
            "liveness_interval_s": every,
            "renewals_per_s": n / beat,
            "liveness_writes_per_s": n / every,
            "commits_per_s": default_writes * commits_per_s / writes_per_s,
            "postgres_cpu_ms_per_s": default_writes * postgres_ms / writes_per_s,
        },
    }
    log(
        f"lease keeping, {n} runs: {renewed:.0f} renewals in {seconds:.1f} s = "
        f"{info['renewals_per_run_per_heartbeat']:.2f} per run per heartbeat; "
        f"{commits_per_s:.1f} commits/s ({info['write_transactions_per_s']:.1f} write "
        f"transactions/s on the server; other databases: "
        f"{info['other_databases_commits_per_s']:.1f} commits/s), PostgreSQL "
        f"{fmt(postgres_ms_per_s, 2)} / worker {fmt(info['worker_cpu_ms_per_s'], 2)} CPU ms/s; "
        f"lost or failed renewals {lost:.0f}; {procs.noise_text(info)}"
    )
    return info


# --- 5. commit ceiling -------------------------------------------------------------------------


def pgbench_path() -> str | None:
    """The server's ``pgbench`` (PATH or Debian's versioned directory), else the ``pgserver``
    wheel's (the embedded development server)."""
    if found := shutil.which("pgbench"):
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
    """Durable single-row commits/s the server takes from CEILING_CLIENTS clients."""
    binary = pgbench_path()
    if binary is None:
        log("commit ceiling: no pgbench found (PATH, /usr/lib/postgresql/*/bin, pgserver); skipped")
        return None
    dsn = psycopg2.extensions.parse_dsn(database.libpq_url(url))
    script = logdir / "commit_probe.sql"
    script.write_text(f"INSERT INTO {CEILING_TABLE} (at) VALUES (now());\n")
    database.query(
        url, f"CREATE TABLE IF NOT EXISTS {CEILING_TABLE} (id bigserial, at timestamptz)"
    )
    argv = [binary, "-n", "-c", str(CEILING_CLIENTS), "-j", "2", "-T", f"{seconds:.0f}"]
    env = {**os.environ, "PGHOST": dsn.get("host", "127.0.0.1"), "PGPORT": dsn.get("port", "5432")}
    env.update(PGUSER=dsn.get("user", "postgres"), PGDATABASE=dsn.get("dbname", "postgres"))
    if dsn.get("password"):
        env["PGPASSWORD"] = dsn["password"]
    log(f"commit ceiling: {binary} with {CEILING_CLIENTS} clients for {seconds:.0f} s")
    try:
        done = subprocess.run(
            [*argv, "-f", str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
        [(fsync, synchronous_commit)] = database.query(
            url, "SELECT current_setting('fsync'), current_setting('synchronous_commit')"
        )
    finally:
        database.query(url, f"DROP TABLE IF EXISTS {CEILING_TABLE}")
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


# --- report ------------------------------------------------------------------------------------


def cpu(r: dict[str, Any], side: str) -> str:
    return " | ".join(fmt(r[f"{n}_cpu_ms"], 2) for n in (side, "postgres", "redis", "rabbitmq"))


def render_block(results: dict[str, Any]) -> str:
    """The markdown written between the capacity markers (and printed)."""
    m, k = results["machine"], results["knobs"]
    lines = [
        f"Measured by `{results['command']}` on {m['date']}: {m['cpus']} × {m['cpu_model']}, "
        f"PostgreSQL {m['postgresql']}, Redis {m['redis']}"
        + (f", RabbitMQ {results['rabbitmq']}" if results.get("rabbitmq") else "")
        + f"; code {m['code']}. Everything shares these CPUs. PostgreSQL CPU is the whole "
        "server's (other databases on it count too; sessions on it at the start: "
        f'{_sessions(results["sessions_at_start"])}); "other CPU" is the share of all CPUs '
        'used by user-space processes not measured here, "I/O CPU" the kernel threads\' share.',
        "",
        f"**Admission**, per request: `POST /v1/projects/{{p}}/runs` (API channel, `noop-3`, new "
        f"events), {CONNECTIONS} keep-alive connections, no worker running, "
        f"{k['runs']} requests after {k['warmup_requests']} "
        "warm-up requests. Each project has an ingress rate limit far above the load, so each "
        "request also counts in Redis; RabbitMQ rows: RabbitMQ is the broker, the rate "
        "limiter stays on Redis. Commits: over every request the web answered (the warm-up, "
        "the measured ones, and the execution phase's first batch; its start included).",
        "",
        *table(
            "broker | req/s | web CPU ms | PostgreSQL CPU ms | Redis CPU ms | RabbitMQ CPU ms "
            "| commits | other CPU | I/O CPU",
            [
                f"{r['broker']} | {r['req_per_s']:,.0f} | {cpu(r, 'web')} | "
                f"{r['commits_per_request']:.2f} | {report.noise_cells(r)}"
                for r in results["admission"]
            ],
        ),
        "",
        f"**Execution** of a `noop-3` run (3 steps), per run: {k['runs']} runs "
        "admitted with no worker, then one prefork worker (`-c 1`, or `-c 2`: two processes) "
        "drains them. runs/s: from the first claim to the last completion (database clock). "
        "CPU: from the first tenth of the runs completed to the last (warm processes). "
        "Commits: the execution alone (admission not included).",
        "",
        *table(
            "broker | worker processes | runs/s | worker CPU ms | PostgreSQL CPU ms | Redis CPU ms "
            "| RabbitMQ CPU ms | commits | other CPU | I/O CPU",
            [
                f"{r['broker']} | {r['worker_processes']} | {r['runs_per_s']:,.0f} | "
                f"{cpu(r, 'worker')} | {r['commits_per_run']:.2f} | {report.noise_cells(r)}"
                for r in results["execution"]
            ],
        ),
    ]
    if results.get("rabbitmq") is None:
        lines += ["", "RabbitMQ was not reachable: its rows are missing."]
    lines += [
        "",
        lease_paragraph(results),
        "",
        *table(
            "N | renewals per run per heartbeat | commits/s | xids/s | PostgreSQL CPU ms/s "
            "| worker CPU ms/s | default: writes/s | default: commits/s | default: PostgreSQL CPU "
            "ms/s",
            [
                f"{r['runs']} | {r['renewals_per_run_per_heartbeat']:.2f} | "
                f"{r['commits_per_s']:.1f} | {r['write_transactions_per_s']:.1f} | "
                f"{fmt(r['postgres_cpu_ms_per_s'], 1)} | {fmt(r['worker_cpu_ms_per_s'], 1)} | "
                f"{d['renewals_per_s'] + d['liveness_writes_per_s']:.2f} | "
                f"{d['commits_per_s']:.2f} | {fmt(d['postgres_cpu_ms_per_s'], 1)}"
                for r in results["lease_keeping"]
                if (d := r["default"])
            ],
            "r" * 9,
        ),
        "",
    ]
    if ceiling := results.get("commit_ceiling"):
        lines.append(
            f"**PostgreSQL's commit ceiling**: {ceiling['commits_per_s']:,.0f} commits/s — "
            f"`pgbench` with {ceiling['clients']} clients for {ceiling['seconds']:g} s, each "
            "transaction one single-row `INSERT` into a scratch table of this database "
            f"(`fsync={ceiling['fsync']}`, `synchronous_commit={ceiling['synchronous_commit']}`,"
            " as the server is configured), with nothing else of the bench running."
        )
    else:
        lines.append("**PostgreSQL's commit ceiling**: not measured (no `pgbench`).")
    lines += [""] + [f"- {note}" for note in results.get("notes", [])]
    return "\n".join(lines).rstrip("\n") + "\n"


def replace_block(current: str | None, block: str) -> str:
    """The document with the text between the capacity markers replaced by ``block``, and
    everything outside them kept; none yet (None): a title, one sentence and the markers."""
    section = f"{BEGIN}\n{block.strip(chr(10))}\n{END}"
    return report.place_between(NEW_DOCUMENT if current is None else current, section, BEGIN, END)


def write_block(path: Path, block: str) -> None:
    report.write_between(path, f"{BEGIN}\n{block.strip(chr(10))}\n{END}", BEGIN, END, NEW_DOCUMENT)


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
    rows = [(f"admission ({r['broker']})", r) for r in results["admission"]]
    rows += [
        (f"execution ({r['broker']}, {r['worker_processes']} processes)", r)
        for r in results["execution"]
    ]
    rows += [(f"lease keeping (N = {r['runs']})", r) for r in results["lease_keeping"]]
    return [
        f"{label}: other databases on the server committed {r['other_databases_commits']} "
        f"transactions meanwhile (this database: {r['commits']}); its PostgreSQL CPU includes "
        "their work"
        for label, r in rows
        if r["other_databases_commits"] > r["commits"] / 20
    ]


def _sessions(sessions: dict[str, int]) -> str:
    return ", ".join(f"{n} on `{db}`" for db, n in sorted(sessions.items())) or "none"


# --- main --------------------------------------------------------------------------------------


def command_line(quick_flag: bool) -> str:
    """How this run was started: the make target (make sets MAKELEVEL) or the module, with
    the BENCH_CAPACITY_* knobs set."""
    knobs = [
        f"{k}={shlex.quote(v)}"
        for k, v in sorted(os.environ.items())
        if k.startswith("BENCH_CAPACITY_") and k != "BENCH_CAPACITY_AMQP_URL"
    ]
    command = report.invoked_as("bench-capacity", "bench.capacity")
    return " ".join([*knobs, command] + (["--quick"] if quick_flag else []))


def run_phases(
    b: Bench, redis_: Broker, rabbit: Broker | None, ids: dict[str, str]
) -> dict[str, Any]:
    results: dict[str, Any] = {"admission": [], "execution": [], "lease_keeping": []}
    for broker, concurrencies in ((redis_, b.knobs.concurrencies), (rabbit, (1,))):
        if broker is None:
            continue
        key = broker.name.lower()
        first = ids[f"c1-{key}"]
        results["admission"].append(measure_admission(b, broker, ids[f"adm-{key}"], first))
        results["execution"].append(measure_execution(b, broker, first, 1, queued=True))
        for c in concurrencies[1:]:
            results["execution"].append(measure_execution(b, broker, ids[f"c{c}-{key}"], c))
        if broker is redis_:
            for n in b.knobs.hold_runs:
                results["lease_keeping"].append(
                    measure_lease_keeping(b, broker, ids[f"hold-{n}"], n)
                )
    results["commit_ceiling"] = measure_commit_ceiling(b.url, b.knobs.ceiling_seconds, b.logdir)
    return results


def configure(quick: bool) -> tuple[Knobs, Any]:
    from awooop.config import Settings

    knobs, settings = Knobs.from_env(quick), Settings.from_env()
    if not settings.broker_url.startswith(("redis://", "rediss://")):
        raise BenchError(
            "AWOOOP_BROKER_URL must be Redis (phases 1-3 measure it; RabbitMQ is "
            "BENCH_CAPACITY_AMQP_URL)"
        )
    return knobs, settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes; no markdown written")
    args = parser.parse_args(argv)
    knobs, settings = report.configure("bench-capacity", lambda: configure(args.quick))
    url = settings.database_url
    tag = f"cap-{time.strftime('%Y%m%d%H%M%S')}-{os.urandom(2).hex()}"
    ids: dict[str, str] = {}
    brokers: list[Broker] = []
    try:
        with report.session("capacity", knobs.timeout, "BENCH_CAPACITY_TIMEOUT") as logdir:
            if knobs.quick:
                log("quick mode: tiny sizes, no markdown")
            machine = report.machine_info(url, settings.broker_url)
            brokers.append(redis_ := redis_broker(settings.broker_url))
            postgres_pid = procs.postgres_server_pid(url)
            query = (
                "SELECT coalesce(datname, '?'), count(*) FROM pg_stat_activity"
                " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() GROUP BY 1"
            )
            sessions = {str(db): int(n) for db, n in database.query(url, query)}
            redises = (
                redis.Redis.from_url(u) for u in (settings.broker_url, settings.rate_limit_url)
            )
            redis_pids = sorted({p for r in redises for p in procs.redis_pids(r)})
            absent = "does not run on this machine: its CPU is not measured"
            notes = [f"Redis {absent}"] * (not redis_pids)
            if postgres_pid is None:
                notes.insert(
                    0,
                    "PostgreSQL does not run on this machine (or not in this process "
                    "namespace): its CPU is not measured",
                )
            log(
                f"PostgreSQL server pid {postgres_pid}, Redis pid {redis_pids}; "
                f"{database.sessions(url)} other sessions on this database; on the server: "
                f"{_sessions(sessions)}"
            )
            rabbit = rabbitmq_broker(knobs.amqp_url, settings.rate_limit_url)
            if rabbit is not None:
                brokers.append(rabbit)
                notes += [f"RabbitMQ {absent}"] * (not procs.rabbitmq_pids())
            for broker in brokers:
                if broker.consumers():
                    log(
                        f"warning: {broker.name} has other consumers of the bench's queues "
                        "(Celery workers?); they may take the bench's run messages"
                    )
            roles = ["adm-redis"] + [f"c{c}-redis" for c in knobs.concurrencies]
            roles += ["adm-rabbitmq", "c1-rabbitmq"] if rabbit is not None else []
            holds = [f"hold-{n}" for n in knobs.hold_runs]
            ids = {role: f"{tag}-{role}" for role in roles + holds}
            limits: dict[str, int | None] = {"ingress_per_minute": INGRESS_LIMIT_PER_MINUTE}
            tokens = database.create_projects(url, [ids[r] for r in roles], limits=limits)
            hold_ids = [ids[h] for h in holds]
            tokens |= database.create_projects(url, hold_ids, {"api": HOLD}, limits)
            log(f"projects {tag}-* created ({len(ids)})")
            b = Bench(knobs, settings, logdir, tokens, postgres_pid, redis_pids)
            results = run_phases(b, redis_, rabbit, ids)
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
                notes=notes + contention_notes(results),
            )
            print(render_block(results), flush=True)
            knobs.json_path.parent.mkdir(parents=True, exist_ok=True)
            knobs.json_path.write_text(json.dumps(results, indent=2, default=str) + "\n")
            log(f"wrote {knobs.json_path}")
            if knobs.quick:
                log(f"quick mode: {knobs.output} left as it was")
            else:
                write_block(knobs.output, render_block(results))
    finally:
        for broker in brokers:
            with contextlib.suppress(Exception):
                broker.purge()
        if ids:
            database.delete_projects(url, list(ids.values()), tag)


if __name__ == "__main__":
    main()
