"""``make bench-peers`` (``python -m bench.peers``): the same three-step workflows on AwoooP,
Procrastinate (``bench/peers_procrastinate.py``) and DBOS Transact (``bench/peers_dbos.py``),
admitted then drained by one worker, then latency at half the drain rate; AwoooP drains again
after the peers, and the ratios take the mean of its two drains. How: bench/NOTES.md.

Knobs: BENCH_PEERS_RUNS (2,000), BENCH_PEERS_SYSTEMS (a partial run writes no report unless
BENCH_OUTPUT is set), BENCH_PEERS_AWOOOP_CONCURRENCY (1; the Procfile's is 2),
BENCH_PEERS_PROCRASTINATE_CONCURRENCY (30), BENCH_PEERS_DBOS_CONCURRENCY
(1000), BENCH_PEERS_DBOS_THREADS (512), BENCH_PEERS_LATENCY_S (10; 0 leaves the latency phase
out), BENCH_TIMEOUT (s, 900), BENCH_KEEP=1, BENCH_OUTPUT. A short trial:
``BENCH_PEERS_RUNS=300 BENCH_PEERS_LATENCY_S=3 BENCH_OUTPUT=/tmp/peers.md make bench-peers``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench import database, procs, report
from bench.procs import BIN
from bench.report import BenchError, env_choice, env_float, env_int, fmt, knob, log, table

BEGIN = "<!-- peers:begin (written by `make bench-peers`) -->"
END = "<!-- peers:end -->"
SYSTEMS = ("awooop", "procrastinate", "dbos")
LABELS = {
    "awooop": "AwoooP `noop-3`",
    "procrastinate": "Procrastinate",
    "dbos": "DBOS Transact",
    "awooop_again": "AwoooP `noop-3`, again after the peers",
}
STEPS = 3
DEFAULT_RUNS = 2000
TARGET_DBOS = 4.0  # AwoooP runs/s / DBOS workflows/s
TARGET_PROCRASTINATE = 2.0  # AwoooP steps/s / Procrastinate jobs/s
TARGET_FIRST_STEP_P50_MS = 10.0  # AwoooP, admission -> first step started, at half capacity
WARM_UP = 20  # workflows run before the latency phase's measured ones
POLL_S = 0.1
PACKAGES = "procrastinate dbos celery kombu redis SQLAlchemy psycopg2-binary psycopg psycopg-pool"
METHOD = "[bench/NOTES.md](../bench/NOTES.md#make-bench-peers-benchpeerspy)"


@dataclass(frozen=True)
class Knobs:
    runs: int = knob(env_int, "BENCH_PEERS_RUNS", DEFAULT_RUNS)
    systems: tuple[str, ...] = knob(env_choice, "BENCH_PEERS_SYSTEMS", SYSTEMS)
    awooop_concurrency: int = knob(env_int, "BENCH_PEERS_AWOOOP_CONCURRENCY", 1)
    procrastinate_concurrency: int = knob(env_int, "BENCH_PEERS_PROCRASTINATE_CONCURRENCY", 30)
    dbos_concurrency: int = knob(env_int, "BENCH_PEERS_DBOS_CONCURRENCY", 1000)
    dbos_threads: int = knob(env_int, "BENCH_PEERS_DBOS_THREADS", 512)
    latency_s: int = knob(env_int, "BENCH_PEERS_LATENCY_S", 10)
    timeout: float = knob(env_float, "BENCH_TIMEOUT", 900)


# --- each system's records ---------------------------------------------------------------------
# (counts, span, latency) of each system. counts: done, failed, claimed; span: first claim, last
# completion; latency, each workflow admitted since %(since)s: admitted, first step's code began,
# completed (epoch s).

QUERIES = {
    "awooop": (
        """SELECT count(*) FILTER (WHERE status = 'COMPLETED'),
       count(*) FILTER (WHERE status IN ('FAILED', 'CANCELLED')),
       count(*) FILTER (WHERE status <> 'PENDING')
FROM awooop_run_state WHERE project_id = ANY(%(p)s)""",
        database.RUNS_SPAN,
        """SELECT extract(epoch FROM created_at),
       extract(epoch FROM (saga_steps->0->>'recorded_at')::timestamptz)
         - (saga_steps->0->>'duration_ms')::float / 1000,
       extract(epoch FROM finished_at)
FROM awooop_run_state WHERE project_id = ANY(%(p)s) AND status = 'COMPLETED'
  AND created_at >= to_timestamp(%(since)s)""",
    ),
    "procrastinate": (
        """SELECT count(*) FILTER (WHERE status = 'succeeded' AND task_name = %(last)s),
       count(*) FILTER (WHERE status IN ('failed', 'cancelled', 'aborted')),
       count(*) FILTER (WHERE status <> 'todo')
FROM procrastinate_jobs""",
        """SELECT min(at) FILTER (WHERE type = 'started'),
       max(at) FILTER (WHERE type = 'succeeded') FROM procrastinate_events""",
        """SELECT extract(epoch FROM d.at), (j2.args->>'first_started')::float8,
       extract(epoch FROM f.at)
FROM procrastinate_jobs j1
JOIN procrastinate_events d ON d.job_id = j1.id AND d.type = 'deferred'
JOIN procrastinate_jobs j2 ON j2.task_name = %(second)s AND j2.args->'run' = j1.args->'run'
JOIN procrastinate_jobs j3 ON j3.task_name = %(last)s AND j3.args->'run' = j1.args->'run'
JOIN procrastinate_events f ON f.job_id = j3.id AND f.type = 'succeeded'
WHERE j1.task_name = %(first)s AND d.at >= to_timestamp(%(since)s)""",
    ),
    "dbos": (
        """SELECT count(*) FILTER (WHERE status = 'SUCCESS'),
       count(*) FILTER (WHERE status IN ('ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')),
       count(*) FILTER (WHERE status <> 'ENQUEUED')
FROM dbos.workflow_status WHERE name = %(wf)s""",
        """SELECT min(started_at_epoch_ms), max(completed_at)
FROM dbos.workflow_status WHERE name = %(wf)s AND status = 'SUCCESS'""",
        """SELECT w.created_at / 1000.0,
       (SELECT min(o.started_at_epoch_ms) FROM dbos.operation_outputs o
        WHERE o.workflow_uuid = w.workflow_uuid) / 1000.0,
       w.completed_at / 1000.0
FROM dbos.workflow_status w
WHERE w.name = %(wf)s AND w.status = 'SUCCESS' AND w.created_at >= %(since)s * 1000""",
    ),
}


@dataclass
class System:
    """A system under the workload: its database, ``admit(count, first, rate)`` (rate 0: as
    fast as it goes), ``start_worker()``, its queries' parameters and its settings."""

    key: str
    url: str
    admit: Callable[[int, int, float], None]
    start_worker: Callable[[], procs.Proc]
    params: dict[str, Any]
    settings: dict[str, Any]

    @property
    def label(self) -> str:
        return LABELS[self.key].replace("`", "")

    def progress(self) -> database.Progress:
        return database.Progress(self.url, self.params, *QUERIES[self.key][:2])


def awooop(knobs: Knobs, scratch: database.Scratch, broker: redis.Redis, logdir: Path) -> System:
    from awooop.config import Settings
    from awooop.tasks import runs as run_tasks

    _, url = scratch.migrated("peers_awooop")
    settings = Settings(**{**Settings.from_env().__dict__, "database_url": url})
    project, c_awooop = "bench-peers", knobs.awooop_concurrency
    database.create_projects(url, [project])
    if dropped := database.purge_queue(broker):
        log(f"AwoooP: purged {dropped} messages left in the broker's 'runs' queue")

    def admit(count: int, first: int, rate: float) -> None:
        store = database.Store(url, settings)
        try:
            if not rate:
                ids = [store.admit(project, f"peers-{first + i}") for i in range(count)]
                if (sent := run_tasks.enqueue(ids)) != count:  # after the commits, as the web
                    raise BenchError(f"AwoooP: {sent}/{count} run messages sent to the broker")
                return
            t0 = time.monotonic()
            for i in range(count):
                time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
                run_tasks.enqueue([store.admit(project, f"peers-{first + i}")])
        finally:
            store.close()

    def start_worker() -> procs.Proc:
        return procs.start_worker("worker-awooop", logdir, c_awooop, AWOOOP_DATABASE_URL=url)

    return System("awooop", url, admit, start_worker, {"p": [project]}, {"concurrency": c_awooop})


def peer(
    key: str,
    url: str,
    env: dict[str, str],
    logdir: Path,
    admit_command: list[str],
    worker_command: list[str],
    params: dict[str, Any],
    settings: dict[str, Any],
) -> System:
    """A peer driven by commands of its own: ``admit_command`` + ``admit COUNT [FIRST RATE]``,
    run to its end, and ``worker_command``."""

    def admit(count: int, first: int, rate: float) -> None:
        argv = [*admit_command, "admit", str(count)] + ([str(first), str(rate)] if rate else [])
        timeout = 60 + count / rate if rate else max(120.0, count / 10)
        procs.run_to_end(f"{key}-admit" + ("-paced" if rate else ""), argv, env, logdir, timeout)

    def start_worker() -> procs.Proc:
        return procs.Proc(f"worker-{key}", worker_command, env, logdir)

    return System(key, url, admit, start_worker, params, settings)


def procrastinate(knobs: Knobs, scratch: database.Scratch, _: Any, logdir: Path) -> System:
    from bench.peers_procrastinate import STEPS

    c = knobs.procrastinate_concurrency
    _, url = scratch.empty("peers_procrastinate")
    dsn = database.libpq_url(url)
    env = procs.child_env(
        BENCH_PEERS_PROCRASTINATE_DSN=dsn, BENCH_PEERS_PROCRASTINATE_CONCURRENCY=str(c)
    )
    cli = [str(BIN / "procrastinate"), "--app=bench.peers_procrastinate.app"]
    procs.run_to_end("procrastinate-schema", [*cli, "schema", "--apply"], env, logdir, 120)
    # Not ``python -m``: Procrastinate warns about an App made in ``__main__``.
    code = "import sys; from bench import peers_procrastinate as p; p.main(sys.argv[1:])"
    admit = [sys.executable, "-c", code]
    worker = [*cli, "worker", f"--concurrency={c}", "--name=bench-peers"]
    params = {"first": STEPS[0], "second": STEPS[1], "last": STEPS[-1]}
    return peer("procrastinate", url, env, logdir, admit, worker, params, {"concurrency": c})


def dbos(knobs: Knobs, scratch: database.Scratch, _: Any, logdir: Path) -> System:
    from bench.peers_dbos import WORKFLOW  # registers its workflow; launches nothing

    c, threads = knobs.dbos_concurrency, knobs.dbos_threads
    _, url = scratch.empty("peers_dbos")
    env = procs.child_env(
        BENCH_PEERS_DBOS_URL=database.libpq_url(url),
        BENCH_PEERS_DBOS_CONCURRENCY=str(c),
        BENCH_PEERS_DBOS_THREADS=str(threads),
    )
    module = [sys.executable, "-m", "bench.peers_dbos"]
    procs.run_to_end("dbos-setup", [*module, "setup"], env, logdir, 120)
    settings = {"concurrency": c, "threads": threads}
    return peer("dbos", url, env, logdir, module, [*module, "worker"], {"wf": WORKFLOW}, settings)


SETUPS = {"awooop": awooop, "procrastinate": procrastinate, "dbos": dbos}


# --- the measurement ---------------------------------------------------------------------------


def commits(url: str) -> int:
    """``xact_commit`` of the database a second after the last session of a phase closed."""
    time.sleep(1.0)
    return database.xact_commit(url)[0]


def drain(s: System, worker: procs.Proc, n: int, noise: procs.Noise, info: dict[str, Any]) -> None:
    """Until the worker has completed all n workflows; CPU (from the first claim) and span."""
    with contextlib.closing(s.progress()) as progress:
        started = time.monotonic()

        def on_poll(done: int) -> None:
            if "startup_cpu_s" not in info and progress.counts()[2] > 0:  # the first claim
                info["startup_s"] = time.monotonic() - started
                info["startup_cpu_s"] = worker.cpu_seconds()

        if done := progress.counts()[0]:
            raise BenchError(f"{s.label}: {done} workflows done before the worker started")
        with noise.measure(info):
            progress.wait(n, [worker], max(120.0, n / 10), on_poll, POLL_S)
        info["seconds"] = progress.span()
    info["wall_s"] = time.monotonic() - started
    info["worker_cpu_ms"] = (worker.cpu_seconds() - info.get("startup_cpu_s", 0.0)) * 1000 / n
    info["per_s"] = n / info["seconds"] if info["seconds"] > 0 else float("nan")


def measure(s: System, n: int, noise: procs.Noise, latency_s: int) -> dict[str, Any]:
    """Admission, then the drain by one worker, commits counted around each; then the latency
    phase at half the drain rate, on a worker of its own."""
    info: dict[str, Any] = {"runs": n, "other_db_clients": database.sessions(s.url), **s.settings}
    c0 = commits(s.url)
    t0 = time.perf_counter()
    s.admit(n, 0, 0.0)
    info["admit_s"] = time.perf_counter() - t0
    c1 = commits(s.url)
    # Statistics that know the admitted rows, as autovacuum keeps them in service: whether it
    # had analyzed a fresh database before the drain set a peer's plans (bench/NOTES.md).
    # Its own commits are counted in neither phase.
    database.vacuum_database(s.url)
    c1_vacuumed = commits(s.url)
    log(f"{s.label}: {n} workflows admitted in {info['admit_s']:.1f} s; draining")
    with procs.started(s.start_worker()) as worker:  # its sessions close as it stops
        drain(s, worker, n, noise, info)
    c2 = commits(s.url)
    info["commits_admission"], info["commits_drain"] = c1 - c0, c2 - c1_vacuumed
    info["commits_per_run"] = (info["commits_admission"] + info["commits_drain"]) / n
    database.vacuum_database(s.url)  # the drain's rows, before the latency phase
    if latency_s > 0 and not math.isnan(info["per_s"]):
        log(f"{s.label}: drained at {info['per_s']:.0f}/s; latency at half that")
        info["latency"] = latency_phase(s, n, info["per_s"] / 2, latency_s)
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


def latency_phase(s: System, drained: int, rate: float, seconds: int) -> dict[str, Any]:
    """Open loop at ``rate`` a second for ``seconds`` with one worker running (warmed by
    WARM_UP workflows first): each workflow's admission, first step and completion."""
    n = max(20, int(rate * seconds))
    with (
        contextlib.closing(s.progress()) as progress,
        procs.started(s.start_worker()) as worker,
    ):
        for count, first in ((WARM_UP, drained), (n, drained + WARM_UP)):
            since = time.time()
            s.admit(count, first, rate)
            total = first + count
            progress.wait(total, [worker], max(60.0, 4 * total / rate), poll=POLL_S)
        with progress.conn.cursor() as cur:
            cur.execute(QUERIES[s.key][2], {**s.params, "since": since})
            rows = [(float(a), float(b), float(c)) for a, b, c in cur.fetchall()]
    if len(rows) != n:
        raise BenchError(f"{s.label}: {len(rows)} of the latency phase's {n} workflows found")
    admitted = [a for a, _, _ in rows]  # the arrival rate achieved, from their own times
    achieved = (n - 1) / (max(admitted) - min(admitted)) if n > 1 else float("nan")
    return {"rate": rate, "workflows": n, "admit_per_s": achieved, **latencies(rows)}


# --- report ------------------------------------------------------------------------------------

RATIOS = (  # AwoooP's workflows/s over a peer's; steps/s over jobs/s is the same, times 3 each
    ("AwoooP runs/s / DBOS Transact workflows/s", "dbos", TARGET_DBOS),
    ("AwoooP steps/s (runs/s × 3) / Procrastinate jobs/s", "procrastinate", TARGET_PROCRASTINATE),
)


def awooop_per_s(results: dict[str, dict[str, Any]]) -> float | None:
    """AwoooP's workflows/s for the ratios: the mean of its drains before and after the peers
    (the machine's speed drifts within minutes; the peers' drains lie between the two)."""
    rates = [results[k]["per_s"] for k in ("awooop", "awooop_again") if k in results]
    return sum(rates) / len(rates) if rates else None


def targets(results: dict[str, dict[str, Any]]) -> list[report.Row]:
    """(what, measured, target text, verdict)."""
    ours = awooop_per_s(results)
    rows = [
        report.target_row(what, report.ratio(ours, results.get(peer, {}).get("per_s")), t, True)
        for what, peer, t in RATIOS
    ]
    p50 = {k: r["latency"]["first_p50"] for k, r in results.items() if "latency" in r}
    value = p50.get("awooop", float("nan"))
    verdict = report.verdict(value, TARGET_FIRST_STEP_P50_MS, False)
    if verdict == "met" and not all(value <= v for v in p50.values()):
        verdict = "MISSED"
    what = "AwoooP p50 ms, admission to first step, half capacity"
    return [*rows, (what, value, f"<= {TARGET_FIRST_STEP_P50_MS:.0f}, lowest", verdict)]


def render_markdown(
    machine: dict[str, str],
    knobs: Knobs,
    results: dict[str, dict[str, Any]],
    packages: dict[str, str],
) -> str:
    n, pc = knobs.runs, knobs.procrastinate_concurrency
    versions = ", ".join(f"{p} {v}" for p, v in packages.items())
    command = report.command("bench-peers", "bench.peers")
    written = f"{report.written_by(command, 'bench.peers', machine)} Packages: {versions}."
    intro = (
        f"{n:,} three-step no-op workflows with durable steps per system, each in a scratch "
        "database of its own, admitted with no worker running, analyzed (`VACUUM (ANALYZE)`), "
        f"then drained by ONE worker process; then, on a fresh worker warmed by {WARM_UP} "
        f"workflows, {knobs.latency_s} s of arrivals at half the drain rate. Settings: "
        f"AwoooP `-c {knobs.awooop_concurrency}` (task events off); "
        f"Procrastinate `--concurrency={pc}`, a pool of {pc + 1} connections; DBOS "
        f"`worker_concurrency={knobs.dbos_concurrency}`, "
        f"`max_executor_threads={knobs.dbos_threads}`. AwoooP drains again after the peers, "
        "in a new scratch database; its workflows/s in the ratios is the mean of its two "
        f"drains. How it is measured and why each setting: {METHOD}."
    )
    reduced = (
        f"**A reduced run: {n:,} workflows per system** (`BENCH_PEERS_RUNS={n}`; the "
        f"benchmark's size is {DEFAULT_RUNS:,}): a trial, not the comparison.\n"
    )
    drains = table(
        "system | workflows | drain s | workflows/s | steps/s | commits / workflow | "
        "of which admission | of which drain | worker CPU ms / workflow | " + report.NOISE_HEADER,
        [
            f"{LABELS[system]} | {n:,} | {r['seconds']:.2f} | {r['per_s']:,.0f} | "
            f"{r['per_s'] * STEPS:,.0f} | {r['commits_per_run']:.2f} | "
            f"{r['commits_admission'] / n:.2f} | {r['commits_drain'] / n:.2f} | "
            f"{r['worker_cpu_ms']:.2f} | {report.noise_cells(r)}"
            for system, r in results.items()
        ],
    )
    latency = table(
        "latency at half capacity | arrivals/s (achieved) | workflows | to first step p50 ms "
        "| p99 ms | to completion p50 ms | p99 ms",
        [
            f"{LABELS[system]} | {lat['rate']:.1f} ({lat['admit_per_s']:.1f}) | "
            f"{lat['workflows']:,} | {lat['first_p50']:.1f} | {lat['first_p99']:.1f} | "
            f"{lat['done_p50']:.1f} | {lat['done_p99']:.1f}"
            for system, r in results.items()
            if (lat := r.get("latency"))
        ],
    )
    verdicts = table(
        "target | measured | target | ",
        [(w, fmt(v, 2), report.md_target(t), vd) for w, v, t, vd in targets(results)],
        "lrll",
    )
    body = [intro, "", *([reduced] if n != DEFAULT_RUNS else []), *drains, "", *latency, ""]
    return report.section(BEGIN, END, "Peers (`make bench-peers`)", written, [*body, *verdicts, ""])


# --- main ----------------------------------------------------------------------------------


def _configure() -> tuple[Knobs, Any]:
    from awooop.config import Settings

    knobs = Knobs()
    if missing := [p for p in ("procrastinate", "dbos") if importlib.util.find_spec(p) is None]:
        raise BenchError(
            f"{' and '.join(missing)} not installed: `make bench-peers` installs the "
            "bench extra (pip install -c constraints.txt -e '.[bench]')"
        )
    return knobs, Settings.from_env()


def version(package: str) -> str:
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        return importlib.metadata.version(package)
    return "not installed"


def main() -> None:
    knobs, base = report.configure("bench", _configure)
    out = report.output()
    scratch = database.Scratch(base.database_url, report.keep())
    broker = redis.Redis.from_url(base.broker_url, socket_timeout=10)
    try:
        with report.session("bench-peers", knobs.timeout) as logdir:
            machine = report.machine_info(base.database_url, base.broker_url)
            packages = {package: version(package) for package in PACKAGES.split()}
            noise = procs.Noise(procs.running_pids)
            results: dict[str, dict[str, Any]] = {}
            for key in (k for k in SYSTEMS if k in knobs.systems):
                log(f"--- {LABELS[key].replace('`', '')}")
                system = SETUPS[key](knobs, scratch, broker, logdir)
                results[key] = measure(system, knobs.runs, noise, knobs.latency_s)
            if "awooop" in results and len(results) > 1:  # the peers between two drains
                log(f"--- {LABELS['awooop_again'].replace('`', '')}")
                system = awooop(knobs, scratch, broker, logdir)
                results["awooop_again"] = measure(system, knobs.runs, noise, latency_s=0)
            markdown = render_markdown(machine, knobs, results, packages)
            print(markdown, flush=True)
            raw = {"machine": machine, "packages": packages, "results": results}
            report.save_results(logdir, raw)
            if not report.partial(knobs.systems, SYSTEMS, out):
                report.publish(out, markdown, BEGIN, END, logdir)
    finally:
        with contextlib.suppress(redis.RedisError):
            database.purge_queue(broker)
        scratch.close()


if __name__ == "__main__":
    main()
