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

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench import database, load, procs, report
from bench.report import ROOT, BenchError, env_float, env_int, log

BEGIN = "<!-- retention:begin (written by `make bench-retention`) -->"
END = "<!-- retention:end -->"
TARGET_LATENCY_RATIO = 1.20
TARGET_SCRAPE_MS = 100.0
PROJECTS = ("gen-0", "gen-1", "gen-2", "gen-3")
LONG_PROJECT = "gen-3"  # keeps its runs 90 days
SPAN_DAYS = 40.0
DEDUPE_SPAN_DAYS = 8.0
WAITING_RUNS = 1000
OUTBOX_ROWS = 200_000
CHUNK = 1_000_000
WARM_UP = 300


@dataclass(frozen=True)
class Knobs:
    quick: bool
    runs: int
    dedupe: int
    samples: int
    duration: float
    scrapes: int
    gap: float
    output: Path | None  # None: print only (quick mode without BENCH_OUTPUT)

    @classmethod
    def from_env(cls) -> Knobs:
        q = os.environ.get("BENCH_RETENTION_QUICK") == "1"
        return cls(
            quick=q,
            runs=env_int("BENCH_RETENTION_RUNS", 20_000 if q else 1_000_000),
            dedupe=env_int("BENCH_RETENTION_DEDUPE", 100_000 if q else 10_000_000),
            samples=env_int("BENCH_RETENTION_SAMPLES", 200 if q else 3000),
            duration=env_float("BENCH_DURATION", 1 if q else 6),
            scrapes=env_int("BENCH_RETENTION_SCRAPES", 5 if q else 50),
            gap=env_float("BENCH_RETENTION_GAP", 1 if q else 10),
            output=report.quick_output(q),
        )


# --- statistics --------------------------------------------------------------------------


def summary(values: list[float]) -> dict[str, float]:
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


def _chunks(n: int) -> Iterator[tuple[int, int]]:
    for lo in range(1, n + 1, CHUNK):
        yield lo, min(n, lo + CHUNK - 1)


def generate(url: str, settings: Any, knobs: Knobs) -> dict[str, Any]:
    """Fill the loaded database; returns how long each part took."""
    from awooop import db
    from awooop.engine import lease, runner

    timings: dict[str, Any] = {}
    engine = db.make_engine(url, pool_size=2, settings=settings)
    store = database.Store(url, settings)
    template = store.admit(PROJECTS[0], "template")
    store.close()
    outcome = runner.execute(engine, settings, template)
    lease.stop_keeper()
    engine.dispose()
    if outcome != runner.Outcome.COMPLETED:
        raise BenchError(f"the template run ended {outcome}")
    t_all = time.perf_counter()
    with database.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SET synchronous_commit = on")
        cur.execute(_TEMPLATE_RUN, {"r": str(template)})
        cur.execute("DELETE FROM awooop_run_state WHERE run_id = %s", (str(template),))
        cur.execute("DELETE FROM awooop_channel_event_dedupe WHERE run_id = %s", (str(template),))
        cur.execute("SELECT count(*) FROM template_event")
        timings["events_per_run"] = int(cur.fetchone()[0])

        t0 = time.perf_counter()
        for lo, hi in _chunks(knobs.runs):
            cur.execute(_RUNS, {"lo": lo, "hi": hi, "n": knobs.runs})
            log(f"  runs {hi:,}/{knobs.runs:,} ({time.perf_counter() - t0:.0f} s)")
        timings["runs_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        cur.execute(
            "SELECT min(created_at), max(created_at) + interval '1 second' FROM awooop_run_state"
        )
        first, last = cur.fetchone()
        step = (last - first) / max(1, knobs.runs // CHUNK)
        lo_at = first
        while lo_at < last:
            cur.execute(_EVENTS, {"lo": lo_at, "hi": lo_at + step})
            lo_at += step
        cur.execute("SELECT count(*) FROM awooop_run_event")
        timings["events"] = int(cur.fetchone()[0])
        timings["events_s"] = time.perf_counter() - t0
        log(f"  {timings['events']:,} history rows ({timings['events_s']:.0f} s)")

        cur.execute(_WAITING)
        cur.execute(
            "UPDATE awooop_project SET run_retention_days = 90 WHERE project_id = %s",
            (LONG_PROJECT,),
        )

        t0 = time.perf_counter()
        cur.execute(_RUN_DEDUPE)
        linked = cur.rowcount
        others = max(0, knobs.dedupe - linked)
        for lo, hi in _chunks(others):
            cur.execute(_OTHER_DEDUPE, {"lo": lo, "hi": hi, "n": others})
            took = time.perf_counter() - t0
            log(f"  dedupe rows {linked + hi:,}/{knobs.dedupe:,} ({took:.0f} s)")
        timings["dedupe_linked"] = linked
        timings["dedupe_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        cur.execute(_OUTBOX)
        timings["outbox_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        cur.execute("VACUUM (ANALYZE)")
        timings["vacuum_s"] = time.perf_counter() - t0
        log(f"  VACUUM (ANALYZE) ({timings['vacuum_s']:.0f} s)")
        timings["total_s"] = time.perf_counter() - t_all
        timings["counts"] = table_counts(cur)
        cur.execute("SELECT pg_database_size(current_database())")
        timings["database_bytes"] = int(cur.fetchone()[0])
    return timings


def table_counts(cur: Any) -> dict[str, int]:
    counts = {}
    for table in (
        "awooop_run_state",
        "awooop_run_event",
        "awooop_channel_event_dedupe",
        "awooop_outbox",
    ):
        cur.execute(f"SELECT count(*) FROM {table}")
        counts[table] = int(cur.fetchone()[0])
    return counts


def backlog(url: str, settings: Any) -> dict[str, int]:
    """What the sweeps have to delete: runs past retention, dedupe rows past their TTL."""
    with database.connect(url) as conn, conn.cursor() as cur:
        cur.execute(
            """
SELECT count(*) FROM awooop_run_state r JOIN awooop_project p USING (project_id)
WHERE r.status IN ('COMPLETED', 'FAILED', 'CANCELLED')
  AND r.finished_at < now() - COALESCE(p.run_retention_days, %s) * interval '1 day'
""",
            (settings.run_retention_days,),
        )
        runs = int(cur.fetchone()[0])
        cur.execute(
            "SELECT count(*) FROM awooop_channel_event_dedupe"
            " WHERE created_at < now() - make_interval(secs => %s)",
            (settings.dedupe_ttl_seconds,),
        )
        dedupe = int(cur.fetchone()[0])
        cur.execute(
            "SELECT count(*) FROM awooop_outbox WHERE status IN ('SENT', 'PARKED')"
            " AND created_at < now() - %s * interval '1 day'",
            (settings.outbox_retention_days,),
        )
        outbox = int(cur.fetchone()[0])
    return {"runs": runs, "dedupe": dedupe, "outbox": outbox}


def measure_pairs(
    stores: dict[str, database.Store], project_id: str, n: int
) -> dict[str, dict[str, list[float]]]:
    """``n`` admissions and claims on each database, alternating operation by operation (and
    which goes first), so both see the same machine: this one is shared, and its load
    changes from second to second. After ``WARM_UP`` untimed ones each (connections,
    prepared statements, the buffer cache)."""
    for store in stores.values():
        for _ in range(WARM_UP):
            store.admit_and_claim(project_id)
    out: dict[str, dict[str, list[float]]] = {k: {"admission": [], "claim": []} for k in stores}
    kinds = list(stores)
    for i in range(n):
        for kind in kinds if i % 2 == 0 else kinds[::-1]:
            _, a, c = stores[kind].admit_and_claim(project_id)
            out[kind]["admission"].append(a)
            out[kind]["claim"].append(c)
    for store in stores.values():
        store.finish_claimed()
    return out


def finish_pending(url: str) -> None:
    """The bench project's PENDING runs COMPLETED: a claimable backlog left behind would make
    later claims slower (the claim is planned over the claimable index)."""
    with database.connect(url) as conn, conn.cursor() as cur:
        cur.execute(
            "UPDATE awooop_run_state SET status = 'COMPLETED', saga_status = 'COMPLETED',"
            " finished_at = now(), updated_at = now()"
            " WHERE project_id = 'bench' AND status = 'PENDING'"
        )


# --- HTTP: admission and /metrics -------------------------------------------------------


def http_admission(web: procs.Web, project_id: str, token: str, duration: float) -> dict:
    source = load.events({project_id: token}, [project_id])
    result = web.run(source, 16, duration=duration, warmup=1.5)
    return {k: getattr(result, k) for k in ("rps", "p50", "p99", "non_2xx", "errors")}


def scrape_times(port: int, n: int) -> tuple[list[float], str]:
    import http.client

    times, body = [], ""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for i in range(n + 3):
        t0 = time.perf_counter()
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        body = response.read().decode()
        took = time.perf_counter() - t0
        if response.status != 200:
            raise BenchError(f"/metrics answered {response.status}")
        if i >= 3:  # the first ones open pooled connections
            times.append(took)
    conn.close()
    return times, body


def query_times(url: str, sqls: list[str], n: int) -> list[float]:
    """Each sample: the statements one after the other, one connection."""
    times = []
    with database.connect(url) as conn, conn.cursor() as cur:
        for _ in range(n):
            t0 = time.perf_counter()
            for sql in sqls:
                cur.execute(sql)
                cur.fetchall()
            times.append(time.perf_counter() - t0)
    return times


# --- the sweeps, in a process of their own -------------------------------------------------

_SWEEP = """
import json, sys, time
from awooop import db
from awooop.config import Settings
from awooop.engine import sweeps
settings = Settings.from_env(required=("database_url",))
engine = db.make_engine(settings.database_url, pool_size=2, role=db.SWEEPS, settings=settings)
what, gap = sys.argv[1], float(sys.argv[2])
while True:
    t0 = time.time()
    if what == "retention":
        done = sweeps.retention_once(engine, settings)
    else:
        done = {"awooop_channel_event_dedupe": sweeps.prune_dedupe_once(engine, settings)}
    t1 = time.time()
    print(json.dumps({"start": t0, "end": t1, "rows": done}), flush=True)
    if t1 - t0 < settings.sweep_pass_seconds:  # it ran out of work, not of time: caught up
        break
    time.sleep(gap)
"""


def run_sweep(
    what: str, url: str, store: database.Store, project_id: str, logdir: Path, gap: float
) -> dict[str, Any]:
    """The sweep in a child process, one pass after the other with ``gap`` seconds between
    them, until a pass ends before its time is up (it caught up), while this process admits
    and claims one run after the other. Latencies are split by whether they overlapped a pass
    or fell in a gap."""
    env = procs.child_env(AWOOOP_DATABASE_URL=url, AWOOOP_LOG_LEVEL="WARNING")
    out = logdir / f"sweep-{what}.jsonl"
    with open(out, "w") as sink, open(logdir / f"sweep-{what}.log", "w") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", _SWEEP, what, str(gap)],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=err,
            start_new_session=True,
        )
        samples: list[tuple[float, float, float]] = []
        started = time.time()
        try:
            while child.poll() is None:
                samples.append(store.admit_and_claim(project_id))
                if time.time() - started > 3600:
                    raise BenchError(f"the {what} sweep did not catch up within an hour")
        finally:
            if child.poll() is None:
                child.kill()
            child.wait()
        store.finish_claimed()
    if child.returncode != 0:
        raise BenchError(
            f"the {what} sweep failed: {(logdir / f'sweep-{what}.log').read_text()[-2000:]}"
        )
    passes = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    working = [p for p in passes if any(p["rows"].values())]
    rows: dict[str, int] = {}
    for p in passes:
        for table, n in p["rows"].items():
            rows[table] = rows.get(table, 0) + n
    busy = sum(p["end"] - p["start"] for p in working)
    # perf_counter stamps to the wall clock the child's stamps use (one machine).
    offset = time.time() - time.perf_counter()

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
        "rows": rows,
        "rows_per_s": sum(rows.values()) / busy if busy else float("nan"),
        "runs_per_s": rows.get("awooop_run_state", 0) / busy if busy else float("nan"),
        "during": {
            "admission": summary([a for a, _ in during]),
            "claim": summary([c for _, c in during]),
        },
        "between": {
            "admission": summary([a for a, _ in between]),
            "claim": summary([c for _, c in between]),
        },
    }


# --- report --------------------------------------------------------------------------------


def _f(value: float, digits: int = 2) -> str:
    return "n/a" if value != value else f"{value:,.{digits}f}"


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def render(machine: dict[str, str], knobs: Knobs, r: dict[str, Any]) -> str:
    g, store, http_ = r["generation"], r["store"], r["http"]
    sweep, prune = r["sweeps"]["retention"], r["sweeps"]["prune"]
    counts = g["counts"]
    lines = [
        BEGIN,
        "## Retention: a database with a month of history (`make bench-retention`)",
        "",
        f"Written by `make bench-retention` (`python -m bench.retention`) on {machine['date']}, "
        f"code {machine['code']}; PostgreSQL {machine['postgresql']} on {machine['cpus']} × "
        f"{machine['cpu_model']}, shared by everything. Two scratch databases on that server, "
        "migrated to head: **empty**, and **loaded** with `generate_series` "
        f"({_f(g['total_s'] / 60, 1)} min to generate and `VACUUM (ANALYZE)`: runs "
        f"{_f(g['runs_s'], 0)} s, history {_f(g['events_s'], 0)} s, dedupe rows "
        f"{_f(g['dedupe_s'], 0)} s, vacuum {_f(g['vacuum_s'], 0)} s; "
        f"{g['database_bytes'] / 2**30:.1f} GiB):",
        "",
        f"- {counts['awooop_run_state']:,} runs: {knobs.runs:,} finished `noop-3` runs (copies "
        f"of one run the runner drove to COMPLETED, {g['events_per_run']} history rows each; "
        "2 % FAILED, 1 % CANCELLED) created one after the other over the last 40 days in four "
        f"projects, one of which keeps its runs 90 days, and {WAITING_RUNS:,} runs "
        "WAITING_APPROVAL;",
        f"- {counts['awooop_run_event']:,} history rows; {counts['awooop_channel_event_dedupe']:,} "
        f"dedupe rows over the last 8 days ({g['dedupe_linked']:,} of them the keys of the runs "
        f"of those days); {counts['awooop_outbox']:,} SENT outbox messages over 40 days;",
        f"- past their age before the sweeps: {r['backlog_before']['runs']:,} runs, "
        f"{r['backlog_before']['dedupe']:,} dedupe rows, {r['backlog_before']['outbox']:,} "
        "outbox messages.",
        "",
        "| measure | empty | loaded | loaded / empty | target | |",
        "|---|---:|---:|---:|---|---|",
    ]
    for what, key in (("admission", "admission"), ("claim", "claim")):
        for stat in ("p50", "mean", "p99"):
            e, l_ = store["empty"][key][stat], store["loaded"][key][stat]
            ratio = l_ / e
            target = f"≤ {TARGET_LATENCY_RATIO:.2f}" if stat in ("p50", "mean") else "—"
            judged = verdict(ratio <= TARGET_LATENCY_RATIO) if stat in ("p50", "mean") else ""
            lines.append(
                f"| {what} statement {stat}, ms | {_f(e, 3)} | {_f(l_, 3)} | {_f(ratio)} | "
                f"{target} | {judged} |"
            )
    for stat in ("p50", "p99"):
        e, l_ = http_["empty"][stat], http_["loaded"][stat]
        lines.append(
            f"| admission over HTTP {stat}, ms (16 conns) | {_f(e, 1)} | {_f(l_, 1)} | "
            f"{_f(l_ / e)} | — | |"
        )
    e, l_ = http_["empty"]["rps"], http_["loaded"]["rps"]
    lines.append(
        f"| admission over HTTP, req/s (16 conns) | {_f(e, 0)} | {_f(l_, 0)} | {_f(l_ / e)} | — | |"
    )
    sc = r["scrape"]
    lines += [
        f"| `/metrics` scrape p50, ms | {_f(sc['empty']['p50'], 1)} | "
        f"{_f(sc['loaded']['p50'], 1)} | | < {TARGET_SCRAPE_MS:.0f} | "
        f"{verdict(sc['loaded']['p99'] < TARGET_SCRAPE_MS)} (p99 {_f(sc['loaded']['p99'], 1)}, "
        f"max {_f(sc['loaded']['max'], 1)}) |",
        f"| its database read (runs + outbox), p50 ms | {_f(sc['empty_query']['p50'], 2)} | "
        f"{_f(sc['loaded_query']['p50'], 2)} | | | |",
        f"| the read it replaces (`GROUP BY status` over every run), p50 ms | "
        f"{_f(sc['old_empty']['p50'], 2)} | {_f(sc['old_loaded']['p50'], 2)} | | | |",
        "",
        f"Store statements: {knobs.samples:,} admissions on each database, each followed by the "
        "claim of its run by id, as a worker claims — the production statements on one "
        "connection each, timed in the client after 300 untimed ones, the two databases "
        "alternating operation by operation so both see the same load on this shared machine. "
        f"HTTP: gunicorn as in `make bench`, 16 connections, {knobs.duration:g} s per row, "
        f"alternating. Scrapes: {knobs.scrapes} `GET /metrics` in a row on one connection.",
        "",
        "**The sweeps catching up** on the loaded database, each in another process with the "
        "default batches (500 runs, 5,000 dedupe rows) and passes of at most "
        f"`AWOOOP_SWEEP_PASS_SECONDS` = {r['pass_seconds']:g} s, {knobs.gap:g} s apart (a "
        "maintenance worker waits 300 s), until a pass ended before its time was up, while "
        "this process kept admitting and claiming; latencies during passes and between them:",
        "",
        "| sweep | passes | seconds deleting | longest pass s | rows deleted | rows/s "
        "| admission p50 / p99 ms, during passes | between passes "
        "| claim p50 / p99 ms, during passes | between passes |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, sw in (("retention", sweep), ("dedupe prune", prune)):
        rows = ", ".join(f"{t.replace('awooop_', '')} {n:,}" for t, n in sw["rows"].items())
        cells = [
            f"{_f(sw[when][op]['p50'], 2)} / {_f(sw[when][op]['p99'], 2)}"
            for op in ("admission", "claim")
            for when in ("during", "between")
        ]
        lines.append(
            f"| {name} | {sw['passes']} | {_f(sw['busy_s'], 1)} | "
            f"{_f(sw['longest_pass_s'], 1)} | {rows} | {_f(sw['rows_per_s'], 0)} | "
            + " | ".join(cells)
            + " |"
        )
    before = store["loaded"]
    lines += [
        "",
        f"Before the sweeps, on the loaded database: admission p50 / p99 "
        f"{_f(before['admission']['p50'], 2)} / {_f(before['admission']['p99'], 2)} ms, claim "
        f"{_f(before['claim']['p50'], 2)} / {_f(before['claim']['p99'], 2)} ms. "
        f"Retention deleted {_f(sweep['runs_per_s'], 0)} runs/s with their rows while it ran; "
        f"at one pass per `AWOOOP_RETENTION_INTERVAL_SECONDS` (300) the "
        f"{r['backlog_before']['runs']:,} runs past their age take {sweep['passes']} passes, "
        f"about {sweep['passes'] * 5} minutes. Left past their age after the sweeps: "
        f"{r['backlog_after']['runs']:,} runs, {r['backlog_after']['dedupe']:,} dedupe rows, "
        f"{r['backlog_after']['outbox']:,} outbox messages.",
        "",
        END,
    ]
    return "\n".join(lines) + "\n"


# --- main ----------------------------------------------------------------------------------


def main() -> None:
    from awooop.config import Settings
    from awooop.store import monitoring

    knobs, base = report.configure("bench", lambda: (Knobs.from_env(), Settings.from_env()))
    scratch = database.Scratch(base.database_url, report.keep())
    stores: dict[str, database.Store] = {}
    try:
        with report.session("bench-retention", 24 * 3600) as logdir:
            machine = report.machine_info(base.database_url, base.broker_url)
            urls = {
                kind: scratch.migrated(f"awooop_bench_{kind}")[1] for kind in ("empty", "loaded")
            }
            settings = {
                k: Settings(**{**base.__dict__, "database_url": u}) for k, u in urls.items()
            }
            tokens = {k: database.create_projects(u, ["bench", *PROJECTS]) for k, u in urls.items()}

            log(f"generating {knobs.runs:,} finished runs and {knobs.dedupe:,} dedupe rows …")
            t0 = time.perf_counter()
            generation = generate(urls["loaded"], settings["loaded"], knobs)
            log(f"generated in {time.perf_counter() - t0:.0f} s: {generation['counts']}")
            backlog_before = backlog(urls["loaded"], base)
            log(f"past their age: {backlog_before}")

            # Store latency, empty and loaded alternating operation by operation.
            stores.update({kind: database.Store(url, settings[kind]) for kind, url in urls.items()})
            paired = measure_pairs(stores, "bench", knobs.samples)
            store_stats = {
                kind: {key: summary(values) for key, values in ops.items()}
                for kind, ops in paired.items()
            }
            for kind, ops in store_stats.items():
                log(f"store {kind}: {ops}")

            # HTTP admission and /metrics.
            webs = {
                kind: procs.Web(
                    f"web-{kind}",
                    logdir,
                    AWOOOP_DATABASE_URL=url,
                    PROMETHEUS_MULTIPROC_DIR=str(metrics_dir(logdir, kind)),
                )
                for kind, url in urls.items()
            }
            for web in webs.values():
                web.wait()
            http_parts: dict[str, list[dict[str, float]]] = {"empty": [], "loaded": []}
            for i in range(2):
                for kind in ("empty", "loaded") if i % 2 == 0 else ("loaded", "empty"):
                    res = http_admission(webs[kind], "bench", tokens[kind]["bench"], knobs.duration)
                    http_parts[kind].append(res)
                    log(f"http {kind:<6}: {res}")
            http_stats = {
                kind: {k: statistics.fmean(p[k] for p in parts) for k in ("rps", "p50", "p99")}
                for kind, parts in http_parts.items()
            }
            scrape: dict[str, Any] = {}
            for kind, web in webs.items():
                times, body = scrape_times(web.port, knobs.scrapes)
                scrape[kind] = summary(times)
                if "awooop_metrics_database_up 1.0" not in body:
                    raise BenchError(f"/metrics of {kind} could not read the database")
                log(f"scrape {kind}: {scrape[kind]}")
            for kind, url in urls.items():
                reads = [str(monitoring.RUNS_BY_STATUS), str(monitoring.OUTBOX_BACKLOG)]
                scrape[f"{kind}_query"] = summary(query_times(url, reads, knobs.scrapes))
                old = "SELECT status, count(*) FROM awooop_run_state GROUP BY status"
                scrape[f"old_{kind}"] = summary(query_times(url, [old], 10))
            for web in webs.values():
                web.stop()
            database.purge_queue(redis.Redis.from_url(base.broker_url, socket_timeout=10))
            for url in urls.values():  # the runs admitted over HTTP, as if workers had run them
                finish_pending(url)

            # The sweeps catching up, admission and claims going on meanwhile.
            sweeps_ = {}
            for what in ("retention", "prune"):
                log(f"{what} sweep catching up …")
                sweeps_[what] = run_sweep(
                    what, urls["loaded"], stores["loaded"], "bench", logdir, knobs.gap
                )
                log(f"{what}: {sweeps_[what]}")
            results = {
                "generation": generation,
                "backlog_before": backlog_before,
                "backlog_after": backlog(urls["loaded"], base),
                "store": store_stats,
                "http": http_stats,
                "scrape": scrape,
                "sweeps": sweeps_,
                "pass_seconds": base.sweep_pass_seconds,
            }
            report.save_results(logdir, results)
            section = render(machine, knobs, results)
            print(section)
            report.publish(knobs.output, section, BEGIN, END, logdir)
    finally:
        for store in stores.values():
            store.close()
        scratch.close()


def metrics_dir(logdir: Path, kind: str) -> Path:
    path = logdir / f"metrics-{kind}"
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    main()
