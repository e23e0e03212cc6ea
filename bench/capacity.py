"""``make bench-capacity`` (``python -m bench.capacity``): what one unit of work costs (a
request, a run, a held lease) and PostgreSQL's commit ceiling, so a team can size a
deployment (``docs/scaling.md``). How it measures: bench/NOTES.md.

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
import functools
import json
import os
import re
import shutil
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
METHOD = "[bench/NOTES.md](../bench/NOTES.md#make-bench-capacity-benchcapacitypy)"
CONNECTIONS = 16
INGRESS_LIMIT_PER_MINUTE = 10_000_000  # asked on every request, never refuses
POLL_S = 0.2
FLUSH_S = 0.3  # a phase's backends have exited, and flushed their statistics, within this
HEARTBEAT_S = 1.0  # lease keeping: many renewals per window; TTL and reaper interval to match
HOLD_TIMINGS = {
    "AWOOOP_HEARTBEAT_INTERVAL_SECONDS": f"{HEARTBEAT_S:g}",
    "AWOOOP_LEASE_TTL_SECONDS": f"{10 * HEARTBEAT_S:g}",
    "AWOOOP_REAPER_INTERVAL_SECONDS": f"{5 * HEARTBEAT_S:g}",
}
IDLE_FLUSH_S = 10.0  # PostgreSQL's PGSTAT_IDLE_INTERVAL
CEILING_CLIENTS = 16
CEILING_TABLE = "bench_capacity_commit_probe"
LIBPQ_ENV = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "dbname": "PGDATABASE"}


@dataclass(frozen=True)
class Knobs:
    quick: bool
    runs: int
    warmup_requests: int
    hold_runs: tuple[int, ...]
    window: float
    settle: float  # lease keeping: from the last run RUNNING to the window
    start_spread_s: float  # lease keeping: the most the last run may start after the first
    concurrencies: tuple[int, ...]
    web_workers: dict[str, str]
    amqp_url: str
    timeout: float
    output: Path
    ceiling_seconds: float
    json_path: Path = ROOT / ".awooop" / "capacity.json"

    @classmethod
    def from_env(cls, quick: bool) -> Knobs:
        quick = quick or report.is_quick("BENCH_CAPACITY_QUICK")
        runs = env_int("BENCH_CAPACITY_RUNS", 100 if quick else 2000)
        window = env_float("BENCH_CAPACITY_WINDOW", 4 if quick else 20)
        if runs < 20:
            raise BenchError("BENCH_CAPACITY_RUNS must be at least 20")
        if window <= 2 * HEARTBEAT_S:
            raise BenchError(f"BENCH_CAPACITY_WINDOW must exceed {2 * HEARTBEAT_S:g} s")
        return cls(
            quick=quick,
            runs=runs,
            warmup_requests=max(20, min(200, runs // 5)),
            hold_runs=env_ints("BENCH_CAPACITY_HOLD_RUNS", "4" if quick else "8,32"),
            window=window,
            # Past IDLE_FLUSH_S the claims' statistics are in (quick: every keeper renewed once).
            settle=HEARTBEAT_S + 0.5 if quick else IDLE_FLUSH_S + 1.0,
            start_spread_s=1.5 if quick else 10.0,
            concurrencies=(1,) if quick else (1, 2),
            web_workers={"AWOOOP_WEB_WORKERS": "2"} if quick else {},
            amqp_url=os.environ.get(
                "BENCH_CAPACITY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//"
            ),
            timeout=env_float("BENCH_CAPACITY_TIMEOUT", 120 if quick else 900),
            output=report.output("docs/scaling.md", "BENCH_CAPACITY_OUTPUT"),
            ceiling_seconds=env_float("BENCH_CAPACITY_CEILING_SECONDS", 3 if quick else 15),
        )


# --- brokers and CPU ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Broker:
    """The broker a phase's processes use: their environment, how to empty ``runs``."""

    name: str  # "Redis" or "RabbitMQ"
    purge: Callable[[], int]
    env: dict[str, str] = field(default_factory=dict)
    version: str = ""


def rabbitmq_broker(amqp_url: str, rate_limit_url: str) -> Broker | None:
    """RabbitMQ at ``amqp_url``, the rate limiter left on Redis; None when it does not answer
    (logged). A warning when something already consumes its ``runs`` queue."""
    import kombu
    from kombu.utils.url import sanitize_url

    try:
        with kombu.Connection(amqp_url, connect_timeout=5) as conn:
            conn.ensure_connection(max_retries=1)
            version = (getattr(conn.connection, "server_properties", {}) or {}).get("version", "?")
    except Exception as exc:  # any failure to connect means "skip"
        log(f"RabbitMQ phases skipped: no answer at {sanitize_url(amqp_url)} ({exc})")
        return None

    def on_runs(act: Callable[[Any], Any]) -> int:
        with kombu.Connection(amqp_url, connect_timeout=5) as conn:
            try:
                return int(act(conn.channel()) or 0)
            except conn.channel_errors:  # no such queue yet
                return 0

    if on_runs(lambda ch: ch.queue_declare("runs", passive=True).consumer_count):
        log("warning: RabbitMQ's runs queue has other consumers; they may take the bench's runs")
    return Broker(
        "RabbitMQ",
        lambda: on_runs(lambda ch: ch.queue_purge("runs")),
        {"AWOOOP_BROKER_URL": amqp_url, "AWOOOP_RATE_LIMIT_REDIS_URL": rate_limit_url},
        version.decode() if isinstance(version, bytes) else str(version),
    )


@dataclass
class Snapshot:
    cpu: dict[str, float]  # CPU seconds so far, by what is measured
    machine: procs.Sample
    ours: set[int]  # the processes the bench runs (and RabbitMQ's), alive at the snapshot
    at: float = field(default_factory=time.monotonic)


@dataclass
class Bench:
    knobs: Knobs
    settings: Any
    logdir: Path
    tokens: dict[str, str]
    postgres_pid: int | None
    redis_pids: list[int]
    noise: procs.Noise = field(default_factory=lambda: procs.Noise(procs.running_pids))

    @property
    def url(self) -> str:
        return str(self.settings.database_url)

    def snapshot(self, broker: Broker, **measured: procs.Proc) -> Snapshot:
        """CPU seconds so far of the phase's processes, PostgreSQL's tree, Redis and (when it
        is the broker) RabbitMQ; the machine's CPU, to split the rest into other and I/O."""
        rabbitmq = [p for r in procs.rabbitmq_pids() for p in procs.tree(r)]
        cpu = {name: proc.cpu_seconds() for name, proc in measured.items()}
        if self.postgres_pid is not None:
            cpu["postgres"] = sum(map(procs.cpu_seconds, procs.tree(self.postgres_pid)))
        if self.redis_pids:
            cpu["redis"] = sum(map(procs.cpu_seconds, self.redis_pids))
        if broker.name == "RabbitMQ" and rabbitmq:
            cpu["rabbitmq"] = sum(map(procs.cpu_seconds, rabbitmq))
        ours = set(procs.running_pids()) | {os.getpid()} | set(rabbitmq)
        return Snapshot(cpu, self.noise.sample(), ours)


def cpu_between(
    a: Snapshot, b: Snapshot, side: str, per: float, suffix: str = ""
) -> dict[str, Any]:
    """CPU ms per ``per`` (units of work, or seconds) of the phase's ``side`` (web or worker)
    and of each server, and the other and I/O shares of all CPUs, between two snapshots."""

    def ms(name: str) -> float | None:
        return (b.cpu[name] - a.cpu[name]) * 1000 / per if name in a.cpu and per > 0 else None

    # Whose processes were ours is read at the snapshots: a phase's worker may be stopped
    # by the time its interval is computed (it would count as other CPU otherwise).
    split = procs.split(a.machine, b.machine, a.ours | b.ours)
    out = {f"{n}_cpu_ms{suffix}": ms(n) for n in (side, "postgres", "redis", "rabbitmq")}
    return out | procs.noise_figures(split)


def hold_env() -> dict[str, str]:
    """Lease keeping's processes: the bench workflows registered, the short lease timings."""
    modules = [os.environ.get("AWOOOP_WORKFLOW_MODULES", ""), "bench.workflows"]
    return {"AWOOOP_WORKFLOW_MODULES": ",".join(m for m in modules if m), **HOLD_TIMINGS}


def admit(web: procs.Web, label: str, source: load.Source, n: int, spread: bool = True) -> Any:
    """``n`` requests over CONNECTIONS connections; every one must be answered 202. Runs
    merely queued for a later phase go as accepted (``spread`` False)."""
    result = web.admit(label, source, n, CONNECTIONS, spread=spread)
    if (accepted := result.statuses.get(202, 0)) != n:
        raise web.failure(f"{label}: {accepted}/{n} requests answered 202")
    return result


def admit_with_fresh_web(
    b: Bench, label: str, broker: Broker, source: load.Source, n: int, **env: str
) -> None:
    """Start a web (one gunicorn worker: its CPU is not measured), admit ``n`` runs, stop it."""
    env = {"AWOOOP_WEB_WORKERS": "1", **broker.env, **env}
    with procs.serving(procs.Web(f"web-{label}", b.logdir, **env)) as web:
        admit(web, label, source, n, spread=False)
    time.sleep(FLUSH_S)


def counts(url: str) -> database.Counts:
    with database.connect(url) as conn:
        return database.server_counts(conn)


# --- the phases --------------------------------------------------------------------------------


def measure_admission(b: Bench, broker: Broker, project_id: str, batch: str) -> dict[str, Any]:
    """Admission; then the same web admits the first execution batch (into ``batch``)."""
    n, warm = b.knobs.runs, b.knobs.warmup_requests
    broker.purge()
    database.vacuum_runs(b.url)
    counts0 = counts(b.url)
    name = f"web-admission-{broker.name.lower()}"
    with procs.serving(procs.Web(name, b.logdir, **b.knobs.web_workers, **broker.env)) as web:
        admit(web, "admission warm-up", load.events(b.tokens, [project_id], limit=warm), warm)
        before = b.snapshot(broker, web=web)
        source = load.events(b.tokens, [project_id], limit=n)
        result = admit(web, f"admission ({broker.name})", source, n)
        cpu = cpu_between(before, b.snapshot(broker, web=web), "web", n)
        purged = broker.purge()
        admit(web, "first execution batch", load.events(b.tokens, [batch], limit=n), n, False)
    time.sleep(FLUSH_S)
    delta = counts(b.url) - counts0
    return {
        "label": f"admission ({broker.name})",
        "broker": broker.name,
        "connections": CONNECTIONS,
        "requests": n,
        "warmup_requests": warm,
        "req_per_s": result.rps,
        "p50_ms": result.p50,
        "p99_ms": result.p99,
        **cpu,
        "commits": delta.commits,
        # Every request the web answered: warm-up, measured, and the execution batch.
        "commits_per_request": delta.commits / (warm + 2 * n),
        "other_databases_commits": delta.other_commits,
        "purged_messages": purged,
    }


def measure_execution(
    b: Bench, broker: Broker, project_id: str, concurrency: int, queued: bool = False
) -> dict[str, Any]:
    """Execution with ``concurrency`` worker processes; ``queued``: the runs were admitted
    (and their messages queued) by the admission phase's web."""
    n = b.knobs.runs
    label = f"execution-{broker.name.lower()}-c{concurrency}"
    if not queued:
        broker.purge()
        admit_with_fresh_web(b, label, broker, load.events(b.tokens, [project_id], limit=n), n)
    database.vacuum_runs(b.url)
    counts0 = counts(b.url)
    start = functools.partial(
        procs.start_worker, f"worker-{label}", b.logdir, concurrency, **broker.env
    )
    # CPU once the worker is warm: from a tenth of the runs done to the last.
    drained = database.drain(
        label, b.url, [project_id], n, start, lambda w: b.snapshot(broker, worker=w)
    )
    time.sleep(FLUSH_S)
    delta = counts(b.url) - counts0
    seconds, runs_per_s, warm = drained.seconds, drained.per_s(n), drained.warm_runs
    log(f"{label}: {n} runs in {seconds:.2f} s = {runs_per_s:.0f} runs/s")
    return {
        "label": f"execution ({broker.name}, {concurrency} processes)",
        "broker": broker.name,
        "worker_processes": concurrency,
        "runs": n,
        "runs_per_s": runs_per_s,
        "seconds": seconds,
        "cpu_measured_runs": warm,
        **cpu_between(drained.warm, drained.end, "worker", warm),
        "commits": delta.commits,
        "commits_per_run": delta.commits / n,
        "other_databases_commits": delta.other_commits,
    }


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

    # Every run is still holding when the window ends, however late in the spread it started.
    hold = b.knobs.start_spread_s + b.knobs.settle + b.knobs.window + 1.0
    label = f"hold-{n}"
    broker.purge()
    database.vacuum_runs(b.url)
    body = json.dumps({"summary": "capacity bench: hold the run", "hold": hold}).encode()
    source = load.events(b.tokens, [project_id], limit=n, body=body)
    admit_with_fresh_web(b, label, broker, source, n, **hold_env())
    metrics_dir = b.logdir / f"metrics-{label}"
    metrics_dir.mkdir()
    progress = database.Progress.runs(b.url, [project_id])
    env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), **broker.env, **hold_env()}
    worker = procs.start_worker(f"worker-{label}", b.logdir, n, **env)

    def renewals(*outcomes: str) -> float:
        name = "awooop_lease_renewals_total"
        return sum(database.metric_sum(metrics_dir, name, outcome=o) for o in outcomes)

    try:
        wait_all_running(progress, worker, n, b.knobs.start_spread_s)
        time.sleep(b.knobs.settle)
        # One connection for both readings: no backend start inside the window.
        with database.connect(b.url) as conn:
            counts0, renewed0 = database.server_counts(conn), renewals("renewed")
            before = b.snapshot(broker, worker=worker)
            time.sleep(b.knobs.window)
            after = b.snapshot(broker, worker=worker)
            renewed1, counts1 = renewals("renewed"), database.server_counts(conn)
        if (still := progress.counts()[3]) != n:
            raise worker.failure(
                f"{label}: {still}/{n} runs RUNNING at the end of the window (the hold, "
                f"{hold:.0f} s, should outlast it)"
            )
        progress.wait(n, [worker], hold + 30.0, poll=POLL_S)
    finally:
        progress.close()
        worker.stop(database.DRAINED_STOP_S)
    seconds, delta, renewed = after.at - before.at, counts1 - counts0, renewed1 - renewed0
    cpu = cpu_between(before, after, "worker", seconds, "_per_s")
    postgres_ms = cpu["postgres_cpu_ms_per_s"]
    postgres_ms = float("nan") if postgres_ms is None else postgres_ms
    liveness = b.settings.worker_liveness_interval_seconds  # the worker's too
    # Writes: the renewals, and one liveness row per worker process (-c n: n processes).
    writes_per_s = renewed / seconds + n / liveness
    commits_per_s = delta.commits / seconds
    default = Settings()
    beat, every = default.heartbeat_interval_seconds, default.worker_liveness_interval_seconds
    at_default = (n / beat + n / every) / writes_per_s  # the writes/s at the defaults, relative
    log(f"{label}: {renewed:.0f} renewals in {seconds:.1f} s, {commits_per_s:.1f} commits/s")
    return {
        "label": f"lease keeping (N = {n})",
        "runs": n,
        "worker_processes": n,
        "heartbeat_s": HEARTBEAT_S,
        "liveness_interval_s": liveness,
        "hold_s": hold,
        "window_s": seconds,
        "renewals": renewed,
        "renewals_per_s": renewed / seconds,
        "renewals_per_run_per_heartbeat": renewed / (n * seconds / HEARTBEAT_S),
        "renewals_lost_or_failed": renewals("lost", "error"),
        "liveness_writes_per_s": n / liveness,
        "commits": delta.commits,
        "commits_per_s": commits_per_s,
        "write_transactions_per_s": delta.next_xid / seconds,
        "other_databases_commits": delta.other_commits,
        "other_databases_commits_per_s": delta.other_commits / seconds,
        **cpu,
        "commits_per_write": commits_per_s / writes_per_s,
        "postgres_cpu_ms_per_write": postgres_ms / writes_per_s,
        "default": {
            "heartbeat_s": beat,
            "liveness_interval_s": every,
            "renewals_per_s": n / beat,
            "liveness_writes_per_s": n / every,
            "commits_per_s": commits_per_s * at_default,
            "postgres_cpu_ms_per_s": postgres_ms * at_default,
        },
    }


def pgbench_path() -> str | None:
    """The server's ``pgbench`` (PATH or Debian's versioned directory), else the ``pgserver``
    wheel's (the embedded development server)."""
    wheel = None
    with contextlib.suppress(ImportError):
        import pgserver

        wheel = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench"
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"), reverse=True)
    for candidate in (shutil.which("pgbench"), *debian, wheel):
        if candidate and Path(candidate).exists():
            return str(candidate)
    return None


def measure_commit_ceiling(url: str, seconds: float, logdir: Path) -> dict[str, Any] | None:
    """Durable single-row commits/s the server takes from CEILING_CLIENTS clients."""
    if (binary := pgbench_path()) is None:
        log("commit ceiling: no pgbench found (PATH, /usr/lib/postgresql/*/bin, pgserver); skipped")
        return None
    dsn = {"host": "127.0.0.1", "port": "5432", "user": "postgres", "dbname": "postgres"}
    dsn |= psycopg2.extensions.parse_dsn(database.libpq_url(url))
    env = os.environ | {var: dsn[key] for key, var in LIBPQ_ENV.items()}
    if dsn.get("password"):
        env["PGPASSWORD"] = dsn["password"]
    script = logdir / "commit_probe.sql"
    script.write_text(f"INSERT INTO {CEILING_TABLE} (at) VALUES (now());\n")
    database.query(
        url, f"CREATE TABLE IF NOT EXISTS {CEILING_TABLE} (id bigserial, at timestamptz)"
    )
    argv = [binary, "-n", "-c", str(CEILING_CLIENTS), "-j", "2", "-T", f"{seconds:.0f}"]
    log(f"commit ceiling: {binary} with {CEILING_CLIENTS} clients for {seconds:.0f} s")
    try:
        procs.run_to_end("pgbench", [*argv, "-f", str(script)], env, logdir, seconds + 60)
    finally:
        database.query(url, f"DROP TABLE IF EXISTS {CEILING_TABLE}")
    if (tps := re.search(r"tps = ([0-9.]+)", (logdir / "pgbench.log").read_text())) is None:
        raise BenchError(f"pgbench printed no tps; log {logdir / 'pgbench.log'}")
    return {
        "clients": CEILING_CLIENTS,
        "seconds": seconds,
        "commits_per_s": float(tps.group(1)),
        "pgbench": binary,
    }


# --- report ------------------------------------------------------------------------------------


def cpu_cells(r: dict[str, Any], side: str) -> str:
    return " | ".join(fmt(r[f"{n}_cpu_ms"], 2) for n in (side, "postgres", "redis", "rabbitmq"))


def render_block(results: dict[str, Any]) -> str:
    """The markdown written between the capacity markers (and printed)."""
    m, k, ceiling = results["machine"], results["knobs"], results["commit_ceiling"]
    rabbitmq = f", RabbitMQ {results['rabbitmq']}" if results["rabbitmq"] else ""
    lease, default = results["lease_keeping"][0], results["lease_keeping"][0]["default"]
    sessions = ", ".join(f"{n} on `{db}`" for db, n in sorted(results["sessions_at_start"].items()))
    lines = [
        f"Measured by `{results['command']}` on {m['date']}: {m['cpus']} × {m['cpu_model']} "
        f"shared by everything, PostgreSQL {m['postgresql']}, Redis {m['redis']}{rabbitmq}; "
        f"code {m['code']}; sessions on the PostgreSQL server at the start: "
        f"{sessions or 'none'}.",
        "",
        "What one unit of work costs — a request admitted, a `noop-3` run executed (3 steps), "
        "a second of N held leases — in CPU milliseconds of each process (PostgreSQL's: its "
        "whole server) and in commits, with the share of all CPUs used meanwhile by other "
        "processes (other CPU), by the hypervisor for other machines (steal) and by kernel "
        f"threads (I/O CPU). How it is measured: {METHOD}.",
        "",
        f"**Admission**, per request: {k['runs']} requests after {k['warmup_requests']} "
        f"warm-up requests, {CONNECTIONS} keep-alive connections.",
        "",
        *table(
            "broker | req/s | web CPU ms | PostgreSQL CPU ms | Redis CPU ms | RabbitMQ CPU ms "
            f"| commits | {report.NOISE_HEADER}",
            [
                f"{r['broker']} | {r['req_per_s']:,.0f} | {cpu_cells(r, 'web')} | "
                f"{r['commits_per_request']:.2f} | {report.noise_cells(r)}"
                for r in results["admission"]
            ],
        ),
        "",
        f"**Execution**, per run: {k['runs']} runs drained by one worker.",
        "",
        *table(
            "broker | worker processes | runs/s | worker CPU ms | PostgreSQL CPU ms | Redis CPU ms "
            f"| RabbitMQ CPU ms | commits | {report.NOISE_HEADER}",
            [
                f"{r['broker']} | {r['worker_processes']} | {r['runs_per_s']:,.0f} | "
                f"{cpu_cells(r, 'worker')} | {r['commits_per_run']:.2f} | {report.noise_cells(r)}"
                for r in results["execution"]
            ],
        ),
        "",
        f"**Lease keeping**, per second: N runs of `bench-hold` held by one worker with `-c N`, "
        f"heartbeat {lease['heartbeat_s']:g} s, worker liveness every "
        f"{lease['liveness_interval_s']:g} s, over {k['window']:g} s from {k['settle']:g} s "
        f"after the last run was RUNNING; default: heartbeat {default['heartbeat_s']:g} s, "
        f"liveness every {default['liveness_interval_s']:g} s.",
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
        f"**PostgreSQL's commit ceiling**: {ceiling['commits_per_s']:,.0f} commits/s (`pgbench`, "
        f"{ceiling['clients']} clients, {ceiling['seconds']:g} s, one single-row `INSERT` per "
        f"transaction; `fsync={m['fsync']}`, `synchronous_commit={m['synchronous_commit']}`)."
        if ceiling
        else "**PostgreSQL's commit ceiling**: not measured (no `pgbench`).",
    ]
    if not results["rabbitmq"]:
        lines += ["", "RabbitMQ was not reachable: its rows are missing."]
    lines += [""] + [f"- {note}" for note in results["notes"]]
    return "\n".join(lines).rstrip("\n") + "\n"


def contention_notes(rows: list[dict[str, Any]]) -> list[str]:
    """A line for each measurement during which the server's other databases committed more
    than a twentieth of what the bench's own did: its PostgreSQL CPU includes their work."""
    return [
        f"{r['label']}: other databases on the server committed {r['other_databases_commits']} "
        f"transactions meanwhile (this database: {r['commits']}); its PostgreSQL CPU includes "
        "their work"
        for r in rows
        if r["other_databases_commits"] > r["commits"] / 20
    ]


def write_block(path: Path, block: str) -> None:
    """``block`` between the capacity markers of the document at ``path``, everything outside
    them kept (no markers yet: at its end; no document yet: a title and one sentence first)."""
    report.write_between(path, f"{BEGIN}\n{block.strip()}\n{END}", BEGIN, END, NEW_DOCUMENT)


# --- main --------------------------------------------------------------------------------------


def local_servers(url: str, settings: Any, rabbit: Broker | None) -> tuple[Any, ...]:
    """PostgreSQL's server pid and Redis's pids, when they run on this machine; a note for
    each server whose CPU is therefore not measured."""
    postgres_pid = procs.postgres_server_pid(url)
    clients = (redis.Redis.from_url(u) for u in (settings.broker_url, settings.rate_limit_url))
    redis_pids = sorted({p for r in clients for p in procs.redis_pids(r)})
    absent = "does not run on this machine: its CPU is not measured"
    notes = [f"PostgreSQL {absent} (or not in this process namespace)"] * (postgres_pid is None)
    notes += [f"Redis {absent}"] * (not redis_pids)
    notes += [f"RabbitMQ {absent}"] * (rabbit is not None and not procs.rabbitmq_pids())
    return postgres_pid, redis_pids, notes


def server_sessions(url: str) -> dict[str, int]:
    """Client sessions on the PostgreSQL server by database, this one's own left out."""
    rows = database.query(
        url,
        "SELECT coalesce(datname, '?'), count(*) FROM pg_stat_activity"
        " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() GROUP BY 1",
    )
    return {str(db): int(n) for db, n in rows}


def run_phases(b: Bench, brokers: list[Broker], project: Callable[[str], str]) -> dict[str, Any]:
    """Admission, execution (``-c 1``, then more) and, on Redis, lease keeping, for each
    broker; then the commit ceiling."""
    results: dict[str, Any] = {"admission": [], "execution": [], "lease_keeping": []}
    for broker in brokers:
        key = broker.name.lower()
        first = project(f"c1-{key}")
        results["admission"].append(measure_admission(b, broker, project(f"adm-{key}"), first))
        results["execution"].append(measure_execution(b, broker, first, 1, queued=True))
        if broker.name == "Redis":
            for c in b.knobs.concurrencies[1:]:
                results["execution"].append(measure_execution(b, broker, project(f"c{c}-{key}"), c))
            for n in b.knobs.hold_runs:
                results["lease_keeping"].append(
                    measure_lease_keeping(b, broker, project(f"hold-{n}"), n)
                )
    results["commit_ceiling"] = measure_commit_ceiling(b.url, b.knobs.ceiling_seconds, b.logdir)
    return results


def configure(quick: bool) -> tuple[Knobs, Any]:
    from awooop.config import Settings

    settings = Settings.from_env()
    if not settings.broker_url.startswith(("redis://", "rediss://")):
        raise BenchError("AWOOOP_BROKER_URL must be Redis (RabbitMQ is BENCH_CAPACITY_AMQP_URL)")
    return Knobs.from_env(quick), settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes; no markdown written")
    args = parser.parse_args(argv)
    knobs, settings = report.configure("bench-capacity", lambda: configure(args.quick))
    url = settings.database_url
    tag = f"cap-{time.strftime('%Y%m%d%H%M%S')}-{os.urandom(2).hex()}"
    ids: list[str] = []
    brokers: list[Broker] = []
    try:
        with report.session("capacity", knobs.timeout, "BENCH_CAPACITY_TIMEOUT") as logdir:
            machine = report.machine_info(url, settings.broker_url)
            sessions = server_sessions(url)
            redis_client = redis.Redis.from_url(settings.broker_url, socket_timeout=10)
            brokers.append(Broker("Redis", lambda: database.purge_queue(redis_client)))
            rabbit = rabbitmq_broker(knobs.amqp_url, settings.rate_limit_url)
            brokers += [rabbit] if rabbit is not None else []
            postgres_pid, redis_pids, notes = local_servers(url, settings, rabbit)
            roles = [f"{r}-{broker.name.lower()}" for broker in brokers for r in ("adm", "c1")]
            roles += [f"c{c}-redis" for c in knobs.concurrencies[1:]]
            holds = [f"hold-{n}" for n in knobs.hold_runs]
            ids = [f"{tag}-{role}" for role in roles + holds]
            limits: dict[str, int | None] = {"ingress_per_minute": INGRESS_LIMIT_PER_MINUTE}
            tokens = database.create_projects(url, ids[: len(roles)], limits=limits)
            tokens |= database.create_projects(url, ids[len(roles) :], {"api": HOLD}, limits)
            b = Bench(knobs, settings, logdir, tokens, postgres_pid, redis_pids)
            results = run_phases(b, brokers, lambda role: f"{tag}-{role}")
            results.update(
                quick=knobs.quick,
                command=report.command("bench-capacity", "bench.capacity"),
                machine=machine,
                rabbitmq=rabbit.version if rabbit else None,
                sessions_at_start=sessions,
                knobs={
                    k: getattr(knobs, k)
                    for k in ("runs", "warmup_requests", "hold_runs", "window", "settle")
                },
            )
            rows = results["admission"] + results["execution"] + results["lease_keeping"]
            results["notes"] = notes + contention_notes(rows)
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
            database.delete_projects(url, ids, tag)


if __name__ == "__main__":
    main()
