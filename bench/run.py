"""``make bench``: AwoooP against its baselines; prints a table, writes ``docs/benchmarks.md``
down to ``MARKER`` (the other benches' sections below it are kept). (a) admission over HTTP
against ``bench.baseline_app``; (b) end to end against raw Celery (``bench.raw_celery``), then
a soak: CPU and PostgreSQL commits per run; (c) memory. How: bench/NOTES.md.

Knobs (environment): BENCH_DURATION (s, per measured phase, 3), BENCH_WARMUP (1),
BENCH_CONNECTIONS ("16,64"), BENCH_RAW_TASKS (2000), BENCH_E2E_RUNS (1000),
BENCH_E2E_CONCURRENCY ("2,1"), BENCH_SOAK_RUNS (10000), BENCH_TIMEOUT (s, 720), BENCH_KEEP=1,
BENCH_OUTPUT (docs/benchmarks.md), BENCH_PHASES ("admission,e2e"; a partial run writes no
report unless BENCH_OUTPUT is set), BENCH_SPREAD=0.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import redis

from bench import database, load, procs, verdicts
from bench.baseline_app import RUN_LIST
from bench.report import (
    MARKER,
    BenchError,
    env_choice,
    env_float,
    env_int,
    env_ints,
    failure_summary,
    fmt,
    knob,
    log,
    md_target,
    noise_cells,
    ratio,
    table,
    target_row,
    verdict,
)

TARGETS = {
    "admission_ratio": 0.80,  # AwoooP new events / baseline, req/s
    "duplicate_vs_baseline": 1.00,  # AwoooP duplicates / baseline new events, req/s
    "p99_ratio": 1.20,  # AwoooP p99 / baseline p99 at 64 connections
    "e2e_ratio": 0.40,  # noop-3 runs/s / raw Celery tasks/s at -c 2 (the Procfile's)
    "e2e_ratio_c1": 0.33,  # at -c 1, where Celery's hand-over is serial with every run
    "e2e_stretch_c1": 0.40,
    "cpu_ratio": 4.0,  # web + worker + PostgreSQL + Redis per run / raw Celery's per task
    "commits_per_run": 5.0,
    "wal_flushes_per_run": 3.0,
    "memory_growth_pct": 10.0,
}
# The end-to-end rows per worker concurrency: (target, suffix of the row's label).
E2E_TARGETS: dict[int, tuple[tuple[str, str], ...]] = {
    1: (("e2e_ratio_c1", ""), ("e2e_stretch_c1", " (stretch)")),
    2: (("e2e_ratio", ""),),
}
PHASES = ("admission", "e2e")
BODY = load.BODY
SOAK_BUDGET_S = 75.0  # the soak runs at most this long at the measured rate
STATS_IDLE_FLUSH_S = 11.0  # an idle backend flushes its statistics within 10 s


@dataclass(frozen=True)
class Knobs:
    duration: float = knob(env_float, "BENCH_DURATION", 3.0)
    warmup: float = knob(env_float, "BENCH_WARMUP", 1.0)
    connections: tuple[int, ...] = knob(env_ints, "BENCH_CONNECTIONS", "16,64")
    raw_tasks: int = knob(env_int, "BENCH_RAW_TASKS", 2000)
    e2e_runs: int = knob(env_int, "BENCH_E2E_RUNS", 1000)
    soak_runs: int = knob(env_int, "BENCH_SOAK_RUNS", 10000)
    # One series per worker concurrency, in this order; the last one's worker runs the soak.
    e2e_concurrency: tuple[int, ...] = knob(env_ints, "BENCH_E2E_CONCURRENCY", "2,1")
    timeout: float = knob(env_float, "BENCH_TIMEOUT", 720)
    phases: tuple[str, ...] = knob(env_choice, "BENCH_PHASES", PHASES)


@dataclass
class Bench:
    """What the phases share: the knobs, the logs folder, the broker, the noise meter, the
    projects' tokens, the scratch database's meter; during (b), its web and progress."""

    knobs: Knobs
    logdir: Path
    r: redis.Redis
    noise: procs.Noise
    tokens: dict[str, str]
    meter: database.Meter
    e2e: dict[str, Any] = field(default_factory=dict)
    web: procs.Web | None = None
    progress: database.Progress | None = None

    def admit(self, label: str, project_id: str, n: int, conns: int, floor: float = 60) -> Any:
        """``n`` new events through (b)'s web; its answers counted into ``e2e``."""
        assert self.web is not None
        source = load.events(self.tokens, [project_id], limit=n)
        result = self.web.admit(label, source, n, conns, floor)
        self.e2e.setdefault("failures", []).extend(result.failure_lines)
        self.e2e["non_2xx"] = self.e2e.get("non_2xx", 0) + result.non_2xx
        self.e2e["errors"] = self.e2e.get("errors", 0) + result.errors
        return result


# --- (a) admission ---------------------------------------------------------------------------


def bench_admission(
    b: Bench, real_id: str, base_id: str
) -> tuple[list[dict[str, Any]], dict[int, list[verdicts.Pair]]]:
    """Admission at each connection count, in interleaved pairs (``bench.verdicts``)."""
    k_ = b.knobs
    results: list[dict[str, Any]] = []
    pairs: dict[int, list[verdicts.Pair]] = {}
    with (
        procs.started(procs.Web("web-awooop", b.logdir)) as real,
        procs.started(
            procs.Web("web-baseline", b.logdir, "bench.baseline_app:create_app()")
        ) as base,
    ):
        real.wait()
        base.wait()

        def phase(label: str, web: procs.Web, source: load.Source, conns: int) -> dict[str, Any]:
            return web.measure(
                label, source, conns, b.noise, duration=k_.duration, warmup=k_.warmup
            )

        for conns in k_.connections:
            series = pairs[conns] = []
            while verdicts.need_more(series):
                # AwoooP, the baseline, AwoooP's duplicates, one right after the other, so a
                # burst of outside load hits both sides alike.
                k = len(series) + 1
                prefix = f"a{conns}-{secrets.token_hex(4)}"
                keys = load.unique_keys(prefix)
                unique = phase(
                    f"AwoooP new events #{k}", real, load.events(b.tokens, [real_id], keys), conns
                )
                other = load.unique_keys(f"b{conns}-{secrets.token_hex(4)}")
                baseline = phase(
                    f"baseline new events #{k}",
                    base,
                    load.events(b.tokens, [base_id], other),
                    conns,
                )
                again = load.replay_keys(prefix, unique["issued"])
                duplicates = phase(
                    f"AwoooP duplicates #{k}", real, load.events(b.tokens, [real_id], again), conns
                )
                results += [
                    {**unique, "app": "awooop", "kind": "new", "pair": k},
                    {**baseline, "app": "baseline", "kind": "new", "pair": k},
                    {**duplicates, "app": "awooop", "kind": "duplicate", "pair": k},
                ]
                pair = verdicts.Pair(
                    {
                        "new": ratio(unique["rps"], baseline["rps"]),
                        "duplicate": ratio(duplicates["rps"], baseline["rps"]),
                        "duplicate_own": ratio(duplicates["rps"], unique["rps"]),
                        "p99": ratio(unique["p99"], baseline["p99"]),
                    },
                    verdicts.noise_reasons(
                        {
                            "AwoooP new events": unique["other_cpu_pct"],
                            "the baseline": baseline["other_cpu_pct"],
                            "AwoooP duplicates": duplicates["other_cpu_pct"],
                        }
                    ),
                )
                series.append(pair)
                if pair.noisy:
                    log(f"admission @{conns}, pair {k} is noisy: {'; '.join(pair.reasons)}")
            verdicts.choose(series)
    dropped = database.purge_queue(b.r) + int(b.r.llen(RUN_LIST))
    b.r.delete(RUN_LIST)
    log(f"purged {dropped} queued messages (no worker ran during admission)")
    return results, pairs


# --- (b) end to end, (c) memory -------------------------------------------------------------


def raw_celery(b: Bench, c: int, k: int) -> dict[str, Any]:
    """``raw_tasks`` no-op tasks queued, then one raw Celery worker at ``-c c`` drains them."""
    from bench import raw_celery as raw

    n = b.knobs.raw_tasks
    b.r.delete(*raw.KEYS)
    database.purge_queue(b.r, raw.QUEUE)
    t0, c0 = time.perf_counter(), time.process_time()
    with raw.app.producer_or_acquire() as producer:
        for _ in range(n):
            raw.noop.apply_async((n,), queue=raw.QUEUE, producer=producer)
    enqueue_s, enqueue_cpu = time.perf_counter() - t0, time.process_time() - c0
    if (queued := int(b.r.llen(raw.QUEUE))) != n:
        raise BenchError(f"raw Celery: {queued} messages in {raw.QUEUE}, expected {n}")
    info: dict[str, Any] = {"tasks": n, "enqueue_per_s": n / enqueue_s}
    broker = procs.redis_pids(b.r)
    first: tuple[int, dict[int, float]] | None = None  # tasks done, CPU, once the first is
    worker = procs.start_worker(f"worker-raw-c{c}-{k}", b.logdir, c, "bench.raw_celery", raw.QUEUE)
    with procs.started(worker):
        started = time.perf_counter()
        deadline = started + max(60.0, n / 100)
        with b.noise.measure(info):
            while (done := int(b.r.get(raw.COUNTER) or 0)) < n:
                if first is None and done:
                    first = (done, procs.cpu_by_pid(worker.pids() + broker))
                worker.check()
                if time.perf_counter() > deadline:
                    raise worker.failure(
                        f"raw Celery: {done}/{n} tasks after {deadline - started:.0f} s"
                    )
                time.sleep(0.02)
        info["wall_s"] = time.perf_counter() - started
        info["worker_cpu_ms"] = worker.cpu_seconds() * 1000 / n
        if first is not None and first[0] < n:
            # The producer's + the worker's + Redis's per task; the worker's start-up left out.
            warm = procs.cpu_delta(first[1], procs.cpu_by_pid(worker.pids() + broker))
            info["cpu_ms"] = (enqueue_cpu / n + warm / (n - first[0])) * 1000
    t_first, last = float(b.r.get(raw.FIRST) or 0), float(b.r.get(raw.LAST) or 0)
    info["seconds"] = last - t_first
    info["per_s"] = n / (last - t_first) if last > t_first else float("nan")
    info["left_in_queue"] = int(b.r.llen(raw.QUEUE))
    b.r.delete(*raw.KEYS)
    log(
        f"raw Celery -c {c}: {n} no-op tasks in {info['seconds']:.2f} s = {info['per_s']:.0f} "
        f"tasks/s (worker start to drained {info['wall_s']:.1f} s)  {procs.noise_text(info)}"
    )
    return info


def awooop_batch(
    b: Bench, project_id: str, c: int, label: str, on_first: Callable[[procs.Proc], None]
) -> tuple[dict[str, Any], procs.Proc]:
    """``e2e_runs`` runs admitted with no worker running, then one worker (``-c c``) drains
    them; its figures, and the worker (still running)."""
    assert b.web is not None and b.progress is not None
    n, progress = b.knobs.e2e_runs, b.progress
    info: dict[str, Any] = {"runs": n, "concurrency": c}
    done0, _, total0, _ = progress.counts()
    info["admit_per_s"] = b.admit(label, project_id, n, 16).rps
    if (total := progress.counts()[2]) != total0 + n:
        raise b.web.failure(f"{label}: {total - total0} runs admitted, expected {n}")
    since = progress.clock()
    worker = procs.start_worker(f"worker-{label.replace(' ', '-').replace('#', '')}", b.logdir, c)
    seen: list[int] = []

    def on_poll(done: int) -> None:
        if not seen and done > done0:
            seen.append(done)
            on_first(worker)

    started = time.perf_counter()
    with b.noise.measure(info):
        progress.wait(total, [worker, b.web], max(90.0, n / 20), on_poll)
    info["wall_s"] = time.perf_counter() - started
    info["worker_cpu_ms"] = worker.cpu_seconds() * 1000 / n
    info["seconds"] = progress.span(since)
    info["per_s"] = n / info["seconds"]
    log(
        f"{label}: {n} noop-3 runs, first claim to last completion {info['seconds']:.2f} s"
        f" = {info['per_s']:.0f} runs/s (worker start to done {info['wall_s']:.1f} s)"
        f"  {procs.noise_text(info)}"
    )
    return info, worker


def e2e_series(
    b: Bench, project_id: str, c: int, keep_last: bool, on_first: Callable[[procs.Proc], None]
) -> tuple[dict[str, Any], procs.Proc | None]:
    """Raw Celery, AwoooP, raw Celery, AwoooP, … at ``-c c`` until three clean pairs; pair k
    is AwoooP's batch k over the mean of the raw rates either side of it. AwoooP's worker
    idles while the raw run after its batch is measured, and is then stopped (the last one
    kept when ``keep_last``, and returned)."""
    raws = [raw_celery(b, c, 1)]
    batches: list[dict[str, Any]] = []
    pairs: list[verdicts.Pair] = []
    worker: procs.Proc | None = None
    while verdicts.need_more(pairs):
        k = len(pairs) + 1
        if worker is not None:
            worker.stop()
        batch, worker = awooop_batch(b, project_id, c, f"AwoooP -c {c} #{k}", on_first)
        batches.append(batch)
        raws.append(raw_celery(b, c, k + 1))
        before, after = raws[-2], raws[-1]
        pair = verdicts.Pair(
            {"e2e": ratio(batch["per_s"], (before["per_s"] + after["per_s"]) / 2)},
            verdicts.noise_reasons(
                {
                    "raw Celery before": before["other_cpu_pct"],
                    "AwoooP's batch": batch["other_cpu_pct"],
                    "raw Celery after": after["other_cpu_pct"],
                },
                (before["per_s"], after["per_s"]),
            ),
        )
        pairs.append(pair)
        if pair.noisy:
            log(f"end to end -c {c}, pair {k} is noisy: {'; '.join(pair.reasons)}")
    verdicts.choose(pairs)
    if worker is not None and not keep_last:
        worker.stop()
        worker = None
    series = {
        "concurrency": c,
        "raw": raws,
        "batches": batches,
        "pairs": pairs,
        "ratio": verdicts.median(pairs, "e2e"),
    }
    log(f"end to end -c {c}: ratio {series['ratio']:.2f} (median of the counted pairs)")
    return series, worker


class SessionWatch(threading.Thread):
    """Notes every session on ``database`` that is not the bench's or its children's, twice a
    second, from a connection to ``url`` in one transaction that is rolled back."""

    def __init__(self, url: str, database_name: str) -> None:
        super().__init__(name="bench-session-watch", daemon=True)
        self.url, self.database = url, database_name
        self.foreign: dict[tuple[int, str], str] = {}  # (pid, backend_start) -> app name
        self._mine: set[tuple[int, str]] = set()
        self._halt = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            with database.connect(self.url, autocommit=False) as conn, conn.cursor() as cur:
                port = conn.info.port
                while not self._halt.wait(0.5):
                    cur.execute("SELECT pg_stat_clear_snapshot()")
                    cur.execute(
                        "SELECT pid, backend_start::text, application_name, client_port"
                        " FROM pg_stat_activity WHERE datname = %s"
                        " AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
                        (self.database,),
                    )
                    for pid, started, app, client_port in cur.fetchall():
                        key = (pid, started)
                        if key in self._mine or key in self.foreign:
                            continue
                        ours = [os.getpid(), *procs.running_pids()]
                        inode = procs.tcp_inode(client_port, port) if client_port else None
                        if procs.socket_owner(ours, inode):
                            self._mine.add(key)
                        else:
                            self.foreign[key] = app or "?"
                conn.rollback()
        except psycopg2.Error as exc:
            self.error = str(exc)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


def bench_e2e(b: Bench, project_id: str) -> dict[str, Any]:
    """The series at each concurrency (the last one's worker then runs the soak); commits,
    CPU and memory over the soak."""
    k_, meter, info = b.knobs, b.meter, b.e2e
    soak = k_.soak_runs
    info.update(runs=k_.e2e_runs, soak_runs=soak, database=meter.database)
    database.purge_queue(b.r)
    idle = meter.idle_window()
    info["idle_commits"] = idle.runs
    if idle.runs:
        info.setdefault("target_failures", []).append(
            f"commit counting: a window with nothing running counted {idle.runs} commits "
            f"({idle.total} in all; {idle.background_text()}): something else commits in "
            f"{meter.database}"
        )
    before = meter.read()  # the window opens before the web starts: its start-up counts
    info["other_db_clients"] = database.sessions(meter.maintenance_url, meter.database)
    watch = SessionWatch(meter.maintenance_url, meter.database)
    worker: procs.Proc | None = None
    last_series: dict[str, Any] = {"raw": []}
    warm: tuple[database.Reading, database.Reading] | None = None
    admitted = 0
    b.web = procs.Web("web-awooop-e2e", b.logdir)
    try:
        watch.start()
        b.web.wait()
        mem: dict[str, dict[str, float]] = {"web": {"start": b.web.rss_mib()}, "worker": {}}
        b.progress = database.Progress.runs(meter.url, [project_id], meter.tally)
        info["series"] = {}
        for i, c in enumerate(k_.e2e_concurrency):
            series, worker = e2e_series(
                b,
                project_id,
                c,
                keep_last=i == len(k_.e2e_concurrency) - 1,
                on_first=lambda w: mem["worker"].__setitem__("start", w.rss_mib()),
            )
            info["series"][c] = series
            admitted += len(series["batches"]) * k_.e2e_runs
        assert worker is not None
        last_series = info["series"][k_.e2e_concurrency[-1]]
        info["per_s"] = per_s = last_series["batches"][-1]["per_s"]
        mem["web"]["after_e2e"], mem["worker"]["after_e2e"] = b.web.rss_mib(), worker.rss_mib()
        if soak > 0 and per_s == per_s and (fits := max(100, int(per_s * SOAK_BUDGET_S))) < soak:
            log(
                f"soak: {soak} runs would take ~{soak / per_s:.0f} s at {per_s:.0f} runs/s;"
                f" running {fits}"
            )
            soak = info["soak_runs"] = fits
        if soak > 0:
            warm = soak_phase(b, project_id, worker, soak, admitted + soak, mem)
        info["memory"] = mem
    finally:
        watch.stop()  # before our processes go: their sessions must look ours
        if b.progress is not None:
            b.progress.close()
        # Stopping closes every session, which flushes its statistics before we read them.
        for proc in (worker, b.web):
            if proc is not None:
                proc.stop()
    after = meter.read()
    raw_cpu = [m["cpu_ms"] for m in last_series["raw"] if "cpu_ms" in m]
    info["raw_cpu_ms"] = statistics.median(raw_cpu) if raw_cpu else float("nan")
    if "cpu_ms_per_run" in info:
        info["cpu_ms"] = sum(info["cpu_ms_per_run"].values())
        info["cpu_ratio"] = ratio(info["cpu_ms"], info["raw_cpu_ms"])
        log(
            f"CPU per run over the soak {info['cpu_ms']:.2f} ms ("
            + ", ".join(f"{k} {v:.2f}" for k, v in info["cpu_ms_per_run"].items())
            + f"); raw Celery {info['raw_cpu_ms']:.2f} ms per task: {info['cpu_ratio']:.2f}"
        )
    whole = database.Count.between(before, after)
    info["commits_whole_window"] = {"total": whole.runs, "runs": admitted + soak}
    # Over the soak (warm processes) when there was one; else over everything.
    counted = soak if warm is not None else admitted + soak
    count = database.Count.between(*warm) if warm is not None else whole
    info.update(
        commits_counted_runs=counted,
        commits_sessions=count.sessions,
        commits=count.total,
        commits_runs=count.runs,
        commits_background={
            "liveness": count.liveness,
            "auth_loads": count.auth_loads,
            "harness": count.harness,
        },
        background_text=count.background_text(),
        commits_per_run=count.per_run(counted),
        foreign_sessions=sorted(set(watch.foreign.values())),
        foreign_session_count=len(watch.foreign),
    )
    if "wal_syncs" in info:
        info["wal_flushes_per_run"] = info["wal_syncs"] / soak
    log(
        f"PostgreSQL commits: {count.runs} for {counted} runs = "
        f"{info['commits_per_run']:.3f} per run ({count.total} in {meter.database}, "
        f"{count.background_text()}; sessions started meanwhile: {count.sessions}); "
        f"over the whole e2e window, processes' start-up included: {whole.runs} for "
        f"{admitted + soak} runs; other sessions on the database meanwhile: "
        f"{len(watch.foreign)} {info['foreign_sessions'] or ''}"
    )
    if count.runs > TARGETS["commits_per_run"] * counted:
        info.setdefault("target_failures", []).append(
            f"PostgreSQL commits per run {info['commits_per_run']:.3f} > "
            f"{TARGETS['commits_per_run']:.0f}: {count.runs} commits for {counted} runs "
            f"after {count.background_text()}"
        )
    if warm is not None and count.sessions:
        info.setdefault("target_failures", []).append(
            f"commit counting: {count.sessions} sessions started while the soak was counted; "
            "their set-up commits are in the figure, which is not exact"
        )
    if watch.error:
        log(f"(session watch failed: {watch.error})")
    return info


def soak_phase(
    b: Bench, project_id: str, worker: procs.Proc, soak: int, expected: int, mem: dict[str, Any]
) -> tuple[database.Reading, database.Reading]:
    """``soak`` more runs on the warm web and worker: CPU per run, WAL flushes, memory; the
    commit readings either side, each taken once the processes have idled long enough for
    their statistics to be flushed (their sessions and prepared statements are set-up)."""
    assert b.web is not None and b.progress is not None
    meter, info, web = b.meter, b.e2e, b.web
    time.sleep(STATS_IDLE_FLUSH_S)
    warm_before = meter.read()
    (wal0,) = database.query(meter.maintenance_url, "SELECT wal_sync FROM pg_stat_wal")[0]
    groups = {
        "web": web.pids,
        "worker": worker.pids,
        "PostgreSQL": lambda: procs.postgres_pids(meter.maintenance_url, meter.database),
        "Redis": lambda: procs.redis_pids(b.r),
    }
    cpu0 = {name: procs.cpu_by_pid(pids()) for name, pids in groups.items()}
    t0 = time.perf_counter()
    result = b.admit("soak", project_id, soak, 8, floor=120)
    if result.statuses.get(202, 0) != soak:
        raise web.failure(f"soak: only {result.statuses.get(202, 0)}/{soak} admitted")
    per_s = max(info["per_s"], 1.0)
    b.progress.wait(expected, [worker, web], max(60.0, 2 * soak / per_s))
    info["soak_wall_s"] = time.perf_counter() - t0
    info["cpu_ms_per_run"] = {
        name: procs.cpu_delta(cpu0[name], procs.cpu_by_pid(pids())) * 1000 / soak
        for name, pids in groups.items()
    }
    log(f"soak: {soak} more runs admitted and completed in {info['soak_wall_s']:.1f} s")
    time.sleep(STATS_IDLE_FLUSH_S)
    warm_after = meter.read()
    (wal1,) = database.query(meter.maintenance_url, "SELECT wal_sync FROM pg_stat_wal")[0]
    info["wal_syncs"] = int(wal1) - int(wal0)
    mem["web"]["after_soak"], mem["worker"]["after_soak"] = web.rss_mib(), worker.rss_mib()
    return warm_before, warm_after


# --- verdicts --------------------------------------------------------------------------------


def all_failures(results: list[dict[str, Any]], e2e: dict[str, Any]) -> list[str]:
    return [line for res in results for line in res.get("failures", [])] + e2e.get("failures", [])


def failed_answers(results: list[dict[str, Any]], e2e: dict[str, Any]) -> int:
    """Non-2xx answers and dropped connections, all phases together."""
    return sum(r["non_2xx"] + r["errors"] for r in results + [e2e] if "non_2xx" in r)


def durability_failures(machine: dict[str, str]) -> list[str]:
    """The targets hold on a durable database (fsync on, synchronous_commit on): anything
    else is a FAIL."""
    off = [k for k in ("fsync", "synchronous_commit") if machine.get(k) == "off"]
    if not off:
        return []
    return [
        f"PostgreSQL is not durable ({', '.join(f'{k}=off' for k in off)}): the targets are "
        "measured on a durable database, and every figure that commits is flattered"
    ]


def target_failures(machine: dict[str, str], e2e: dict[str, Any]) -> list[str]:
    """FAIL lines of the summary besides the answers: durability, commits per run."""
    return durability_failures(machine) + e2e.get("target_failures", [])


def ratios(
    results: list[dict[str, Any]],
    pairs: dict[int, list[verdicts.Pair]],
    e2e: dict[str, Any],
    conns: tuple[int, ...],
) -> list[tuple[str, float, str, str]]:
    """(what, measured, target text, verdict); each ratio the median of its counted pairs."""
    rows = []
    for label, key, target in (
        ("AwoooP new events / baseline", "new", "admission_ratio"),
        ("AwoooP duplicates / baseline new events", "duplicate", "duplicate_vs_baseline"),
        # What a duplicate costs against AwoooP's own new event: no target.
        ("AwoooP duplicates / new events", "duplicate_own", None),
    ):
        for c in conns:
            value = verdicts.median(pairs.get(c, []), key)
            what = f"{label}, req/s @{c}"
            rows.append(
                (what, value, "(none)", "-")
                if target is None
                else target_row(what, value, TARGETS[target], True)
            )
    c = max(conns) if conns else 0
    value = verdicts.median(pairs.get(c, []), "p99")
    rows.append(
        target_row(f"p99 AwoooP new events / baseline @{c}", value, TARGETS["p99_ratio"], False)
    )
    for conc, series in sorted(e2e.get("series", {}).items()):
        for key, suffix in E2E_TARGETS.get(conc, (("e2e_ratio", ""),)):
            what = f"AwoooP noop-3 runs/s / raw Celery tasks/s, -c {conc}{suffix}"
            rows.append(target_row(what, series["ratio"], TARGETS[key], True))
    for what, key, digits in (
        ("CPU per run (web + worker + PostgreSQL + Redis) / raw Celery's per task", "cpu_ratio", 1),
        ("PostgreSQL commits per run (admission included)", "commits_per_run", 0),
        ("of which waited for a WAL flush (WAL flushes per run)", "wal_flushes_per_run", 0),
    ):
        rows.append(target_row(what, e2e.get(key, float("nan")), TARGETS[key], False, digits))
    value = float(failed_answers(results, e2e))
    rows.append(("non-2xx answers and dropped connections", value, "= 0", verdict(value, 0, False)))
    for side in ("web", "worker"):
        m = e2e.get("memory", {}).get(side, {})
        value = (ratio(m.get("after_soak"), m.get("after_e2e")) - 1) * 100
        t = TARGETS["memory_growth_pct"]
        rows.append(
            (f"{side} RSS growth over the soak, %", value, f"< {t:.0f}", verdict(value, t, False))
        )
    return rows


def noise_lines(pairs: dict[int, list[verdicts.Pair]], e2e: dict[str, Any]) -> list[str]:
    """Which pairs were measured again, or counted although noisy, and why."""
    lines = [
        line for c, s in sorted(pairs.items()) for line in verdicts.describe(s, f"admission @{c}")
    ]
    for c, series in sorted(e2e.get("series", {}).items()):
        lines += verdicts.describe(series["pairs"], f"end to end -c {c}")
    return lines


def _digits(what: str) -> int:
    if "commits" in what or "WAL" in what:
        return 3
    return 1 if "%" in what else 0 if "non-2xx" in what else 2


def _chain(series: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A series' measurements in the order taken: raw Celery, AwoooP, raw Celery, …"""
    c = f"-c {series['concurrency']}"
    out = [(f"raw Celery {c}, batch 1", series["raw"][0])]
    for k, batch in enumerate(series["batches"], 1):
        out += [
            (f"AwoooP noop-3 {c}, batch {k}", batch),
            (f"raw Celery {c}, batch {k + 1}", series["raw"][k]),
        ]
    return out


def _pair_mark(p: verdicts.Pair, last: bool) -> str:
    if not p.noisy:
        return "counted" if p.counted else "not needed"
    if p.counted:
        return "counted, NOISY"
    return "not counted" if last else "measured again"


def e(info: dict[str, Any], key: str) -> Any:
    return info.get(key, "n/a")


def _name(res: dict[str, Any]) -> tuple[str, str]:
    return ("AwoooP" if res["app"] == "awooop" else "baseline"), (
        "new" if res["kind"] == "new" else "duplicate"
    )


# --- report ----------------------------------------------------------------------------------


def render_markdown(
    machine: dict[str, str],
    knobs: Knobs,
    results: list[dict[str, Any]],
    pairs: dict[int, list[verdicts.Pair]],
    e2e: dict[str, Any],
    rows: list[tuple[str, float, str, str]],
) -> str:
    """The page down to MARKER (printed, and written above the other benches' sections)."""
    m, nan = machine, float("nan")
    lines = [
        "# Benchmarks",
        "",
        "What AwoooP costs, measured against what a user could run instead. Four commands "
        'write this page: `make bench` the sections down to "Running it" (admission over '
        "HTTP against a plain Flask baseline, runs end to end against raw Celery, memory), "
        "`make bench-retention`, `make bench-peers` and `make bench-growth` a section each "
        "below. A target is a ratio of two figures measured in the same run, so the machine's "
        "speed cancels out; a benchmark is not a test, and a missed target fails nothing. How "
        "the benches came to measure what they do, profiles and earlier runs: "
        "[bench/NOTES.md](../bench/NOTES.md).",
        "",
        "## Machine",
        "",
        *table(
            " | ",
            [
                f"date | {m['date']}",
                f"CPUs (`nproc`) | {m['cpus']} × {m['cpu_model']}",
                *(f"{k} | {m[k.lower()]}" for k in ("memory", "kernel", "Python", "PostgreSQL")),
                f"Redis | {m['redis']}",
                f"load average at start | {m['load_before']}",
                f"code measured | {m['code']}",
            ],
            "ll",
        ),
        "",
        "Everything — load generator, gunicorn, Celery, PostgreSQL, Redis — shares these CPUs. "
        '"other CPU" is the share of all CPUs that user-space processes outside the benchmark '
        "(and outside PostgreSQL/Redis) used during a phase; above a few percent the figures "
        "are noisy. \"I/O CPU\" is the kernel's threads' share (the writes and flushes of the "
        "durable commits, among others): the cost of the system under test, not noise.",
        "",
        "## Targets",
        "",
        *table(
            "measure | measured | target | ",
            [(w, fmt(v, _digits(w)), md_target(t), vd) for w, v, t, vd in rows],
            "lrll",
        ),
    ]
    failures = all_failures(results, e2e) + target_failures(machine, e2e)
    if failures:
        lines += [""] + [f"- **FAIL** {line}" for line in failures]
    noisy = noise_lines(pairs, e2e)
    lines += [
        "",
        f"Each ratio is the median of {verdicts.PAIRS} interleaved pairs. A pair measured while "
        f"user-space processes outside the benchmark used more than "
        f"{verdicts.OTHER_CPU_MAX_PCT:.0f} % of "
        "the CPUs, or (end to end) whose raw Celery rates either side of AwoooP's batch are "
        f"more than {verdicts.RAW_APART_MAX_PCT:.0f} % apart, is measured again rather than "
        f"counted, up to {verdicts.MAX_PAIRS} pairs; when fewer than {verdicts.PAIRS} were "
        "clean, noisy ones are counted and marked (`bench/verdicts.py`). "
        + ("Pairs measured again or counted noisy:" if noisy else "Every counted pair was clean."),
    ]
    if noisy:
        lines += [""] + [f"- {line}" for line in noisy]

    def pair_rows(series: list[verdicts.Pair], key: str, label: str) -> list[tuple[Any, ...]]:
        return [
            (
                label,
                i,
                fmt(p.ratios[key], 2),
                _pair_mark(p, i == len(series)),
                "; ".join(p.reasons) or "-",
            )
            for i, p in enumerate(series, 1)
        ]

    whole = e2e.get("commits_whole_window") or {}
    all_series = sorted(e2e.get("series", {}).items())
    lines += [
        "",
        "## (a) Admission over HTTP",
        "",
        *table(
            "app | events | pair | conns | req/s | p50 ms | p99 ms | non-2xx | web CPU ms/req "
            "| other CPU | I/O CPU",
            [
                f"{' | '.join(_name(r))} | {r.get('pair', 1)} | {r['connections']} | "
                f"{r['rps']:,.0f} | {r['p50']:.1f} | {r['p99']:.1f} | {r['non_2xx']} | "
                f"{r['web_cpu_ms']:.2f} | {noise_cells(r)}"
                for r in results
            ],
            "ll",
        ),
        "",
        *table(
            "pairs | pair | AwoooP new events / baseline | | noisy because",
            [row for c, s in sorted(pairs.items()) for row in pair_rows(s, "new", f"@{c}")],
            "lrrll",
        ),
        "",
        "`POST /v1/projects/{p}/runs` (the API channel) with a Bearer token, a JSON body and "
        "an `Idempotency-Key`: new keys (answered 202), or the new-event row's keys sent again "
        "(duplicates, answered 200 `E-IDEMPOTENT-001`). N keep-alive connections, one request "
        "in flight each, spread evenly over the 4 gunicorn workers; "
        f"{knobs.warmup:g} s warm-up, then {knobs.duration:g} s measured per row; a pair is "
        "AwoooP's new events, the baseline's, then AwoooP's duplicates, one after the other. "
        "AwoooP (`gunicorn.conf.py`, access log off) does its whole admission: "
        "token check, validation, routing, the dedupe + run + history statement, and the "
        "run's message to Redis, pushed after the answer by a thread of the same process "
        "(several messages per `LPUSH` when requests come together; its CPU is in the web "
        "CPU). The baseline (`bench/baseline_app.py`, the same gunicorn settings) does one "
        "transaction inserting a dedupe row and a run row, and one Redis `LPUSH` before it "
        "answers: no authentication, no validation, no ORM. req/s: responses completed in the "
        "window; p50/p99: latency seen by the client; web CPU: the gunicorn tree's, per "
        "request. No worker runs.",
        "",
        "## (b) End to end",
        "",
        *table(
            " | count | per second | seconds | worker CPU ms/item | other CPU | I/O CPU",
            [
                f"{label} | {m.get('tasks', m.get('runs'))} | {fmt(m.get('per_s'), 0)} | "
                f"{fmt(m.get('seconds'), 2)} | {fmt(m.get('worker_cpu_ms'), 2)} | "
                f"{fmt(m.get('other_cpu_pct'), 0)}% | {fmt(m.get('io_cpu_pct'), 0)}%"
                for _, series in all_series
                for label, m in _chain(series)
            ],
        ),
        "",
        *table(
            "pairs | pair | AwoooP / mean of the raw rates either side | | noisy because",
            [row for c, s in all_series for row in pair_rows(s["pairs"], "e2e", f"-c {c}")],
            "lrrll",
        ),
        "",
        *table(
            "CPU over the soak, ms per run | ",
            [
                *[f"{k} | {v:.2f}" for k, v in e2e.get("cpu_ms_per_run", {}).items()],
                f"AwoooP, all four | {fmt(e2e.get('cpu_ms', nan), 2)}",
                "raw Celery per task: producer + worker + Redis (median of the -c "
                f"{knobs.e2e_concurrency[-1]} raw batches) | {fmt(e2e.get('raw_cpu_ms', nan), 2)}",
            ],
        ),
        "",
        *table(
            "PostgreSQL commits, counted over the soak | ",
            [
                f"committed in the bench's database | {e(e2e, 'commits')}",
                f"not run work, subtracted | {e(e2e, 'background_text')}",
                f"left, for the {e(e2e, 'commits_counted_runs')} runs of the soak (admission "
                f"included) | {e(e2e, 'commits_runs')}",
                "over the whole phase, the processes' start-up included | "
                f"{e(whole, 'total')} for {e(whole, 'runs')} runs",
                "WAL flushes meanwhile, server-wide (`pg_stat_wal.wal_sync`) | "
                f"{e(e2e, 'wal_syncs')} = {fmt(e2e.get('wal_flushes_per_run', nan), 3)} per run",
                f"an idle window of 2 s before it (must be 0) | {e(e2e, 'idle_commits')}",
                "sessions started in the counted window (must be 0) | "
                f"{e(e2e, 'commits_sessions')}",
                "sessions not of the benchmark seen on its database | "
                f"{e(e2e, 'foreign_session_count')}"
                + "".join(f": {', '.join(f)}" for f in [e2e.get("foreign_sessions")] if f),
            ],
            "ll",
        ),
        "",
        f"Raw Celery (`bench/raw_celery.py`): {knobs.raw_tasks} no-op tasks queued on the "
        "same broker (JSON, acks late, prefetch 1, results ignored), then ONE prefork worker "
        "process drains them; tasks / (last − first). AwoooP: "
        f"{knobs.e2e_runs} `noop-3` runs admitted over HTTP (16 connections) with no worker "
        "running, then ONE worker process (`-Q runs`, the same flags) drains them; runs / "
        "(first claim → last `finished_at`), on the database's clock. At each worker "
        "concurrency (`-c`, the same for both) they alternate: raw Celery, AwoooP, raw Celery, "
        "…; a pair is an AwoooP batch over the mean of the raw rates just before and just "
        "after it (AwoooP's worker idling meanwhile), so a drift of the machine's speed "
        "cancels. Both run without task events (production keeps them on for Flower, at about "
        "0.8 ms of worker CPU per run); worker CPU per item includes the worker's start-up. "
        "Commits: `xact_commit` of the "
        f"bench's own database (`{e2e.get('database', 'awooop_bench_…')}`, migrated, "
        "autovacuum off on its tables, vacuumed between phases, dropped at the end) over the "
        "soak's runs on warm processes, read once they have been idle for 11 s; what is not "
        "run work is counted where it happens and subtracted (`bench/database.py`). More than 5 "
        "per run left fails the target. Commits that waited for a WAL flush: the server's "
        "`pg_stat_wal.wal_sync` over the same window, per run. It counts every fsync of the WAL "
        "by any process, so it is an upper bound when other databases of the server commit "
        "meanwhile and includes the WAL writer's flushes of asynchronous commits (statements "
        "run with `synchronous_commit` off do not wait); commits that share one flush count "
        "once. CPU over the soak: utime + stime from `/proc/<pid>/stat` of the web's and the "
        "worker's process trees, of the PostgreSQL processes that serve the bench's database "
        "(its client backends less the harness's own sessions, the postmaster and the "
        "server's background processes) and of `redis-server`, from when the soak's admission "
        "starts to its last run's completion; raw Celery's per task is the producer's enqueue "
        "CPU plus the worker's and Redis's from its first task to its last (the worker's "
        "start-up left out).",
        "",
        "## (c) Memory",
        "",
    ]
    mem_rows = []
    for side, what in (
        ("web", "web (gunicorn master + workers)"),
        ("worker", "worker (celery parent + child)"),
    ):
        mm = e2e.get("memory", {}).get(side, {})
        growth = (ratio(mm.get("after_soak"), mm.get("after_e2e")) - 1) * 100
        warmup = (ratio(mm.get("after_e2e"), mm.get("start")) - 1) * 100
        mem_rows.append(
            (
                what,
                *(fmt(mm.get(k, nan), 1) for k in ("start", "after_e2e", "after_soak")),
                f"{fmt(warmup, 1)} %",
                f"{fmt(growth, 1)} %",
            )
        )
    lines += [
        *table(
            "process | RSS at start MiB | after e2e batch | after soak | growth over e2e batch "
            "| growth over soak",
            mem_rows,
        ),
        "",
        "VmRSS from `/proc/<pid>/status`, summed over each process tree: the web just after "
        "its first answer, the worker at its first completed run, both after the last "
        f"end-to-end batch, and after a soak of {e2e.get('soak_runs')} more runs admitted "
        "(8 connections) while the last series' worker runs them (cut to what fits in about "
        "75 s). The target (flat: < 10 % "
        "over 10,000 runs) is judged over the soak, on warm processes; the growth over the "
        "batch is mostly warm-up (imports on first use, pooled connections, statement caches).",
        "",
        "## Running it",
        "",
        "`make bench` (migrations first, then `python -m bench.run`), six to eight minutes, on "
        "the configured PostgreSQL and Redis; run it with nothing else using that broker "
        "database, since a worker there would take the bench's messages. Knobs: "
        "`BENCH_DURATION`, `BENCH_WARMUP`, `BENCH_CONNECTIONS`, `BENCH_RAW_TASKS`, "
        "`BENCH_E2E_RUNS`, `BENCH_E2E_CONCURRENCY`, `BENCH_SOAK_RUNS`, `BENCH_TIMEOUT`, "
        "`BENCH_PHASES` (`admission`, "
        "`e2e`; a partial run leaves this file alone unless `BENCH_OUTPUT` is set), "
        "`BENCH_SPREAD=0` (connections where gunicorn puts them), `BENCH_KEEP=1` (keep the "
        "scratch database). `make bench` rewrites this file down to here and keeps the other "
        "benches' sections below.",
        "",
        MARKER,
    ]
    return "\n".join(lines) + "\n"


def _kept_notes(path: Path) -> str:
    """What lies below MARKER in ``path`` (the other benches' sections)."""
    text = path.read_text() if path.exists() else ""
    _, found, rest = text.partition(MARKER)
    return rest.lstrip("\n") if found else ""


# --- main ------------------------------------------------------------------------------------


def main() -> None:
    from awooop.config import Settings
    from bench import report

    knobs, settings = report.configure("bench", lambda: (Knobs(), Settings.from_env()))
    out = report.output()
    tag = f"bench-{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(2)}"
    real_id, base_id, e2e_id = tag, f"{tag}-base", f"{tag}-e2e"
    scratch = database.Scratch(settings.database_url, report.keep())
    r = redis.Redis.from_url(settings.broker_url, socket_timeout=10)
    try:
        with report.session("bench", knobs.timeout) as logdir:
            machine = report.machine_info(settings.database_url, settings.broker_url)
            name, url = scratch.migrated("awooop_bench")
            tables = database.autovacuum_off(url)
            metrics_dir = logdir / "metrics"
            metrics_dir.mkdir()
            # Every child process inherits these (child_env copies os.environ).
            os.environ["AWOOOP_DATABASE_URL"] = url
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
            log(f"autovacuum off on its {len(tables)} tables; metrics in {metrics_dir}")
            meter = database.Meter(settings.database_url, url, name, metrics_dir)
            tokens = database.create_projects(url, [real_id, base_id, e2e_id])
            log(f"projects {real_id}, {base_id}, {e2e_id} created, api -> noop-3")
            b = Bench(knobs, logdir, r, procs.Noise(procs.running_pids), tokens, meter)
            database.vacuum_analyze(url, meter.maintenance_url)  # out of every window
            results: list[dict[str, Any]] = []
            pairs: dict[int, list[verdicts.Pair]] = {}
            if "admission" in knobs.phases:
                results, pairs = bench_admission(b, real_id, base_id)
            if "e2e" in knobs.phases:
                database.vacuum_analyze(url, meter.maintenance_url)  # admission's dead rows
                bench_e2e(b, e2e_id)
            e2e = b.e2e
            rows = ratios(results, pairs, e2e, knobs.connections)
            markdown = render_markdown(machine, knobs, results, pairs, e2e, rows)
            print(markdown, *failure_summary(all_failures(results, e2e)), sep="\n", flush=True)
            raw = {"machine": machine, "admission": results, "pairs": pairs, "e2e": e2e}
            report.save_results(logdir, raw)
            if report.partial(knobs.phases, PHASES, out):
                return
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(markdown + _kept_notes(out))
            log(f"wrote {out} (raw figures: {logdir}/results.json)")
    finally:
        from bench import raw_celery

        # Interrupted runs leave messages behind; they nudge runs that are about to go.
        with contextlib.suppress(redis.RedisError):
            database.purge_queue(r)
            database.purge_queue(r, raw_celery.QUEUE)
            r.delete(RUN_LIST, *raw_celery.KEYS)
        scratch.close()


if __name__ == "__main__":
    main()
