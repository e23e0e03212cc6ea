"""``make bench`` (``python -m bench.run``): AwoooP against its baselines. (a) admission over
HTTP against ``bench.baseline_app``; (b) end to end against raw Celery (``bench.raw_celery``),
then a soak: CPU, PostgreSQL commits and WAL flushes per run; (c) memory. Writes
``docs/benchmarks.md`` down to ``MARKER`` (the other benches' sections below it are kept). How:
bench/NOTES.md.

Knobs (environment): BENCH_DURATION (s per admission row, 3), BENCH_WARMUP (1),
BENCH_CONNECTIONS ("16,64"), BENCH_RAW_TASKS (2000), BENCH_E2E_RUNS (1000),
BENCH_E2E_CONCURRENCY ("2,1"), BENCH_SOAK_RUNS (10000), BENCH_TIMEOUT (s, 720), BENCH_KEEP=1,
BENCH_OUTPUT (docs/benchmarks.md), BENCH_PHASES ("admission,e2e"; a partial run writes no
report unless BENCH_OUTPUT is set), BENCH_SPREAD=0.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench import database, load, procs, report, verdicts
from bench.baseline_app import RUN_LIST
from bench.report import BenchError, fmt, knob, log, ratio, target_row, verdict

TARGETS = {
    "admission_ratio": 0.80,  # AwoooP new events / baseline, req/s
    "duplicate_vs_baseline": 1.00,  # AwoooP duplicates / baseline new events, req/s
    "p99_ratio": 1.20,  # AwoooP p99 / baseline p99 at the most connections
    "e2e_ratio": 0.40,  # noop-3 runs/s / raw Celery tasks/s at -c 2 (the Procfile's)
    "e2e_ratio_c1": 0.33,  # at -c 1, where Celery's hand-over is serial with every run
    "e2e_stretch_c1": 0.40,
    "cpu_ratio": 4.0,  # web + worker + PostgreSQL + Redis per run / raw Celery's per task
    "commits_per_run": 5.0,
    "wal_flushes_per_run": 3.0,
    "memory_growth_pct": 10.0,
}
# The end-to-end rows per worker concurrency: (target, suffix of the row's label).
E2E_TARGETS = {1: (("e2e_ratio_c1", ""), ("e2e_stretch_c1", " (stretch)")), 2: (("e2e_ratio", ""),)}
PHASES = ("admission", "e2e")
E2E_ADMIT_CONNS = 16  # connections that admit an end-to-end batch
SOAK_CONNS = 8
SOAK_BUDGET_S = 75.0  # the soak runs at most this long at the measured rate
STATS_IDLE_FLUSH_S = 11.0  # an idle backend flushes its statistics within 10 s


@dataclass(frozen=True)
class Knobs:
    duration: float = knob(report.env_float, "BENCH_DURATION", 3.0)
    warmup: float = knob(report.env_float, "BENCH_WARMUP", 1.0)
    connections: tuple[int, ...] = knob(report.env_ints, "BENCH_CONNECTIONS", "16,64")
    raw_tasks: int = knob(report.env_int, "BENCH_RAW_TASKS", 2000)
    e2e_runs: int = knob(report.env_int, "BENCH_E2E_RUNS", 1000)
    soak_runs: int = knob(report.env_int, "BENCH_SOAK_RUNS", 10000)
    # One series per worker concurrency, in this order; the last one's worker runs the soak.
    e2e_concurrency: tuple[int, ...] = knob(report.env_ints, "BENCH_E2E_CONCURRENCY", "2,1")
    timeout: float = knob(report.env_float, "BENCH_TIMEOUT", 720)
    phases: tuple[str, ...] = knob(report.env_choice, "BENCH_PHASES", PHASES)


@dataclass
class Bench:
    """What the phases share; during (b), its web, progress and AwoooP's worker too."""

    knobs: Knobs
    logdir: Path
    r: redis.Redis
    noise: procs.Noise
    tokens: dict[str, str]
    meter: database.Meter
    e2e: dict[str, Any] = field(default_factory=dict)
    web: procs.Web | None = None
    progress: database.Progress | None = None
    worker: procs.Proc | None = None

    def admit(self, label: str, project_id: str, n: int, conns: int, floor: float = 60) -> Any:
        """``n`` new events through (b)'s web; its answers counted into ``e2e``."""
        assert self.web is not None
        source = load.events(self.tokens, [project_id], limit=n)
        result = self.web.admit(label, source, n, conns, floor)
        self.e2e.setdefault("failures", []).extend(result.failure_lines)
        self.e2e["non_2xx"] = self.e2e.get("non_2xx", 0) + result.non_2xx
        self.e2e["errors"] = self.e2e.get("errors", 0) + result.errors
        return result

    def stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None


# --- (a) admission ---------------------------------------------------------------------------


def admission_pair(
    b: Bench, webs: tuple[Any, Any], ids: tuple[str, str], conns: int, k: int
) -> Any:
    """AwoooP's new events, the baseline's, then AwoooP's duplicates of its new events, one
    right after the other, so a burst of outside load hits both sides alike: the three rows
    and the pair."""

    def measure(label: str, side: int, keys: Any) -> dict[str, Any]:
        source = load.events(b.tokens, [ids[side]], keys)
        kw = {"duration": b.knobs.duration, "warmup": b.knobs.warmup}
        return webs[side].measure(f"{label} #{k}", source, conns, b.noise, **kw)

    prefix = f"a{conns}-{secrets.token_hex(4)}"
    new = measure("AwoooP new events", 0, load.unique_keys(prefix))
    base = measure("baseline new events", 1, load.unique_keys(f"b{conns}-{secrets.token_hex(4)}"))
    dup = measure("AwoooP duplicates", 0, load.replay_keys(prefix, new["issued"]))
    phases = {"AwoooP new events": new, "the baseline": base, "AwoooP duplicates": dup}
    pair = verdicts.Pair(
        {
            "new": ratio(new["rps"], base["rps"]),
            "duplicate": ratio(dup["rps"], base["rps"]),
            "duplicate_own": ratio(dup["rps"], new["rps"]),
            "p99": ratio(new["p99"], base["p99"]),
        },
        verdicts.noise_reasons(phases),
    )
    rows = [(new, "awooop", "new"), (base, "baseline", "new"), (dup, "awooop", "duplicate")]
    return [{**m, "app": app, "kind": kind, "pair": k} for m, app, kind in rows], pair


def bench_admission(b: Bench, ids: tuple[str, str]) -> tuple[list[dict[str, Any]], dict]:
    """Admission at each connection count, in interleaved pairs; no worker runs."""
    results: list[dict[str, Any]] = []
    pairs: dict[int, list[verdicts.Pair]] = {}
    baseline = procs.Web("web-baseline", b.logdir, "bench.baseline_app:create_app()")
    with procs.serving(procs.Web("web-awooop", b.logdir)) as real, procs.serving(baseline):
        for conns in b.knobs.connections:

            def one_pair(k: int, conns: int = conns) -> verdicts.Pair:
                rows, pair = admission_pair(b, (real, baseline), ids, conns, k)
                results.extend(rows)
                return pair

            pairs[conns] = verdicts.measure_pairs(f"admission @{conns}", one_pair)
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
    log(f"raw Celery -c {c} #{k}: {info['per_s']:.0f} tasks/s  {procs.noise_text(info)}")
    return info


def awooop_batch(b: Bench, project_id: str, c: int, k: int) -> dict[str, Any]:
    """AwoooP's previous worker stopped, ``e2e_runs`` runs admitted with no worker running,
    then a new worker (``-c c``, left running as ``b.worker``) drains them."""
    assert b.web is not None and b.progress is not None
    b.stop_worker()
    n, progress, label = b.knobs.e2e_runs, b.progress, f"AwoooP -c {c} #{k}"
    info: dict[str, Any] = {"runs": n, "concurrency": c}
    done0, _, total0, _ = progress.counts()
    info["admit_per_s"] = b.admit(label, project_id, n, E2E_ADMIT_CONNS).rps
    if (total := progress.counts()[2]) != total0 + n:
        raise b.web.failure(f"{label}: {total - total0} runs admitted, expected {n}")
    since = progress.clock()
    b.worker = worker = procs.start_worker(f"worker-awooop-c{c}-{k}", b.logdir, c)

    def on_poll(done: int) -> None:  # the worker's memory once its first run is done
        if "rss_at_first_mib" not in info and done > done0:
            info["rss_at_first_mib"] = worker.rss_mib()

    started = time.perf_counter()
    with b.noise.measure(info):
        progress.wait(total, [worker, b.web], max(90.0, n / 20), on_poll)
    info["wall_s"] = time.perf_counter() - started
    info["worker_cpu_ms"] = worker.cpu_seconds() * 1000 / n
    info["seconds"] = progress.span(since)
    info["per_s"] = n / info["seconds"]
    log(f"{label}: {info['per_s']:.0f} noop-3 runs/s  {procs.noise_text(info)}")
    return info


def e2e_series(b: Bench, project_id: str, c: int) -> dict[str, Any]:
    """Raw Celery, AwoooP, raw Celery, AwoooP, … at ``-c c``; pair k is AwoooP's batch k over
    the mean of the raw rates either side of it (AwoooP's worker idling through the second)."""
    raws, batches = [raw_celery(b, c, 1)], []

    def one_pair(k: int) -> verdicts.Pair:
        batches.append(batch := awooop_batch(b, project_id, c, k))
        raws.append(raw_celery(b, c, k + 1))
        before, after = raws[-2], raws[-1]
        phases = {"raw Celery before": before, "AwoooP's batch": batch, "raw Celery after": after}
        return verdicts.Pair(
            {"e2e": ratio(batch["per_s"], (before["per_s"] + after["per_s"]) / 2)},
            verdicts.noise_reasons(phases, (before["per_s"], after["per_s"])),
        )

    pairs = verdicts.measure_pairs(f"end to end -c {c}", one_pair)
    median = verdicts.median(pairs, "e2e")
    log(f"end to end -c {c}: ratio {median:.2f} (median of the counted pairs)")
    return {"concurrency": c, "raw": raws, "batches": batches, "pairs": pairs, "ratio": median}


def bench_e2e(b: Bench, project_id: str) -> None:
    """The series at each concurrency (the last one's worker then runs the soak); commits,
    CPU and memory over the soak, into ``b.e2e``."""
    k_, meter, info = b.knobs, b.meter, b.e2e
    info.update(runs=k_.e2e_runs, soak_runs=k_.soak_runs, database=meter.database)
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
    watch, warm = database.SessionWatch(meter), None
    b.web = web = procs.Web("web-awooop-e2e", b.logdir)
    try:
        watch.start()
        web.wait()
        mem: dict[str, dict[str, float]] = {"web": {"start": web.rss_mib()}, "worker": {}}
        b.progress = database.Progress.runs(meter.url, [project_id], meter.tally)
        info["series"] = {}
        for c in k_.e2e_concurrency:
            b.stop_worker()
            info["series"][c] = series = e2e_series(b, project_id, c)
        assert b.worker is not None
        admitted = sum(len(s["batches"]) for s in info["series"].values()) * k_.e2e_runs
        info["per_s"] = per_s = series["batches"][-1]["per_s"]
        mem["worker"]["start"] = series["batches"][-1]["rss_at_first_mib"]
        mem["web"]["after_e2e"], mem["worker"]["after_e2e"] = web.rss_mib(), b.worker.rss_mib()
        soak = info["soak_runs"]
        if soak > 0 and per_s == per_s and (fits := max(100, int(per_s * SOAK_BUDGET_S))) < soak:
            log(f"soak: {soak} runs would take ~{soak / per_s:.0f} s; running {fits}")
            soak = info["soak_runs"] = fits
        if soak > 0:
            warm = soak_phase(b, project_id, soak, admitted + soak)
            mem["web"]["after_soak"] = web.rss_mib()
            mem["worker"]["after_soak"] = b.worker.rss_mib()
            # Raw Celery again right after the soak (AwoooP's worker idle), so that the CPU
            # ratio sets the soak beside the raw batches either side of it, as a pair does.
            info["raw_after_soak"] = raw_celery(b, series["concurrency"], len(series["raw"]) + 1)
        info["memory"] = mem
    finally:
        watch.stop()  # before our processes go: their sessions must look ours
        if b.progress is not None:
            b.progress.close()
        b.stop_worker()  # stopping closes every session, which flushes its statistics
        web.stop()
    cpu_per_run(info, series["raw"])
    window = info.get("soak_counted_window")
    started = watch.children_started(*window) if window else []
    count_commits(info, database.Count.between(before, meter.read()), warm, admitted, started)
    info["foreign_sessions"] = sorted(set(watch.foreign.values()))
    info["foreign_session_count"] = len(watch.foreign)
    if watch.error:
        log(f"(session watch failed: {watch.error})")


def soak_phase(b: Bench, project_id: str, soak: int, expected: int) -> tuple[Any, Any]:
    """``soak`` more runs on the warm web and worker, admitted while the worker is stopped,
    then drained by it: CPU per run and WAL flushes; the commit readings either side, each
    once the processes have idled long enough for their statistics to be flushed."""
    assert b.web is not None and b.worker is not None and b.progress is not None
    meter, info, web, worker = b.meter, b.e2e, b.web, b.worker
    wal_sql = "SELECT wal_sync FROM pg_stat_wal"
    time.sleep(STATS_IDLE_FLUSH_S)
    opened = time.time()
    warm_before, ((wal0,),) = meter.read(), database.query(meter.maintenance_url, wal_sql)
    groups = {
        "web": web.pids,
        "worker": worker.pids,
        "PostgreSQL": lambda: procs.postgres_pids(meter.maintenance_url, meter.database),
        "Redis": lambda: procs.redis_pids(b.r),
    }
    cpu0 = {name: procs.cpu_by_pid(pids()) for name, pids in groups.items()}
    t0 = time.perf_counter()
    # Admitted with the worker stopped, then drained, as raw Celery's batches are enqueued
    # and then drained: each side's CPU per item is read without the other using the CPUs.
    with worker.paused():
        result = b.admit("soak", project_id, soak, SOAK_CONNS, floor=120)
    if result.statuses.get(202, 0) != soak:
        raise web.failure(f"soak: only {result.statuses.get(202, 0)}/{soak} admitted")
    b.progress.wait(expected, [worker, web], max(60.0, 2 * soak / max(info["per_s"], 1.0)))
    info["soak_wall_s"] = time.perf_counter() - t0
    info["cpu_ms_per_run"] = {
        name: procs.cpu_delta(cpu0[name], procs.cpu_by_pid(pids())) * 1000 / soak
        for name, pids in groups.items()
    }
    time.sleep(STATS_IDLE_FLUSH_S)
    warm_after, ((wal1,),) = meter.read(), database.query(meter.maintenance_url, wal_sql)
    info["soak_counted_window"] = (opened, time.time())
    info["wal_syncs"] = int(wal1) - int(wal0)
    info["wal_flushes_per_run"] = info["wal_syncs"] / soak
    return warm_before, warm_after


def cpu_per_run(info: dict[str, Any], raw_batches: list[dict[str, Any]]) -> None:
    """AwoooP's CPU per run over the soak against raw Celery's per task: the mean of the raw
    batches either side of the soak (the last series' last one and the one after the soak),
    since this machine's speed drifts by a tenth or more within minutes. Without a soak, the
    median of the last series' raw batches."""
    around = [raw_batches[-1], info["raw_after_soak"]] if "raw_after_soak" in info else raw_batches
    raw_cpu = [m["cpu_ms"] for m in around if "cpu_ms" in m]
    info["raw_cpu_ms"] = statistics.median(raw_cpu) if raw_cpu else float("nan")
    if "cpu_ms_per_run" in info:
        info["cpu_ms"] = sum(info["cpu_ms_per_run"].values())
        info["cpu_ratio"] = ratio(info["cpu_ms"], info["raw_cpu_ms"])


def count_commits(
    info: dict[str, Any], whole: database.Count, warm: Any, admitted: int, started: list[str]
) -> None:
    """Commits per run over the soak (warm processes) when there was one, else over the
    whole phase (``whole``, the processes' start-up included). ``started``: the sessions of
    the bench's processes seen to start while the soak was counted."""
    soak = info["soak_runs"] if warm is not None else 0
    info["commits_whole_window"] = {"total": whole.runs, "runs": admitted + soak}
    counted = soak if warm is not None else admitted
    count = database.Count.between(*warm) if warm is not None else whole
    info.update(
        commits_counted_runs=counted,
        commits_sessions=count.sessions,
        commits_sessions_seen=started,
        commits=count.total,
        commits_runs=count.runs,
        commits_background={k: getattr(count, k) for k in ("liveness", "auth_loads", "harness")},
        background_text=count.background_text(),
        commits_per_run=count.per_run(counted),
    )
    failures = []
    if count.runs > TARGETS["commits_per_run"] * counted:
        failures.append(
            f"PostgreSQL commits per run {info['commits_per_run']:.3f} > "
            f"{TARGETS['commits_per_run']:.0f}: {count.runs} commits for {counted} runs "
            f"after {count.background_text()}"
        )
    if warm is not None and count.sessions:
        seen = f" ({', '.join(started)})" if started else ""
        failures.append(
            f"commit counting: {count.sessions} sessions started while the soak was "
            f"counted{seen}; their set-up commits are in the figure, which is not exact"
        )
    if failures:
        info.setdefault("target_failures", []).extend(failures)


# --- verdicts --------------------------------------------------------------------------------


def all_failures(results: list[dict[str, Any]], e2e: dict[str, Any]) -> list[str]:
    return [line for res in results for line in res.get("failures", [])] + e2e.get("failures", [])


def failed_answers(results: list[dict[str, Any]], e2e: dict[str, Any]) -> int:
    """Non-2xx answers and dropped connections, all phases together."""
    return sum(r["non_2xx"] + r["errors"] for r in results + [e2e] if "non_2xx" in r)


def durability_failures(machine: dict[str, str]) -> list[str]:
    """The targets hold on a durable database (fsync on, synchronous_commit on)."""
    off = [f"{k}=off" for k in ("fsync", "synchronous_commit") if machine.get(k) == "off"]
    if not off:
        return []
    return [
        f"PostgreSQL is not durable ({', '.join(off)}): the targets are measured on a durable "
        "database, and every figure that commits is flattered"
    ]


def target_failures(machine: dict[str, str], e2e: dict[str, Any]) -> list[str]:
    """FAIL lines of the summary besides the answers: durability, commits per run."""
    return durability_failures(machine) + e2e.get("target_failures", [])


def growth_pct(memory: dict[str, float], since: str, until: str) -> float:
    return (ratio(memory.get(until), memory.get(since)) - 1) * 100


def ratios(results: list[dict], pairs: dict[int, list], e2e: dict[str, Any], conns: tuple) -> list:
    """(what, measured, target text, verdict); each ratio the median of its counted pairs."""
    rows = []
    for label, key, target in (
        ("AwoooP new events / baseline", "new", "admission_ratio"),
        ("AwoooP duplicates / baseline new events", "duplicate", "duplicate_vs_baseline"),
        ("AwoooP duplicates / new events", "duplicate_own", None),  # what a duplicate costs
    ):
        for c in conns:
            what, value = f"{label}, req/s @{c}", verdicts.median(pairs.get(c, []), key)
            row = target_row(what, value, TARGETS[target], True) if target else None
            rows.append(row or (what, value, "(none)", "-"))
    c = max(conns, default=0)
    what, value = f"p99 AwoooP new events / baseline @{c}", verdicts.median(pairs.get(c, []), "p99")
    rows.append(target_row(what, value, TARGETS["p99_ratio"], False))
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
    t = TARGETS["memory_growth_pct"]
    for side in ("web", "worker"):
        value = growth_pct(e2e.get("memory", {}).get(side, {}), "after_e2e", "after_soak")
        what = f"{side} RSS growth over the soak, %"
        rows.append((what, value, f"< {t:.0f}", verdict(value, t, False)))
    return rows


def noise_lines(pairs: dict[int, list[verdicts.Pair]], e2e: dict[str, Any]) -> list[str]:
    """Which pairs were measured again, or counted although noisy, and why."""
    series = [(f"admission @{c}", s) for c, s in sorted(pairs.items())]
    series += [(f"end to end -c {c}", s["pairs"]) for c, s in sorted(e2e.get("series", {}).items())]
    return [line for what, s in series for line in verdicts.describe(s, what)]


# --- report ----------------------------------------------------------------------------------

# The page down to MARKER, formatted with the module's names and render_markdown's fields. A
# backslash at the end of a line continues its paragraph or table row.
PAGE = """\
# Benchmarks

What AwoooP costs, measured against what a user could run instead. Four commands write this \
page: `make bench` the sections down to "Running it" (admission over HTTP against a plain Flask \
baseline, runs end to end against raw Celery, memory), `make bench-retention`, `make \
bench-peers` and `make bench-growth` a section each below. A target is a ratio of two figures \
measured in the same run, so the machine's speed cancels out; a benchmark is not a test, and a \
missed target fails nothing. How the benches came to measure what they do, profiles and \
earlier runs: [bench/NOTES.md](../bench/NOTES.md).

## Machine

| | |
|---|---|
| date | {m[date]} |
| CPUs (`nproc`) | {m[cpus]} × {m[cpu_model]} |
| memory | {m[memory]} |
| kernel | {m[kernel]} |
| Python | {m[python]} |
| PostgreSQL | {m[postgresql]} |
| Redis | {m[redis]} |
| load average at start | {m[load_before]} |
| code measured | {m[code]} |

Everything — load generator, gunicorn, Celery, PostgreSQL, Redis — shares these CPUs. "other \
CPU" is the share of all CPUs that user-space processes outside the benchmark (and outside \
PostgreSQL/Redis) used during a phase; above a few percent the figures are noisy. "steal" is \
the share the hypervisor of a virtual machine gave to other machines while this one had work: \
as noisy. "I/O CPU" is \
the kernel's threads' share: the writes and flushes of the durable commits, and whatever else \
the kernel does meanwhile (raw Celery's batches, with no database, show some too). It is \
counted in neither side's CPU, and a pair is not measured again for it.

## Targets

| measure | measured | target | |
|---|---:|---|---|
{targets}{failures}

{recent}

Compared: (a) AwoooP's admission of an event over HTTP against a plain Flask app that writes \
its dedupe and run rows (not its history row); (b) `noop-3` runs end to end against raw Celery \
no-op tasks on the same broker, then a soak for CPU, PostgreSQL commits and WAL flushes per \
run; (c) memory over that soak. How it is measured: {NOTES_LINK}.

Settings: {k.warmup:g} s warm-up, then {k.duration:g} s measured per admission row; batches of \
{k.raw_tasks:,} raw Celery tasks and of {k.e2e_runs:,} `noop-3` runs (admitted over \
{E2E_ADMIT_CONNS} connections before ONE worker starts); a soak of {soak_runs} runs \
(admitted over {SOAK_CONNS} connections while that worker is stopped, then drained by it, cut \
to what fits in about {SOAK_BUDGET_S:.0f} s), \
commits read after {STATS_IDLE_FLUSH_S:.0f} s idle; scratch database `{e[database]}`.

Each ratio is the median of {verdicts.PAIRS} interleaved pairs; a pair with more than \
{verdicts.OTHER_CPU_MAX_PCT:.0f} % other CPU or steal, or (end to end) raw Celery rates more than \
{verdicts.RAW_APART_MAX_PCT:.0f} % apart either side of AwoooP's batch, is measured again, up \
to {verdicts.MAX_PAIRS} pairs. {noisy}

## (a) Admission over HTTP

| app | events | pair | conns | req/s | p50 ms | p99 ms | non-2xx | web CPU ms/req | \
{report.NOISE_HEADER} |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
{admission}

| pairs | pair | AwoooP new events / baseline | | noisy because |
|---|---:|---:|---|---|
{admission_pairs}

## (b) End to end

| | count | per second | seconds | worker CPU ms/item, start-up included | \
{report.NOISE_HEADER} |
|---|---:|---:|---:|---:|---:|---:|---:|
{batches}

| pairs | pair | AwoooP / mean of the raw rates either side | | noisy because |
|---|---:|---:|---|---|
{e2e_pairs}

| CPU over the soak, ms per run | |
|---|---:|
| web | {cpu[web]} |
| worker | {cpu[worker]} |
| PostgreSQL | {cpu[PostgreSQL]} |
| Redis | {cpu[Redis]} |
| AwoooP, all four | {cpu[all]} |
| raw Celery per task: producer + worker + Redis (the -c {last_c} raw batches either side \
of the soak) | {cpu[raw]} |

| PostgreSQL commits, counted over the soak | |
|---|---|
| committed in the bench's database | {e[commits]} |
| not run work, subtracted | {e[background_text]} |
| left, for the {e[commits_counted_runs]} runs of the soak (admission included) | \
{e[commits_runs]} |
| over the whole phase, the processes' start-up included | {whole[total]} for {whole[runs]} runs |
| WAL flushes meanwhile, server-wide (`pg_stat_wal.wal_sync`) | {e[wal_syncs]} = \
{wal_flushes_per_run} per run |
| an idle window of 2 s before it (must be 0) | {e[idle_commits]} |
| sessions started in the counted window (must be 0) | {e[commits_sessions]} |
| sessions not of the benchmark seen on its database | {e[foreign_session_count]}{foreign} |

## (c) Memory

| process | RSS at start MiB | after e2e batch | after soak | growth over e2e batch | \
growth over soak |
|---|---:|---:|---:|---:|---:|
| web (gunicorn master + workers) | {memory[web]} |
| worker (celery parent + child) | {memory[worker]} |

## Running it

`make bench` (`python -m bench.run`, six to eight minutes) rewrites this file down to here and \
keeps the other benches' sections below; its knobs: {NOTES_LINK}.

{MARKER}
"""
NOTES_LINK = "[bench/NOTES.md](../bench/NOTES.md#make-bench-benchrunpy)"


class Figures(dict):  # type: ignore[type-arg]
    """Figures for PAGE: a missing one reads n/a."""

    def __missing__(self, key: str) -> str:
        return "n/a"


def md_rows(rows: list[Any]) -> str:
    return "\n".join(report.table_rows(rows))


def _digits(what: str) -> int:
    if "commits" in what or "WAL" in what:
        return 3
    return 1 if "%" in what else 0 if "non-2xx" in what else 2


def pair_rows(labelled: list[tuple[str, list[verdicts.Pair]]], key: str) -> str:
    def mark(p: verdicts.Pair, last: bool) -> str:
        if not p.noisy:
            return "counted" if p.counted else "not needed"
        return "counted, NOISY" if p.counted else "not counted" if last else "measured again"

    return md_rows(
        [
            (label, i, fmt(p.ratios[key], 2), mark(p, i == len(s)), "; ".join(p.reasons) or "-")
            for label, s in labelled
            for i, p in enumerate(s, 1)
        ]
    )


def batch_rows(series: dict[str, Any]) -> list[str]:
    """A series' measurements in the order taken: raw Celery, AwoooP, raw Celery, …"""
    c, raws = f"-c {series['concurrency']}", series["raw"]
    chain = [(f"raw Celery {c}, batch 1", raws[0])]
    for k, batch in enumerate(series["batches"], 1):
        chain += [
            (f"AwoooP noop-3 {c}, batch {k}", batch),
            (f"raw Celery {c}, batch {k + 1}", raws[k]),
        ]
    return [
        f"{label} | {m.get('tasks', m.get('runs'))} | {fmt(m.get('per_s'), 0)} | "
        f"{fmt(m.get('seconds'), 2)} | {fmt(m.get('worker_cpu_ms'), 2)} | {report.noise_cells(m)}"
        for label, m in chain
    ]


def render_markdown(
    machine: dict[str, str],
    knobs: Knobs,
    results: list[dict[str, Any]],
    pairs: dict[int, list[verdicts.Pair]],
    e2e: dict[str, Any],
    rows: list[tuple[str, float, str, str]],
    recent: list[dict[str, Any]],
) -> str:
    """The page down to MARKER (printed, and written above the other benches' sections);
    ``recent``: the last full runs, this one included, side by side (none: left out)."""
    nan, all_series = float("nan"), sorted(e2e.get("series", {}).items())
    failures = all_failures(results, e2e) + target_failures(machine, e2e)
    noisy = noise_lines(pairs, e2e)
    cpu = Figures({name: f"{v:.2f}" for name, v in e2e.get("cpu_ms_per_run", {}).items()})
    cpu.update(all=fmt(e2e.get("cpu_ms", nan), 2), raw=fmt(e2e.get("raw_cpu_ms", nan), 2))
    memory = {}
    for side in ("web", "worker"):
        m = e2e.get("memory", {}).get(side, {})
        cells = [fmt(m.get(k, nan), 1) for k in ("start", "after_e2e", "after_soak")]
        growth = (growth_pct(m, "start", "after_e2e"), growth_pct(m, "after_e2e", "after_soak"))
        cells += [f"{fmt(g, 1)} %" for g in growth]
        memory[side] = " | ".join(cells)
    admission = [
        f"{'AwoooP' if r['app'] == 'awooop' else 'baseline'} | {r['kind']} | {r.get('pair', 1)} | "
        f"{r['connections']} | {r['rps']:,.0f} | {r['p50']:.1f} | {r['p99']:.1f} | "
        f"{r['non_2xx']} | {r['web_cpu_ms']:.2f} | {report.noise_cells(r)}"
        for r in results
    ]
    foreign = e2e.get("foreign_sessions")
    page = PAGE.format(
        **globals(),
        MARKER=report.MARKER,
        k=knobs,
        last_c=knobs.e2e_concurrency[-1],
        m=machine,
        e=Figures(e2e),
        soak_runs=fmt(float(e2e["soak_runs"]) if "soak_runs" in e2e else None),
        whole=Figures(e2e.get("commits_whole_window") or {}),
        cpu=cpu,
        memory=memory,
        wal_flushes_per_run=fmt(e2e.get("wal_flushes_per_run", nan), 3),
        foreign=f": {', '.join(foreign)}" if foreign else "",
        targets=md_rows([(w, fmt(v, _digits(w)), report.md_target(t), vd) for w, v, t, vd in rows]),
        recent=f"The last full runs of `make bench` (at most {report.RECENT_RUNS}; this one "
        "last; ✗: missed):\n\n" + report.recent_runs_table(recent)
        if recent
        else "",
        failures="\n\n" + "\n".join(f"- **FAIL** {line}" for line in failures) if failures else "",
        noisy="Pairs measured again or counted noisy:\n\n"
        + "\n".join(f"- {line}" for line in noisy)
        if noisy
        else "Every counted pair was clean.",
        admission=md_rows(admission),
        admission_pairs=pair_rows([(f"@{c}", s) for c, s in sorted(pairs.items())], "new"),
        batches=md_rows([row for _, series in all_series for row in batch_rows(series)]),
        e2e_pairs=pair_rows([(f"-c {c}", s["pairs"]) for c, s in all_series], "e2e"),
    )
    return re.sub(r"\n{3,}", "\n\n", page)  # a table without rows is followed by one blank


def history_path(out: Path) -> Path:
    """Where the last full runs' target figures are kept: beside the page
    (docs/benchmarks.md: docs/benchmarks.runs.json)."""
    return out.with_suffix(".runs.json")


def this_run(machine: dict[str, str], rows: list[tuple[str, float, str, str]]) -> dict[str, Any]:
    targets = [[w, fmt(v, _digits(w)), t, vd] for w, v, t, vd in rows if t != "(none)"]
    return {"date": machine["date"], "code": machine["code"], "targets": targets}


# --- main ------------------------------------------------------------------------------------


def main() -> None:
    from awooop.config import Settings
    from bench import raw_celery

    knobs, settings = report.configure("bench", lambda: (Knobs(), Settings.from_env()))
    out = report.output()
    tag = f"bench-{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(2)}"
    ids = (tag, f"{tag}-base", f"{tag}-e2e")  # AwoooP's, the baseline's, end to end
    scratch = database.Scratch(settings.database_url, report.keep())
    r = redis.Redis.from_url(settings.broker_url, socket_timeout=10)
    try:
        with report.session("bench", knobs.timeout) as logdir:
            machine = report.machine_info(settings.database_url, settings.broker_url)
            name, url = scratch.migrated("awooop_bench")
            database.autovacuum_off(url)
            # Every child process inherits these (child_env copies os.environ).
            os.environ["AWOOOP_DATABASE_URL"] = url
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir := logdir / "metrics")
            metrics_dir.mkdir()
            meter = database.Meter(settings.database_url, url, name, metrics_dir)
            tokens = database.create_projects(url, list(ids))
            b = Bench(knobs, logdir, r, procs.Noise(procs.running_pids), tokens, meter)
            database.vacuum_analyze(url, meter.maintenance_url)  # out of every window
            results, pairs, e2e = [], {}, b.e2e
            if "admission" in knobs.phases:
                results, pairs = bench_admission(b, ids[:2])
            if "e2e" in knobs.phases:
                database.vacuum_analyze(url, meter.maintenance_url)  # admission's dead rows
                bench_e2e(b, ids[2])
            rows = ratios(results, pairs, e2e, knobs.connections)
            full = set(knobs.phases) == set(PHASES)
            recent = report.recent_runs(history_path(out), this_run(machine, rows)) if full else []
            markdown = render_markdown(machine, knobs, results, pairs, e2e, rows, recent)
            print(
                markdown, *report.failure_summary(all_failures(results, e2e)), sep="\n", flush=True
            )
            raw = {"machine": machine, "admission": results, "pairs": pairs, "e2e": e2e}
            report.save_results(logdir, raw)
            if report.partial(knobs.phases, PHASES, out):
                return
            report.write_page(out, markdown)
            log(f"wrote {out} (raw figures: {logdir}/results.json)")
    finally:
        # Interrupted runs leave messages behind; they nudge runs that are about to go.
        with contextlib.suppress(redis.RedisError):
            database.purge_queue(r)
            database.purge_queue(r, raw_celery.QUEUE)
            r.delete(RUN_LIST, *raw_celery.KEYS)
        scratch.close()


if __name__ == "__main__":
    main()
