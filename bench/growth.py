"""``make bench-growth`` (``python -m bench.growth``): what admission and a run cost as the work
grows — more projects, bigger events, more worker processes; writes its block of
``docs/benchmarks.md``.

On the configured PostgreSQL (``AWOOOP_DATABASE_URL``) and Redis (``AWOOOP_BROKER_URL``), with
``bench.run``'s process helpers and ``bench.load``:

(a) Admission over HTTP, as ``make bench`` phase (a) measures AwoooP's new events: one web
    (``gunicorn -c gunicorn.conf.py``), no worker, N keep-alive connections spread evenly over
    its workers, a warm-up then a measured window per row. Rows, interleaved per connection
    count: 1 project (the reference), then 100 and 1,000 projects with the requests spread
    round-robin over them (``bench.load.RoundRobin``: each project its own path and API
    token), so the per-process auth cache (``AWOOOP_AUTH_CACHE_SECONDS``) mostly misses; then
    1 project with 64 KiB JSON bodies. The queued messages are purged afterwards.
(b) End to end, as ``make bench`` phase (b): ``noop-3`` runs admitted over HTTP with no worker
    running (the queue filled first), then ONE Celery worker (prefork, ``-c 1`` or ``-c 2``)
    drains them; runs/s from the first claim to the last completion (database clock), worker
    CPU per run once warm (from the first tenth of the runs completed to the last). Rows: 1
    project and 1,000 projects with ``-c 1`` and ``-c 2``, and 1 project with 64 KiB events
    (the run input carries the event) with ``-c 1``. Each row has projects of its own.

Every phase reports its non-2xx answers (a FAIL line for any) and the share of all CPUs used
by processes outside the benchmark and PostgreSQL/Redis ("other CPU", ``bench.run.Noise``).
The projects are inserted with the store functions in one transaction (an API token each, the
``api`` channel routed to ``noop-3``); their rows are deleted at the end.

Knobs (environment): BENCH_DURATION (s, per admission row, 6), BENCH_WARMUP (s, 1.5),
BENCH_CONNECTIONS ("16,64"), BENCH_GROWTH_PROJECTS (project counts besides 1, "100,1000"; the
largest is also the end-to-end rows'), BENCH_GROWTH_BODY_BYTES (the big event's size, 65536),
BENCH_GROWTH_E2E_RUNS (runs per end-to-end row, 1500), BENCH_TIMEOUT (whole run, s, 600),
BENCH_KEEP=1 keeps the bench projects' rows, BENCH_OUTPUT (default docs/benchmarks.md),
BENCH_SPREAD=0 (connections as gunicorn accepts them). BENCH_GROWTH_QUICK=1: a smoke test of
tiny sizes (1 s windows, 16 connections, 5 and 20 projects, 100 runs per row) that writes
markdown only when BENCH_OUTPUT is set. At the default sizes it takes about 3-4 minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import redis

from bench import capacity, load, run

ROOT = Path(__file__).resolve().parent.parent
APP = "awooop.web.app:create_app()"
BEGIN = "<!-- growth:begin (written by `make bench-growth`) -->"
END = "<!-- growth:end -->"
# The end-to-end rows admit their runs over this many connections (not measured).
ADMIT_CONNECTIONS = 16


def _int_list(name: str, default: str) -> tuple[int, ...]:
    raw = os.environ.get(name, default)
    try:
        values = tuple(int(v) for v in raw.split(",") if v.strip())
    except ValueError as exc:
        raise run.BenchError(f"{name} must be comma-separated whole numbers, not {raw!r}") from exc
    if not values or min(values) < 1:
        raise run.BenchError(f"{name} must name at least one positive number, not {raw!r}")
    return values


@dataclass(frozen=True)
class Knobs:
    quick: bool
    duration: float
    warmup: float
    connections: tuple[int, ...]
    projects: tuple[int, ...]  # besides the 1-project reference
    body_bytes: int
    e2e_runs: int
    timeout: float
    keep: bool
    output: Path | None  # None: print only (quick mode without BENCH_OUTPUT)

    @classmethod
    def from_env(cls) -> Knobs:
        quick = os.environ.get("BENCH_GROWTH_QUICK") == "1"
        output = os.environ.get("BENCH_OUTPUT")
        knobs = cls(
            quick=quick,
            duration=run._env_float("BENCH_DURATION", 1.0 if quick else 6.0),
            warmup=run._env_float("BENCH_WARMUP", 0.5 if quick else 1.5),
            connections=_int_list("BENCH_CONNECTIONS", "16" if quick else "16,64"),
            projects=_int_list("BENCH_GROWTH_PROJECTS", "5,20" if quick else "100,1000"),
            body_bytes=run._env_int("BENCH_GROWTH_BODY_BYTES", 64 * 1024),
            e2e_runs=run._env_int("BENCH_GROWTH_E2E_RUNS", 100 if quick else 1500),
            timeout=run._env_float("BENCH_TIMEOUT", 240 if quick else 600),
            keep=os.environ.get("BENCH_KEEP") == "1",
            output=(ROOT / output if output else None if quick else ROOT / "docs/benchmarks.md"),
        )
        if knobs.e2e_runs < 20:
            raise run.BenchError("BENCH_GROWTH_E2E_RUNS must be at least 20")
        if knobs.body_bytes < BIG_BODY_MIN:
            raise run.BenchError(f"BENCH_GROWTH_BODY_BYTES must be at least {BIG_BODY_MIN}")
        return knobs

    @property
    def e2e_projects(self) -> int:
        return max(self.projects)


# --- workload ----------------------------------------------------------------------------------


_BIG_HEAD = b'{"summary": "disk almost full on db-1", "source": "bench", "padding": "'
_BIG_TAIL = b'"}'
BIG_BODY_MIN = len(_BIG_HEAD) + len(_BIG_TAIL)


def big_body(size: int) -> bytes:
    """A JSON object of exactly ``size`` bytes (at least BIG_BODY_MIN): the small body's fields
    and a padding of random hex, which PostgreSQL's TOAST compression (pglz) cannot shrink
    much — an event whose size is mostly text that does not repeat."""
    pad = size - BIG_BODY_MIN
    if pad < 0:
        raise run.BenchError(f"a {size}-byte body cannot hold the event's fields")
    return _BIG_HEAD + secrets.token_hex(pad // 2 + 1)[:pad].encode() + _BIG_TAIL


def spread_requests(
    ids: Sequence[str], tokens: dict[str, str], body: bytes, limit: int | None = None
) -> load.RoundRobin:
    """New events (unique ``Idempotency-Key``) to the projects ``ids`` in turn, each with its own
    path and API token."""
    keys = load.unique_keys(secrets.token_hex(6))  # one iterator: unique over all projects
    return load.RoundRobin(
        [
            load.Requests(
                "POST",
                f"/v1/projects/{project_id}/runs",
                {
                    "Authorization": f"Bearer {tokens[project_id]}",
                    "Content-Type": "application/json",
                },
                body,
                key_header="Idempotency-Key",
                keys=keys,
            )
            for project_id in ids
        ],
        limit=limit,
    )


def create_projects(settings: Any, ids: Sequence[str]) -> dict[str, str]:
    """Each project with an operator API token, its ``api`` channel routed to ``noop-3`` — as
    ``bench.run.create_projects`` (``awooop project create`` then ``routes``), but in one
    transaction on one engine, and without the other channels' secrets (the API channel
    never reads them). Returns the tokens."""
    from awooop import db
    from awooop import secrets as crypto
    from awooop.store import projects

    tokens = {project_id: crypto.new_token() for project_id in ids}
    engine = db.make_engine(settings.database_url, pool_size=1, settings=settings)
    try:
        with db.transaction(engine) as conn:
            for project_id in ids:
                projects.create_project(conn, project_id, project_id, {"api": "noop-3"})
                projects.add_api_token(
                    conn, project_id, "operator", crypto.sha256_hex(tokens[project_id])
                )
    finally:
        engine.dispose()
    return tokens


def auth_miss_share(projects: int, web_workers: int, ttl: float, rps: float) -> float:
    """The share of requests whose project the web worker serving it reads from PostgreSQL: a
    model, not a count. Each gunicorn worker keeps a project's auth ``ttl`` seconds, and
    requests spread evenly over projects and workers, so per worker and project one request
    in ``ttl * rps / (projects * web_workers)`` misses."""
    if ttl <= 0:
        return 1.0
    if rps <= 0:
        return float("nan")
    return min(1.0, projects * max(web_workers, 1) / (ttl * rps))


# --- (a) admission -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AdmissionRow:
    label: str
    projects: int
    body: bytes


def admission_rows(knobs: Knobs, body: bytes) -> list[AdmissionRow]:
    rows = [AdmissionRow("1 project", 1, run.BODY)]
    rows += [AdmissionRow(f"{n:,} projects", n, run.BODY) for n in knobs.projects]
    rows.append(AdmissionRow(f"1 project, {_size(len(body))} bodies", 1, body))
    return rows


def bench_admission(
    ctx: Context, ids: list[str], tokens: dict[str, str], body: bytes
) -> list[dict[str, Any]]:
    knobs = ctx.knobs
    phase_knobs = run.Knobs(duration=knobs.duration, warmup=knobs.warmup)
    web, port = run.start_web("web-growth-admission", APP, ctx.logdir, **ctx.web_env)
    ctx.procs.append(web)
    results: list[dict[str, Any]] = []
    try:
        run.wait_http(web, port)
        for conns in knobs.connections:
            for row in admission_rows(knobs, body):
                source = spread_requests(ids[: row.projects], tokens, row.body)
                info = run._phase(
                    f"{row.label} @{conns}", web, port, source, conns, phase_knobs, ctx.noise
                )
                workers = len(web.pids()) - 1  # all started by now (the load spread over them)
                info.update(
                    label=row.label,
                    projects=row.projects,
                    body_bytes=len(row.body),
                    web_workers=workers,
                    auth_miss_share=auth_miss_share(
                        row.projects, workers, ctx.auth_cache_seconds, info["rps"]
                    ),
                )
                results.append(info)
    finally:
        web.stop()
        ctx.procs.remove(web)
    dropped = run.purge_queue(ctx.broker, "runs")
    run.log(f"purged {dropped} queued messages (no worker ran during admission)")
    for res in results:
        ref = _reference(results, connections=res["connections"], projects=1, big=False)
        res["ratio"] = run._ratio(res["rps"], ref.get("rps"))
    return results


# --- (b) end to end ----------------------------------------------------------------------------


@dataclass(frozen=True)
class E2ERow:
    key: str  # names the row's projects
    projects: int
    concurrency: int
    body: bytes


def e2e_rows(knobs: Knobs, body: bytes) -> list[E2ERow]:
    many = knobs.e2e_projects
    return [
        E2ERow("e1c1", 1, 1, run.BODY),
        E2ERow("e1c2", 1, 2, run.BODY),
        E2ERow("emc1", many, 1, run.BODY),
        E2ERow("emc2", many, 2, run.BODY),
        E2ERow("e1c1big", 1, 1, body),
    ]


_PROGRESS_MANY = """
SELECT count(*) FILTER (WHERE status = 'COMPLETED'),
       count(*) FILTER (WHERE status IN ('FAILED', 'CANCELLED')),
       count(*)
FROM awooop_run_state WHERE project_id = ANY(%s)
"""

_SPAN_MANY = """
SELECT (SELECT min(e.at) FROM awooop_run_event e JOIN awooop_run_state r USING (run_id)
        WHERE r.project_id = ANY(%(p)s) AND e.kind = 'lease' AND e.trigger_id LIKE 'claim:%%'),
       (SELECT max(finished_at) FROM awooop_run_state WHERE project_id = ANY(%(p)s))
"""


class Progress(run.Progress):
    """``bench.run.Progress`` over several projects (one rolled-back transaction: polling
    commits nothing)."""

    def __init__(self, url: str, project_ids: list[str]) -> None:
        super().__init__(url, project_ids[0])
        self.project_ids = project_ids

    def counts(self) -> tuple[int, int, int]:
        with self.conn.cursor() as cur:
            cur.execute(_PROGRESS_MANY, (self.project_ids,))
            done, failed, total = cur.fetchone()
        return int(done), int(failed), int(total)

    def span(self) -> float:
        with self.conn.cursor() as cur:
            cur.execute(_SPAN_MANY, {"p": self.project_ids})
            first, last = cur.fetchone()
        return (last - first).total_seconds() if first and last else float("nan")


def bench_e2e(
    ctx: Context, web: run.Proc, port: int, row: E2ERow, ids: list[str], tokens: dict[str, str]
) -> dict[str, Any]:
    n = ctx.knobs.e2e_runs
    label = f"e2e {_projects(row.projects)}, {_size(len(row.body))}, -c {row.concurrency}"
    info: dict[str, Any] = {
        "label": label,
        "projects": row.projects,
        "body_bytes": len(row.body),
        "concurrency": row.concurrency,
        "runs": n,
    }
    run.purge_queue(ctx.broker, "runs")
    capacity.vacuum(ctx.url)
    result = load.run(
        f"http://127.0.0.1:{port}/",
        spread_requests(ids, tokens, row.body, limit=n),
        ADMIT_CONNECTIONS,
        timeout=max(60.0, n / 20),
    )
    info.update(
        admit_per_s=result.rps,
        non_2xx=result.non_2xx,
        errors=result.errors,
        statuses=dict(result.statuses),
        failures=run.report_failures(f"{label} admission", result),
    )
    run.log(
        f"{label}: admitted {result.statuses.get(202, 0)}/{n} in {result.seconds:.1f} s "
        f"({result.rps:.0f} req/s, non-2xx {result.non_2xx}, errors {result.errors})"
    )
    progress = Progress(ctx.url, ids)
    worker: run.Proc | None = None
    try:
        _, _, total = progress.counts()
        if total != n:
            raise run.BenchError(
                f"{label}: {total} runs admitted, expected {n}; log {web.log_path}:\n"
                f"{web.log_tail()}"
            )
        worker = run.start_worker(
            f"worker-growth-{row.key}",
            "awooop.tasks.app",
            "runs",
            ctx.logdir,
            row.concurrency,
            AWOOOP_TASK_EVENTS="0",
        )
        ctx.procs.append(worker)
        w = worker
        warm_at = max(1, n // 10)
        marks: dict[str, tuple[float, int]] = {}

        def mark(done: int) -> None:
            if "warm" not in marks and done >= warm_at:
                marks["warm"] = (w.cpu_seconds(), done)
            if "end" not in marks and done >= n:
                marks["end"] = (w.cpu_seconds(), done)

        started = time.perf_counter()
        with ctx.noise.measure(info):
            capacity.wait_for_runs(progress, worker, n, timeout=max(90.0, n / 10), on_poll=mark)
        info["wall_s"] = time.perf_counter() - started
        info["seconds"] = progress.span()
    finally:
        progress.close()
        if worker is not None:
            worker.stop(capacity.DRAINED_STOP_S)
            ctx.procs.remove(worker)
    (cpu0, done0), (cpu1, done1) = marks["warm"], marks["end"]
    info["per_s"] = n / info["seconds"] if info["seconds"] > 0 else float("nan")
    info["cpu_measured_runs"] = done1 - done0
    info["worker_cpu_ms"] = (
        (cpu1 - cpu0) * 1000 / (done1 - done0) if done1 > done0 else float("nan")
    )
    run.log(
        f"{label}: {n} runs, first claim to last completion {info['seconds']:.2f} s = "
        f"{info['per_s']:.0f} runs/s; worker CPU {info['worker_cpu_ms']:.2f} ms/run (over "
        f"{done1 - done0} warm runs); worker start to done {info['wall_s']:.1f} s; other CPU "
        f"{info['other_cpu_pct']:.0f}%"
    )
    return info


def _e2e_ratios(results: list[dict[str, Any]]) -> None:
    """Each row's runs/s against the 1-project, small-event row with as many worker processes
    (``ratio``) and, for ``-c 2``, against the same projects and events with ``-c 1``
    (``scaling``: what the second process adds on these cores)."""

    def find(projects: int, body_bytes: int, concurrency: int) -> dict[str, Any]:
        for r in results:
            if (r["projects"], r["body_bytes"], r["concurrency"]) == (
                projects,
                body_bytes,
                concurrency,
            ):
                return r
        return {}

    for res in results:
        ref = find(1, len(run.BODY), res["concurrency"])
        res["ratio"] = run._ratio(res.get("per_s"), ref.get("per_s"))
        single = find(res["projects"], res["body_bytes"], 1)
        res["scaling"] = (
            run._ratio(res.get("per_s"), single.get("per_s")) if res["concurrency"] != 1 else None
        )


def _scaling(res: dict[str, Any]) -> str:
    return "" if res.get("scaling") is None else run._fmt(res["scaling"], 2)


# --- report ------------------------------------------------------------------------------------


def _reference(
    results: list[dict[str, Any]], *, connections: int, projects: int, big: bool
) -> dict[str, Any]:
    for res in results:
        if (
            res["connections"] == connections
            and res["projects"] == projects
            and (res["body_bytes"] > len(run.BODY)) == big
        ):
            return res
    return {}


def _size(n: int) -> str:
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n:,} B"


def _projects(n: int) -> str:
    return "1 project" if n == 1 else f"{n:,} projects"


def failures(results: dict[str, Any]) -> list[str]:
    return [
        line
        for part in ("admission", "e2e")
        for res in results[part]
        for line in res.get("failures", [])
    ]


def render_console(results: dict[str, Any]) -> str:
    out = [
        "",
        "Admission, POST /v1/projects/{p}/runs (API channel, new events)",
        f"  {'':<28}{'conns':>6}{'req/s':>9}{'vs 1':>7}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'non-2xx':>9}{'web CPU ms/req':>16}{'auth misses':>13}{'other CPU':>11}",
    ]
    for r in results["admission"]:
        out.append(
            f"  {r['label']:<28}{r['connections']:>6}{r['rps']:>9.0f}{run._fmt(r['ratio'], 2):>7}"
            f"{r['p50']:>9.1f}{r['p99']:>9.1f}{r['non_2xx']:>9}{r['web_cpu_ms']:>16.2f}"
            f"{r['auth_miss_share'] * 100:>12.0f}%{r['other_cpu_pct']:>10.0f}%"
        )
    out += [
        "",
        "End to end, noop-3 (queue filled first, then one prefork worker)",
        f"  {'':<28}{'-c':>4}{'runs':>7}{'runs/s':>9}{'vs 1':>7}{'vs -c 1':>9}"
        f"{'worker CPU ms/run':>19}{'non-2xx':>9}{'other CPU':>11}",
    ]
    for r in results["e2e"]:
        name = f"{_projects(r['projects'])}, {_size(r['body_bytes'])}"
        out.append(
            f"  {name:<28}{r['concurrency']:>4}{r['runs']:>7}{run._fmt(r['per_s'], 0):>9}"
            f"{run._fmt(r['ratio'], 2):>7}{_scaling(r):>9}{run._fmt(r['worker_cpu_ms'], 2):>19}"
            f"{r['non_2xx']:>9}{r['other_cpu_pct']:>10.0f}%"
        )
    out += [
        "",
        f"  projects created: {results['projects_created']:,} in "
        f"{results['create_seconds']:.1f} s (one transaction)",
    ]
    out += [f"  {line}" for line in run.failure_summary(failures(results))]
    return "\n".join(out)


def render_block(results: dict[str, Any]) -> str:
    """The markdown between the growth markers."""
    m, k = results["machine"], results["knobs"]
    lines = [
        BEGIN,
        "## Cost as work grows (`make bench-growth`)",
        "",
        f"Written by `{results['command']}` (`python -m bench.growth`) on {m['date']}, code "
        f"{m['code']}; PostgreSQL {m['postgresql']}, Redis {m['redis']}, Python {m['python']}, "
        f"on {m['cpus']} × {m['cpu_model']} ({m['memory']}, load average {m['load_before']} at "
        "the start), shared by everything. The ratios compare rows of the same run; the "
        "absolute figures are not comparable with `make bench`'s above (another run, another "
        "moment of the machine).",
        "",
        "### Admission",
        "",
        "| events | conns | req/s | vs 1 project | p50 ms | p99 ms | non-2xx | web CPU ms/req "
        "| auth misses (model) | other CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["admission"]:
        lines.append(
            f"| {r['label']} | {r['connections']} | {r['rps']:,.0f} | {run._fmt(r['ratio'], 2)} "
            f"| {r['p50']:.1f} | {r['p99']:.1f} | {r['non_2xx']} | {r['web_cpu_ms']:.2f} | "
            f"{r['auth_miss_share'] * 100:.0f}% | {r['other_cpu_pct']:.0f}% |"
        )
    lines += [
        "",
        "### End to end (`noop-3`)",
        "",
        "| projects | event body | worker processes | runs | runs/s | vs 1 project | vs `-c 1` "
        "| worker CPU ms/run | non-2xx | other CPU |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["e2e"]:
        lines.append(
            f"| {r['projects']:,} | {_size(r['body_bytes'])} | {r['concurrency']} | "
            f"{r['runs']:,} | {run._fmt(r['per_s'], 0)} | {run._fmt(r['ratio'], 2)} | "
            f"{_scaling(r)} | "
            f"{run._fmt(r['worker_cpu_ms'], 2)} | {r['non_2xx']} | {r['other_cpu_pct']:.0f}% |"
        )
    fails = failures(results)
    if fails:
        lines += [""] + [f"- **FAIL** {line}" for line in fails]
    lines += [
        "",
        f"Admission as `make bench` (a) measures AwoooP's new events ({k['web_workers']} "
        f"gunicorn workers, no worker running, {k['warmup']:g} s warm-up then "
        f"{k['duration']:g} s per row), with the requests spread round-robin over the row's "
        "projects, each to its own path with its own API token (`bench.load.RoundRobin`), so "
        "the web's per-process cache of a project's routes and token hashes "
        f"(`AWOOOP_AUTH_CACHE_SECONDS`, {k['auth_cache_seconds']:g} s) misses more often; "
        '"auth misses" is the share the model min(1, projects × workers / (ttl × req/s)) '
        f"gives, not a count. Bodies are `make bench`'s {len(run.BODY)} bytes, or a JSON "
        f"object of exactly {k['body_bytes']:,} bytes of random hex that TOAST cannot shrink "
        f"(`AWOOOP_MAX_BODY_BYTES` {k['max_body_bytes']:,}"
        + (", as configured" if not k["max_body_raised"] else ", raised for the bench")
        + "). End to end as `make bench` (b): "
        f"{k['e2e_runs']:,} `noop-3` runs admitted over HTTP ({ADMIT_CONNECTIONS} connections) "
        "with no worker running, then ONE worker with `-c 1` or `-c 2` drains them; runs/s "
        "from the first claim to the last completion (database clock), worker CPU per run "
        "once warm (from the first tenth of the runs completed). vs 1 project compares with "
        "the 1-project, small-body row at the same connections or worker processes; vs `-c 1` "
        "is what a second worker process adds on these 2 cores. The "
        f"{results['projects_created']:,} projects were created in "
        f"{results['create_seconds']:.1f} s in one transaction, and deleted at the end. Every "
        "answer of every phase must be 2xx (a FAIL line lists any that was not).",
        "",
        "`make bench-growth` (migrations first, then `python -m bench.growth`), about 3-4 "
        "minutes. Knobs: `BENCH_DURATION`, `BENCH_WARMUP`, `BENCH_CONNECTIONS`, "
        "`BENCH_GROWTH_PROJECTS` (`100,1000`), `BENCH_GROWTH_BODY_BYTES` (65536), "
        "`BENCH_GROWTH_E2E_RUNS` (1500), `BENCH_TIMEOUT`, `BENCH_KEEP=1`, `BENCH_OUTPUT`, "
        "`BENCH_SPREAD=0`; `BENCH_GROWTH_QUICK=1` is a smoke test of tiny sizes that writes "
        "only to `BENCH_OUTPUT` when it is set.",
        END,
    ]
    return "\n".join(lines) + "\n"


def place_block(current: str, block: str) -> str:
    """``current`` with the growth block replaced by ``block`` (markers included), or appended
    at the end. ``make bench`` rewrites everything above ``bench.run.MARKER`` and keeps what
    lies below: a document without that line gets it before the block."""
    head, found, rest = current.partition(BEGIN)
    if found and END in rest:
        _, _, tail = rest.partition(END)
        return head + block.rstrip("\n") + tail
    text = current.rstrip("\n")
    if run.MARKER not in text:
        text = (text + "\n\n" if text else "") + run.MARKER
    return text + "\n\n" + block


def write_block(path: Path, block: str) -> None:
    try:
        current = path.read_text()
    except FileNotFoundError:
        current = ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(place_block(current, block))


# --- main --------------------------------------------------------------------------------------


@dataclass
class Context:
    knobs: Knobs
    url: str
    logdir: Path
    broker: redis.Redis
    noise: run.Noise
    procs: list[run.Proc]
    auth_cache_seconds: float
    web_env: dict[str, str]


def main() -> int:
    from awooop.config import ConfigError, Settings

    try:
        knobs = Knobs.from_env()
        settings = Settings.from_env()
    except (run.BenchError, ConfigError) as exc:
        print(f"bench-growth: {exc}", file=sys.stderr)
        return 2
    url = settings.database_url
    logdir = Path(tempfile.mkdtemp(prefix="awooop-bench-growth-"))
    run.log(
        f"process logs in {logdir}"
        + (" (quick mode: tiny sizes)" if knobs.quick else "")
        + (f"; writes {knobs.output}" if knobs.output else "; writes no markdown")
    )
    procs: list[run.Proc] = []

    def on_timeout(*_: object) -> None:
        raise run.Timeout()

    def on_term(*_: object) -> None:
        raise KeyboardInterrupt()

    signal.signal(signal.SIGALRM, on_timeout)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(int(knobs.timeout))
    tag = f"growth-{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(2)}"
    ids: list[str] = []
    created = False
    broker: redis.Redis | None = None
    try:
        try:
            broker = redis.Redis.from_url(settings.broker_url, socket_timeout=10)
            broker.ping()
        except redis.RedisError as exc:
            raise run.BenchError(f"no Redis at AWOOOP_BROKER_URL: {exc}") from exc
        try:
            machine = run.machine_info(url, settings.broker_url)
        except psycopg2.Error as exc:
            raise run.BenchError(f"no PostgreSQL at AWOOOP_DATABASE_URL: {exc}") from exc
        run.log(
            f"{machine['cpus']} CPUs ({machine['cpu_model']}), PostgreSQL "
            f"{machine['postgresql']}, Redis {machine['redis']}, load {machine['load_before']}"
        )
        db = str(broker.connection_pool.connection_kwargs.get("db", 0))
        consumers = [
            c
            for c in broker.client_list()
            if c.get("cmd") in ("brpop", "blpop", "bzpopmin") and c.get("db") == db
        ]
        if consumers:
            run.log(
                f"warning: {len(consumers)} other client(s) are blocked reading lists on this "
                "broker database (Celery workers?); they may take the bench's run messages"
            )

        body = big_body(knobs.body_bytes)
        web_env: dict[str, str] = {}
        max_body, raised = settings.max_body_bytes, False
        if len(body) > max_body:
            max_body, raised = len(body), True
            web_env["AWOOOP_MAX_BODY_BYTES"] = str(max_body)
            run.log(
                f"AWOOOP_MAX_BODY_BYTES={settings.max_body_bytes} would refuse {len(body)}-byte "
                f"bodies: the bench's web uses AWOOOP_MAX_BODY_BYTES={max_body}"
            )
        else:
            run.log(
                f"AWOOOP_MAX_BODY_BYTES={max_body} admits the {len(body)}-byte bodies (unchanged)"
            )

        admission_ids = [f"{tag}-a{i}" for i in range(max(knobs.projects))]
        e2e_ids = {
            row.key: [f"{tag}-{row.key}-{i}" for i in range(row.projects)]
            for row in e2e_rows(knobs, body)
        }
        ids = admission_ids + [p for group in e2e_ids.values() for p in group]
        t0 = time.perf_counter()
        tokens = create_projects(settings, ids)
        created = True
        create_seconds = time.perf_counter() - t0
        run.log(
            f"created {len(ids):,} projects ({tag}-*) in {create_seconds:.1f} s "
            "(one transaction, store functions)"
        )

        ctx = Context(
            knobs,
            url,
            logdir,
            broker,
            run.Noise(lambda: [p for proc in procs for p in proc.pids()]),
            procs,
            settings.auth_cache_seconds,
            web_env,
        )
        admission = bench_admission(ctx, admission_ids, tokens, body)
        web, port = run.start_web("web-growth-e2e", APP, logdir, **web_env)
        procs.append(web)
        e2e: list[dict[str, Any]] = []
        try:
            run.wait_http(web, port)
            for row in e2e_rows(knobs, body):
                e2e.append(bench_e2e(ctx, web, port, row, e2e_ids[row.key], tokens))
        finally:
            web.stop()
            procs.remove(web)
        _e2e_ratios(e2e)

        results: dict[str, Any] = {
            "command": ("BENCH_GROWTH_QUICK=1 " if knobs.quick else "")
            + ("make bench-growth" if os.environ.get("MAKELEVEL") else "python -m bench.growth"),
            "machine": machine,
            "knobs": {
                "duration": knobs.duration,
                "warmup": knobs.warmup,
                "connections": list(knobs.connections),
                "projects": list(knobs.projects),
                "body_bytes": len(body),
                "e2e_runs": knobs.e2e_runs,
                "max_body_bytes": max_body,
                "max_body_raised": raised,
                "auth_cache_seconds": settings.auth_cache_seconds,
                "web_workers": admission[0]["web_workers"] if admission else None,
            },
            "projects_created": len(ids),
            "create_seconds": create_seconds,
            "admission": admission,
            "e2e": e2e,
        }
        print(render_console(results), flush=True)
        (logdir / "results.json").write_text(json.dumps(results, indent=2, default=str))
        if knobs.output is None:
            run.log(f"quick mode: no markdown written (raw figures: {logdir}/results.json)")
        else:
            write_block(knobs.output, render_block(results))
            run.log(
                f"wrote the growth block of {knobs.output} (raw figures: {logdir}/results.json)"
            )
        return 0
    except (run.BenchError, run.Timeout, KeyboardInterrupt) as exc:
        return run.failed("bench-growth", exc, "BENCH_TIMEOUT", knobs.timeout, logdir)
    finally:
        signal.alarm(0)
        for proc in reversed(procs):
            proc.stop()
        run.stop_all()
        if created and broker is not None:
            with contextlib.suppress(redis.RedisError):
                run.purge_queue(broker, "runs")
        if created and not knobs.keep:
            try:
                t0 = time.perf_counter()
                run.delete_projects(url, ids)
                run.log(
                    f"deleted the bench projects' rows ({len(ids):,} projects, {tag}-*) in "
                    f"{time.perf_counter() - t0:.1f} s"
                )
            except psycopg2.Error as exc:
                run.log(f"could not delete the bench projects' rows: {exc}")


if __name__ == "__main__":
    sys.exit(main())
