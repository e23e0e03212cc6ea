"""``make bench-retention`` (``python -m bench.retention``): a database with a month of history
(1,000,000 finished runs, 10,000,000 dedupe rows, generated with SQL) against an empty one:
store and HTTP latency, ``/metrics`` scrapes, the sweeps catching up. How: bench/NOTES.md.

Knobs: BENCH_RETENTION_RUNS (1,000,000), BENCH_RETENTION_DEDUPE (10,000,000),
BENCH_RETENTION_SAMPLES (3000), BENCH_DURATION (s per HTTP row, 6), BENCH_RETENTION_SCRAPES
(50), BENCH_RETENTION_GAP (s between sweep passes, 10), BENCH_KEEP=1, BENCH_OUTPUT.
BENCH_RETENTION_QUICK=1: a smoke test of tiny sizes (20,000 runs, 100,000 dedupe rows, 200
samples, 1 s rows, 5 scrapes, 1 s gaps; about a minute) that writes markdown only when
BENCH_OUTPUT is set. At full size it takes about half an hour on 2 cores.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import json
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench import database, load, procs, report
from bench.report import BenchError, env_float, env_int, fmt, knob, log

QUICK = "BENCH_RETENTION_QUICK"
BEGIN = "<!-- retention:begin (written by `make bench-retention`) -->"
END = "<!-- retention:end -->"
TARGET_LATENCY_RATIO = 1.20
TARGET_SCRAPE_MS = 100.0
KINDS = ("empty", "loaded")
BENCH_PROJECT = "bench"  # the measured admissions and claims
PROJECTS = ("gen-0", "gen-1", "gen-2", "gen-3")  # the generated history
LONG_PROJECT = "gen-3"  # keeps its runs 90 days
SPAN_DAYS = 40.0
DEDUPE_SPAN_DAYS = 8.0
WAITING_RUNS = 1000
OUTBOX_ROWS = 200_000
CHUNK = 1_000_000
WARM_UP = 300
HTTP_CONNECTIONS = 16
HTTP_WARMUP = 1.5
TABLES = ("awooop_run_state", "awooop_run_event", "awooop_channel_event_dedupe", "awooop_outbox")
OLD_SCRAPE_READ = "SELECT status, count(*) FROM awooop_run_state GROUP BY status"


@dataclass(frozen=True)
class Knobs:
    runs: int = knob(env_int, "BENCH_RETENTION_RUNS", 1_000_000, QUICK, 20_000)
    dedupe: int = knob(env_int, "BENCH_RETENTION_DEDUPE", 10_000_000, QUICK, 100_000)
    samples: int = knob(env_int, "BENCH_RETENTION_SAMPLES", 3000, QUICK, 200)
    duration: float = knob(env_float, "BENCH_DURATION", 6, QUICK, 1)
    scrapes: int = knob(env_int, "BENCH_RETENTION_SCRAPES", 50, QUICK, 5)
    gap: float = knob(env_float, "BENCH_RETENTION_GAP", 10, QUICK, 1)
    # None: print only (quick mode without BENCH_OUTPUT)
    output: Path | None = field(default_factory=lambda: report.quick_output(QUICK))


def summary(values: list[float]) -> dict[str, float]:
    """Count, mean, p50, p90, p99 and max of durations in seconds, in ms."""
    return {
        "n": len(values),
        "mean": statistics.fmean(values) * 1000 if values else float("nan"),
        "p50": load.percentile_ms(values, 0.50),
        "p90": load.percentile_ms(values, 0.90),
        "p99": load.percentile_ms(values, 0.99),
        "max": max(values) * 1000 if values else float("nan"),
    }


# --- generating a month of history ---------------------------------------------------------

_TEMPLATE_RUN = """
CREATE TEMP TABLE template_run AS
SELECT workflow_name, workflow_version, workflow_digest, input, output, saga_steps, version,
       lease_epoch, attempt_count, worker_id, finished_at - created_at AS took
FROM awooop_run_state WHERE run_id = %(r)s;
CREATE TEMP TABLE template_event AS
SELECT kind, from_status, to_status, trigger, trigger_id, actor, detail,
       at - (SELECT created_at FROM awooop_run_state WHERE run_id = %(r)s) AS after
FROM awooop_run_event WHERE run_id = %(r)s;
DELETE FROM awooop_run_state WHERE run_id = %(r)s;
DELETE FROM awooop_channel_event_dedupe WHERE run_id = %(r)s;
"""

# Runs g = lo..hi of n, created one after the other over SPAN_DAYS up to now; input keeps its
# own event key (the retention sweep finds the dedupe row by it).
_RUNS = f"""
INSERT INTO awooop_run_state
    (run_id, project_id, channel_type, workflow_name, workflow_version, workflow_digest,
     status, saga_status, input, output, attempt_count, lease_epoch, worker_id, saga_steps,
     version, created_at, updated_at, finished_at, available_at, enqueued_at, heartbeat_at)
SELECT gen_random_uuid(), 'gen-' || (g %% 4), 'api', t.workflow_name, t.workflow_version,
       t.workflow_digest, s.status, s.saga_status,
       jsonb_set(t.input, '{{provider_event_id}}', to_jsonb('gen-' || g)),
       t.output, t.attempt_count, t.lease_epoch, t.worker_id, t.saga_steps, t.version,
       c.at, c.at + t.took, c.at + t.took, c.at, c.at, c.at
FROM generate_series(%(lo)s, %(hi)s) AS g
CROSS JOIN template_run t
CROSS JOIN LATERAL (
    SELECT now() - {SPAN_DAYS} * interval '1 day' * (1 - g::float8 / %(n)s) AS at
) c
CROSS JOIN LATERAL (
    SELECT CASE WHEN g %% 50 = 0 THEN 'FAILED' WHEN g %% 100 = 1 THEN 'CANCELLED'
                ELSE 'COMPLETED' END AS status,
           CASE WHEN g %% 50 = 0 OR g %% 100 = 1 THEN 'COMPENSATED'
                ELSE 'COMPLETED' END AS saga_status
) s
"""

_EVENTS = """
INSERT INTO awooop_run_event
    (run_id, kind, from_status, to_status, trigger, trigger_id, actor, detail, at)
SELECT r.run_id, e.kind, e.from_status, e.to_status, e.trigger, e.trigger_id, e.actor,
       e.detail, r.created_at + e.after
FROM awooop_run_state r CROSS JOIN template_event e
WHERE r.project_id LIKE 'gen-%%' AND r.created_at >= %(lo)s AND r.created_at < %(hi)s
"""

_WAITING = f"""
INSERT INTO awooop_run_state
    (run_id, project_id, channel_type, workflow_name, workflow_version, workflow_digest,
     status, saga_status, input, created_at, updated_at)
SELECT gen_random_uuid(), 'gen-' || (g % 4), 'api', t.workflow_name, t.workflow_version,
       t.workflow_digest, 'WAITING_APPROVAL', 'RUNNING',
       jsonb_set(t.input, '{{provider_event_id}}', to_jsonb('waiting-' || g)),
       now() - interval '1 hour' * g / {WAITING_RUNS}, now()
FROM generate_series(1, {WAITING_RUNS}) AS g CROSS JOIN template_run t
"""

# The dedupe rows of the runs of the last DEDUPE_SPAN_DAYS (same key, run and time) ...
_RUN_DEDUPE = f"""
INSERT INTO awooop_channel_event_dedupe
    (project_id, channel_type, provider_event_id, run_id, request_digest, created_at)
SELECT project_id, channel_type, input ->> 'provider_event_id', run_id,
       md5(run_id::text) || md5(project_id), created_at
FROM awooop_run_state
WHERE project_id LIKE 'gen-%'
  AND created_at > now() - {DEDUPE_SPAN_DAYS} * interval '1 day'
"""
# ... and other events' rows (their runs long gone, or decisions), g = lo..hi of n.
_OTHER_DEDUPE = f"""
INSERT INTO awooop_channel_event_dedupe
    (project_id, channel_type, provider_event_id, run_id, request_digest, created_at)
SELECT 'gen-' || (g %% 4), 'telegram', '7000000:' || g, gen_random_uuid(),
       md5(g::text) || md5((g + 1)::text),
       now() - {DEDUPE_SPAN_DAYS} * interval '1 day' * (1 - g::float8 / %(n)s)
FROM generate_series(%(lo)s, %(hi)s) AS g
"""

_OUTBOX = f"""
INSERT INTO awooop_outbox
    (project_id, run_id, channel, purpose, payload, status, attempts, created_at, sent_at)
SELECT 'gen-' || (g % 4), gen_random_uuid(), 'webhook', 'run_outcome',
       jsonb_build_object('url', 'https://hooks.example/awooop', 'status', 'COMPLETED'),
       'SENT', 1, c.at, c.at
FROM generate_series(1, {OUTBOX_ROWS}) AS g
CROSS JOIN LATERAL (
    SELECT now() - {SPAN_DAYS} * interval '1 day' * (1 - g::float8 / {OUTBOX_ROWS}) AS at
) c
"""

# What the sweeps have to delete: runs past retention, dedupe rows past their TTL, messages
# sent or parked past theirs.
_BACKLOG = """
SELECT (SELECT count(*) FROM awooop_run_state r JOIN awooop_project p USING (project_id)
        WHERE r.status IN ('COMPLETED', 'FAILED', 'CANCELLED')
          AND r.finished_at < now() - COALESCE(p.run_retention_days, %(runs)s)
                                      * interval '1 day'),
       (SELECT count(*) FROM awooop_channel_event_dedupe
        WHERE created_at < now() - make_interval(secs => %(dedupe)s)),
       (SELECT count(*) FROM awooop_outbox WHERE status IN ('SENT', 'PARKED')
          AND created_at < now() - %(outbox)s * interval '1 day')
"""

# The bench project's PENDING runs COMPLETED: a claimable backlog left behind would make later
# claims slower (the claim is planned over the claimable index).
_FINISH_PENDING = """
UPDATE awooop_run_state SET status = 'COMPLETED', saga_status = 'COMPLETED', finished_at = now(),
       updated_at = now()
WHERE project_id = %s AND status = 'PENDING'
"""


def _chunks(n: int) -> Iterator[tuple[int, int]]:
    for lo in range(1, n + 1, CHUNK):
        yield lo, min(n, lo + CHUNK - 1)


def _scalar(cur: Any, sql: str) -> int:
    cur.execute(sql)
    return int(cur.fetchone()[0])


@contextlib.contextmanager
def _timed(timings: dict[str, Any], key: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    timings[key] = time.perf_counter() - t0
    log(f"  {key.removesuffix('_s')}: {timings[key]:.0f} s")


def template_run(url: str, settings: Any) -> Any:
    """A ``noop-3`` run the runner drove to COMPLETED: the run every generated one copies."""
    from awooop import db
    from awooop.engine import lease, runner

    store = database.Store(url, settings)
    run_id = store.admit(PROJECTS[0], "template")
    store.close()
    engine = db.make_engine(url, pool_size=2, settings=settings)
    outcome = runner.execute(engine, settings, run_id)
    lease.stop_keeper()
    engine.dispose()
    if outcome != runner.Outcome.COMPLETED:
        raise BenchError(f"the template run ended {outcome}")
    return run_id


def generate(url: str, settings: Any, knobs: Knobs) -> dict[str, Any]:
    """Fill the loaded database; how long each part took and what it holds."""
    template = template_run(url, settings)
    g: dict[str, Any] = {}
    t_all = time.perf_counter()
    with database.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SET synchronous_commit = on")
        cur.execute(_TEMPLATE_RUN, {"r": str(template)})
        g["events_per_run"] = _scalar(cur, "SELECT count(*) FROM template_event")
        with _timed(g, "runs_s"):
            for lo, hi in _chunks(knobs.runs):
                cur.execute(_RUNS, {"lo": lo, "hi": hi, "n": knobs.runs})
        with _timed(g, "events_s"):  # history rows in slices of creation time
            cur.execute(
                "SELECT min(created_at), max(created_at) + interval '1 second'"
                " FROM awooop_run_state"
            )
            at, last = cur.fetchone()
            step = (last - at) / max(1, knobs.runs // CHUNK)
            while at < last:
                cur.execute(_EVENTS, {"lo": at, "hi": at + step})
                at += step
            g["events"] = _scalar(cur, "SELECT count(*) FROM awooop_run_event")
        cur.execute(_WAITING)
        cur.execute(
            "UPDATE awooop_project SET run_retention_days = 90 WHERE project_id = %s",
            (LONG_PROJECT,),
        )
        with _timed(g, "dedupe_s"):
            cur.execute(_RUN_DEDUPE)
            g["dedupe_linked"] = cur.rowcount
            others = max(0, knobs.dedupe - cur.rowcount)
            for lo, hi in _chunks(others):
                cur.execute(_OTHER_DEDUPE, {"lo": lo, "hi": hi, "n": others})
        with _timed(g, "outbox_s"):
            cur.execute(_OUTBOX)
        with _timed(g, "vacuum_s"):
            cur.execute("VACUUM (ANALYZE)")
        g["total_s"] = time.perf_counter() - t_all
        g["counts"] = {table: _scalar(cur, f"SELECT count(*) FROM {table}") for table in TABLES}
        g["database_bytes"] = _scalar(cur, "SELECT pg_database_size(current_database())")
    return g


def backlog(url: str, settings: Any) -> dict[str, int]:
    """How many rows are past their age: what the sweeps have to delete."""
    args = {
        "runs": settings.run_retention_days,
        "dedupe": settings.dedupe_ttl_seconds,
        "outbox": settings.outbox_retention_days,
    }
    runs, dedupe, outbox = database.query(url, _BACKLOG, args)[0]
    return {"runs": int(runs), "dedupe": int(dedupe), "outbox": int(outbox)}


# --- latency: the store, HTTP, /metrics ----------------------------------------------------


def op_summary(samples: list[tuple[float, float]]) -> dict[str, Any]:
    """The summaries of (admission, claim) samples."""
    return {
        "admission": summary([a for a, _ in samples]),
        "claim": summary([c for _, c in samples]),
    }


def measure_store(stores: dict[str, database.Store], n: int) -> dict[str, Any]:
    """``n`` admissions, each followed by the claim of its run, on each database, after
    ``WARM_UP`` untimed ones; the databases alternate operation by operation (and which goes
    first) so both see the same moments of this shared machine."""
    for store in stores.values():
        for _ in range(WARM_UP):
            store.admit_and_claim(BENCH_PROJECT)
    samples: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    for i in range(n):
        for kind in KINDS if i % 2 == 0 else KINDS[::-1]:
            _, admission, claim = stores[kind].admit_and_claim(BENCH_PROJECT)
            samples[kind].append((admission, claim))
    for store in stores.values():
        store.finish_claimed()
    return {kind: op_summary(pairs) for kind, pairs in samples.items()}


def measure_http(webs: dict[str, procs.Web], tokens: dict[str, Any], seconds: float) -> dict:
    """Admission over HTTP, one row per database in the order empty, loaded, loaded, empty;
    each database's figures the means of its two rows."""
    rows: dict[str, list[load.LoadResult]] = {kind: [] for kind in KINDS}
    for kind in (*KINDS, *KINDS[::-1]):
        source = load.events({BENCH_PROJECT: tokens[kind][BENCH_PROJECT]}, [BENCH_PROJECT])
        result = webs[kind].run(source, HTTP_CONNECTIONS, duration=seconds, warmup=HTTP_WARMUP)
        rows[kind].append(result)
        log(f"http {kind:<6}: {result.summary()}")
    return {
        kind: {k: statistics.fmean(getattr(r, k) for r in results) for k in ("rps", "p50", "p99")}
        for kind, results in rows.items()
    }


def scrape_times(port: int, n: int) -> list[float]:
    """``n`` ``GET /metrics`` in a row on one connection, after 3 untimed ones (they open
    pooled connections); the last must say that the database answered."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times, body = [], ""
    for i in range(n + 3):
        t0 = time.perf_counter()
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read().decode()
        if response.status != 200:
            raise BenchError(f"/metrics answered {response.status}")
        if i >= 3:
            times.append(time.perf_counter() - t0)
    conn.close()
    if "awooop_metrics_database_up 1.0" not in body:
        raise BenchError(f"/metrics on port {port} could not read the database")
    return times


def query_times(url: str, sqls: list[str], n: int) -> list[float]:
    """Each sample: the statements one after the other, on one connection."""
    times = []
    with database.connect(url) as conn, conn.cursor() as cur:
        for _ in range(n):
            t0 = time.perf_counter()
            for sql in sqls:
                cur.execute(sql)
                cur.fetchall()
            times.append(time.perf_counter() - t0)
    return times


def measure_web(
    urls: dict[str, str], tokens: dict[str, Any], knobs: Knobs, logdir: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A gunicorn per database: admission over HTTP, then ``/metrics`` scrapes; then the
    database reads of a scrape, and the read they replaced, on their own."""
    from awooop.store import monitoring

    webs = {}
    for kind, url in urls.items():
        metrics_dir = logdir / f"metrics-{kind}"
        metrics_dir.mkdir()
        env = {"AWOOOP_DATABASE_URL": url, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
        webs[kind] = procs.Web(f"web-{kind}", logdir, **env)
    for web in webs.values():
        web.wait()
    http_stats = measure_http(webs, tokens, knobs.duration)
    scrape = {kind: summary(scrape_times(web.port, knobs.scrapes)) for kind, web in webs.items()}
    reads = [str(monitoring.RUNS_BY_STATUS), str(monitoring.OUTBOX_BACKLOG)]
    for kind, url in urls.items():
        scrape[f"{kind}_query"] = summary(query_times(url, reads, knobs.scrapes))
        scrape[f"old_{kind}"] = summary(query_times(url, [OLD_SCRAPE_READ], 10))
    log("scrape p50 ms: " + ", ".join(f"{k} {v['p50']:.2f}" for k, v in scrape.items()))
    for web in webs.values():
        web.stop()
    return http_stats, scrape


# --- the sweeps, in a process of their own -------------------------------------------------

_SWEEP = """
import json, sys, time
from awooop import db
from awooop.config import Settings
from awooop.engine import sweeps
settings = Settings.from_env(required=("database_url",))
engine = db.make_engine(settings.database_url, pool_size=2, role=db.SWEEPS, settings=settings)
what, gap, out = sys.argv[1], float(sys.argv[2]), open(sys.argv[3], "w")
while True:
    t0 = time.time()
    if what == "retention":
        done = sweeps.retention_once(engine, settings)
    else:
        done = {"awooop_channel_event_dedupe": sweeps.prune_dedupe_once(engine, settings)}
    t1 = time.time()
    print(json.dumps({"start": t0, "end": t1, "rows": done}), file=out, flush=True)
    if t1 - t0 < settings.sweep_pass_seconds:  # it ran out of work, not of time: caught up
        break
    time.sleep(gap)
"""


def run_sweep(what: str, url: str, store: database.Store, logdir: Path, gap: float) -> dict:
    """The sweep in a child process, one pass after the other ``gap`` seconds apart until a
    pass ends before its time is up (it caught up), while this process admits and claims
    one run after the other."""
    passes_file = logdir / f"sweep-{what}.jsonl"
    argv = [sys.executable, "-c", _SWEEP, what, str(gap), str(passes_file)]
    env = procs.child_env(AWOOOP_DATABASE_URL=url, AWOOOP_LOG_LEVEL="WARNING")
    samples: list[tuple[float, float, float]] = []
    with procs.started(procs.Proc(f"sweep-{what}", argv, env, logdir)) as child:
        started = time.time()
        while child.alive():
            samples.append(store.admit_and_claim(BENCH_PROJECT))
            if time.time() - started > 3600:
                raise BenchError(f"the {what} sweep did not catch up within an hour")
    store.finish_claimed()
    if child.popen.returncode != 0:
        raise child.failure(f"the {what} sweep failed")
    passes = [json.loads(line) for line in passes_file.read_text().splitlines() if line.strip()]
    return sweep_figures(passes, samples)


def sweep_figures(passes: list[dict], samples: list[tuple[float, float, float]]) -> dict:
    """What the passes deleted and how fast; the latencies split by whether the operation
    overlapped a pass that deleted rows or fell between passes."""
    working = [p for p in passes if any(p["rows"].values())]
    rows: collections.Counter[str] = collections.Counter()
    for p in passes:
        rows.update(p["rows"])
    busy = sum(p["end"] - p["start"] for p in working)
    offset = time.time() - time.perf_counter()  # perf_counter to the child's wall clock

    def overlaps(t: float, took: float) -> bool:
        start, end = t + offset, t + offset + took
        return any(p["start"] <= end and start <= p["end"] for p in working)

    during = [(a, c) for t, a, c in samples if overlaps(t, a + c)]
    between = [(a, c) for t, a, c in samples if not overlaps(t, a + c)]
    return {
        "passes": len(working),
        "busy_s": busy,
        "wall_s": passes[-1]["end"] - passes[0]["start"] if passes else 0.0,
        "longest_pass_s": max((p["end"] - p["start"] for p in working), default=0.0),
        "rows": dict(rows),
        "rows_per_s": sum(rows.values()) / busy if busy else float("nan"),
        "runs_per_s": rows["awooop_run_state"] / busy if busy else float("nan"),
        "during": op_summary(during),
        "between": op_summary(between),
    }


# --- report --------------------------------------------------------------------------------


def render(r: dict[str, Any], knobs: Knobs) -> str:
    s, sweep, runs_aged = r["settings"], r["sweeps"]["retention"], r["backlog_before"]["runs"]
    anchor = "../bench/NOTES.md#make-bench-retention-benchretentionpy"
    lines = [
        "Two scratch databases on that server: **empty**, and **loaded** with a month of history "
        "generated with SQL. The store's admission and claim statements, admission over HTTP "
        "and `/metrics` scrapes are timed on both, alternating between them; then the sweeps "
        "delete the loaded database's backlog while admissions and claims go on. "
        f"How it is measured: [bench/NOTES.md]({anchor}).",
        "",
        f"Settings: {knobs.samples:,} store samples per database after {WARM_UP} untimed; HTTP "
        f"{HTTP_CONNECTIONS} connections, {HTTP_WARMUP:g} s warm-up then {knobs.duration:g} s "
        f"per row, two rows per database; {knobs.scrapes} scrapes; sweep passes of at most "
        f"{s['pass_seconds']:g} s (`AWOOOP_SWEEP_PASS_SECONDS`), {knobs.gap:g} s apart, batches "
        f"of {s['retention_batch']:,} runs and {s['prune_batch']:,} dedupe rows.",
        "",
        loaded_text(r, knobs),
        "",
        *latency_table(r),
        "",
        "**The sweeps catching up** on the loaded database; admission and claim latencies "
        "during passes and between them:",
        "",
        *sweep_table(r["sweeps"]),
        "",
        f"Retention deleted {fmt(sweep['runs_per_s'])} runs/s with their rows while it ran: at "
        f"one pass per `AWOOOP_RETENTION_INTERVAL_SECONDS` ({s['retention_interval_s']:g} s), "
        f"the {runs_aged:,} runs past their age take {sweep['passes']} passes, about "
        f"{sweep['passes'] * s['retention_interval_s'] / 60:.0f} minutes.",
        "",
    ]
    title = "Retention: a database with a month of history (`make bench-retention`)"
    written = report.written_by(r["command"], "bench.retention", r["machine"])
    return report.section(BEGIN, END, title, written, lines)


def loaded_text(r: dict[str, Any], knobs: Knobs) -> str:
    g, n = r["generation"], r["generation"]["counts"]
    before, after = r["backlog_before"], r["backlog_after"]
    return (
        f"Loaded: {n['awooop_run_state']:,} runs ({knobs.runs:,} finished over {SPAN_DAYS:g} "
        f"days, {WAITING_RUNS:,} WAITING_APPROVAL), {n['awooop_run_event']:,} history rows "
        f"({g['events_per_run']} per finished run), {n['awooop_channel_event_dedupe']:,} dedupe "
        f"rows over {DEDUPE_SPAN_DAYS:g} days ({g['dedupe_linked']:,} of them the keys of those "
        f"days' runs), {n['awooop_outbox']:,} SENT outbox messages; "
        f"{g['database_bytes'] / 2**30:.1f} GiB, generated in {g['total_s'] / 60:.1f} min "
        f"(runs {fmt(g['runs_s'])} s, history {fmt(g['events_s'])} s, dedupe rows "
        f"{fmt(g['dedupe_s'])} s, outbox {fmt(g['outbox_s'])} s, `VACUUM (ANALYZE)` "
        f"{fmt(g['vacuum_s'])} s). Past their age before the sweeps: {before['runs']:,} runs, "
        f"{before['dedupe']:,} dedupe rows, {before['outbox']:,} outbox messages; after: "
        f"{after['runs']:,}, {after['dedupe']:,}, {after['outbox']:,}."
    )


def latency_table(r: dict[str, Any]) -> list[str]:
    store, web, sc = r["store"], r["http"], r["scrape"]
    rows = []
    for op in ("admission", "claim"):
        for stat in ("p50", "mean", "p99"):
            e, l_ = store["empty"][op][stat], store["loaded"][op][stat]
            ratio = report.ratio(l_, e)
            judged = report.verdict(ratio, TARGET_LATENCY_RATIO, False)
            target = "— | " if stat == "p99" else f"≤ {TARGET_LATENCY_RATIO:.2f} | {judged}"
            cells = f"{fmt(e, 3)} | {fmt(l_, 3)} | {fmt(ratio, 2)} | {target}"
            rows.append(f"{op} statement {stat}, ms | {cells}")
    for what, stat, digits in (
        (" p50, ms", "p50", 1),
        (" p99, ms", "p99", 1),
        (", req/s", "rps", 0),
    ):
        e, l_ = web["empty"][stat], web["loaded"][stat]
        rows.append(
            f"admission over HTTP{what} ({HTTP_CONNECTIONS} conns) | {fmt(e, digits)} | "
            f"{fmt(l_, digits)} | {fmt(report.ratio(l_, e), 2)} | — | "
        )
    empty, loaded = sc["empty"], sc["loaded"]
    judged = report.verdict(loaded["p99"], TARGET_SCRAPE_MS, False)
    rows += [
        f"`/metrics` scrape p50, ms | {fmt(empty['p50'], 1)} | {fmt(loaded['p50'], 1)} |  | "
        f"≤ {TARGET_SCRAPE_MS:.0f} | {judged} (p99 {fmt(loaded['p99'], 1)}, "
        f"max {fmt(loaded['max'], 1)})",
        f"its database read (runs + outbox), p50 ms | {fmt(sc['empty_query']['p50'], 2)} | "
        f"{fmt(sc['loaded_query']['p50'], 2)} |  |  | ",
        "the read it replaces (`GROUP BY status` over every run), p50 ms | "
        f"{fmt(sc['old_empty']['p50'], 2)} | {fmt(sc['old_loaded']['p50'], 2)} |  |  | ",
    ]
    return report.table("measure | empty | loaded | loaded / empty | target | ", rows, "lrrrll")


def sweep_table(sweeps: dict[str, Any]) -> list[str]:
    rows = []
    for name, sw in (("retention", sweeps["retention"]), ("dedupe prune", sweeps["prune"])):
        deleted = ", ".join(f"{t.replace('awooop_', '')} {n:,}" for t, n in sw["rows"].items())
        latencies = [
            f"{fmt(sw[when][op]['p50'], 2)} / {fmt(sw[when][op]['p99'], 2)}"
            for op in ("admission", "claim")
            for when in ("during", "between")
        ]
        rows.append(
            [name, sw["passes"], fmt(sw["busy_s"], 1), fmt(sw["longest_pass_s"], 1), deleted]
            + [fmt(sw["rows_per_s"]), *latencies]
        )
    return report.table(
        "sweep | passes | seconds deleting | longest pass s | rows deleted | rows/s "
        "| admission p50 / p99 ms, during passes | between passes "
        "| claim p50 / p99 ms, during passes | between passes",
        rows,
        "lrrrlr",
    )


# --- main ----------------------------------------------------------------------------------


def measure(knobs: Knobs, base: Any, scratch: database.Scratch, logdir: Path) -> dict:
    from awooop.config import Settings

    r: dict[str, Any] = {"machine": report.machine_info(base.database_url, base.broker_url)}
    urls = {kind: scratch.migrated(f"awooop_bench_{kind}")[1] for kind in KINDS}
    settings = {k: Settings(**{**base.__dict__, "database_url": u}) for k, u in urls.items()}
    tokens = {k: database.create_projects(u, [BENCH_PROJECT, *PROJECTS]) for k, u in urls.items()}
    log(f"generating {knobs.runs:,} finished runs and {knobs.dedupe:,} dedupe rows …")
    r["generation"] = generate(urls["loaded"], settings["loaded"], knobs)
    r["backlog_before"] = backlog(urls["loaded"], base)
    log(f"rows: {r['generation']['counts']}; past their age: {r['backlog_before']}")
    stores = {kind: database.Store(url, settings[kind]) for kind, url in urls.items()}
    try:
        r["store"] = measure_store(stores, knobs.samples)
        r["http"], r["scrape"] = measure_web(urls, tokens, knobs, logdir)
        database.purge_queue(redis.Redis.from_url(base.broker_url, socket_timeout=10))
        for url in urls.values():  # the runs admitted over HTTP, as if workers had run them
            database.query(url, _FINISH_PENDING, (BENCH_PROJECT,))
        r["sweeps"] = {}
        for what in ("retention", "prune"):
            log(f"{what} sweep catching up …")
            r["sweeps"][what] = run_sweep(what, urls["loaded"], stores["loaded"], logdir, knobs.gap)
            log(f"{what}: {r['sweeps'][what]['passes']} passes, {r['sweeps'][what]['rows']}")
    finally:
        for store in stores.values():
            store.close()
    r["backlog_after"] = backlog(urls["loaded"], base)
    return r


def main() -> None:
    from awooop.config import Settings

    knobs, base = report.configure("bench-retention", lambda: (Knobs(), Settings.from_env()))
    scratch = database.Scratch(base.database_url, report.keep())
    try:
        with report.session("bench-retention", 24 * 3600) as logdir:
            results = measure(knobs, base, scratch, logdir)
            results["command"] = report.command("bench-retention", "bench.retention", QUICK)
            results["settings"] = {
                "pass_seconds": base.sweep_pass_seconds,
                "retention_batch": base.retention_batch_size,
                "prune_batch": base.prune_batch_size,
                "retention_interval_s": base.retention_interval_seconds,
            }
            report.save_results(logdir, results)
            section = render(results, knobs)
            print(section)
            report.publish(knobs.output, section, BEGIN, END, logdir)
    finally:
        scratch.close()


if __name__ == "__main__":
    main()
