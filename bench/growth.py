"""``make bench-growth`` (``python -m bench.growth``): what admission and a run cost as the work
grows (more projects, bigger events, more worker processes); writes its block of
``docs/benchmarks.md``. How: bench/NOTES.md.

Knobs: BENCH_DURATION (s, 6), BENCH_WARMUP (1.5), BENCH_CONNECTIONS ("16,64"),
BENCH_GROWTH_PROJECTS ("100,1000"; the largest is also the end-to-end rows'),
BENCH_GROWTH_BODY_BYTES (65536), BENCH_GROWTH_E2E_RUNS (1500), BENCH_TIMEOUT (s, 600),
BENCH_KEEP=1, BENCH_OUTPUT, BENCH_SPREAD=0. BENCH_GROWTH_QUICK=1: tiny sizes (1 s windows,
16 connections, 5 and 20 projects, 100 runs per row), markdown only when BENCH_OUTPUT is set.
"""

from __future__ import annotations

import dataclasses
import functools
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench import database, load, procs, report
from bench.report import BenchError, env_float, env_int, env_ints, fmt, knob, log, ratio, table

BEGIN = "<!-- growth:begin (written by `make bench-growth`) -->"
END = "<!-- growth:end -->"
QUICK = "BENCH_GROWTH_QUICK"
ADMIT_CONNECTIONS = 16  # the end-to-end rows' admission (not measured)
_BIG_HEAD = b'{"summary": "disk almost full on db-1", "source": "bench", "padding": "'
_BIG_TAIL = b'"}'
BIG_BODY_MIN = len(_BIG_HEAD) + len(_BIG_TAIL)


@dataclass(frozen=True)
class Knobs:
    quick: bool = field(default_factory=lambda: report.is_quick(QUICK))
    duration: float = knob(env_float, "BENCH_DURATION", 6.0, QUICK, 1.0)
    warmup: float = knob(env_float, "BENCH_WARMUP", 1.5, QUICK, 0.5)
    connections: tuple[int, ...] = knob(env_ints, "BENCH_CONNECTIONS", "16,64", QUICK, "16")
    # besides the 1-project reference
    projects: tuple[int, ...] = knob(env_ints, "BENCH_GROWTH_PROJECTS", "100,1000", QUICK, "5,20")
    body_bytes: int = knob(env_int, "BENCH_GROWTH_BODY_BYTES", 64 * 1024)
    e2e_runs: int = knob(env_int, "BENCH_GROWTH_E2E_RUNS", 1500, QUICK, 100)
    timeout: float = knob(env_float, "BENCH_TIMEOUT", 600, QUICK, 240)
    # None: print only (quick mode without BENCH_OUTPUT)
    output: Path | None = field(default_factory=lambda: report.quick_output(QUICK))

    def __post_init__(self) -> None:
        if self.e2e_runs < 20:
            raise BenchError("BENCH_GROWTH_E2E_RUNS must be at least 20")
        if self.body_bytes < BIG_BODY_MIN:
            raise BenchError(f"BENCH_GROWTH_BODY_BYTES must be at least {BIG_BODY_MIN}")


def big_body(size: int) -> bytes:
    """A JSON object of exactly ``size`` bytes: the small body's fields and a padding of random
    hex, which PostgreSQL's TOAST compression cannot shrink much."""
    pad = size - BIG_BODY_MIN
    if pad < 0:
        raise BenchError(f"a {size}-byte body cannot hold the event's fields")
    return _BIG_HEAD + secrets.token_hex(pad // 2 + 1)[:pad].encode() + _BIG_TAIL


def auth_miss_share(projects: int, web_workers: int, ttl: float, rps: float) -> float:
    """The share of requests whose project the serving web worker reads from PostgreSQL (a
    model, not a count): each worker keeps a project's auth ``ttl`` seconds, and requests
    spread evenly over projects and workers."""
    if ttl <= 0:
        return 1.0
    if rps <= 0:
        return float("nan")
    return min(1.0, projects * max(web_workers, 1) / (ttl * rps))


def size_text(n: int) -> str:
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n:,} B"


@dataclass
class Bench:
    knobs: Knobs
    url: str
    logdir: Path
    broker: redis.Redis
    noise: procs.Noise
    tokens: dict[str, str]
    auth_cache_seconds: float
    web_env: dict[str, str]


# --- admission ---------------------------------------------------------------------------------


def bench_admission(b: Bench, ids: list[str], body: bytes) -> list[dict[str, Any]]:
    """Every row (1 project, each count of projects, 1 project with big bodies) at each
    connection count, on one web; each row's req/s against the 1-project row's."""
    k = b.knobs
    rows = [("1 project", 1, load.BODY)]
    rows += [(f"{n:,} projects", n, load.BODY) for n in k.projects]
    rows.append((f"1 project, {size_text(len(body))} bodies", 1, body))
    results: list[dict[str, Any]] = []
    with procs.serving(procs.Web("web-growth-admission", b.logdir, **b.web_env)) as web:
        for conns in k.connections:
            reference = None
            for label, n, row_body in rows:
                source = load.events(b.tokens, ids[:n], body=row_body)
                info = web.measure(
                    f"{label} @{conns}",
                    source,
                    conns,
                    b.noise,
                    duration=k.duration,
                    warmup=k.warmup,
                )
                workers = len(web.pids()) - 1  # all started by now (the load spread over them)
                reference = reference or info  # the first row: 1 project, small bodies
                info.update(
                    label=label,
                    projects=n,
                    body_bytes=len(row_body),
                    web_workers=workers,
                    auth_miss_share=auth_miss_share(n, workers, b.auth_cache_seconds, info["rps"]),
                    ratio=ratio(info["rps"], reference["rps"]),
                )
                results.append(info)
    log(f"purged {database.purge_queue(b.broker)} queued messages (no worker ran)")
    return results


# --- end to end ----------------------------------------------------------------------------------


def bench_e2e(
    b: Bench, web: procs.Web, key: str, ids: list[str], concurrency: int, body: bytes
) -> dict[str, Any]:
    """``e2e_runs`` runs admitted over HTTP with no worker running, then drained by one
    worker with ``concurrency`` processes."""
    n = b.knobs.e2e_runs
    projects = "1 project" if len(ids) == 1 else f"{len(ids):,} projects"
    label = f"e2e {projects}, {size_text(len(body))}, -c {concurrency}"
    info: dict[str, Any] = dict(label=label, projects=len(ids), body_bytes=len(body))
    info.update(concurrency=concurrency, runs=n)
    database.purge_queue(b.broker)
    database.vacuum_runs(b.url)
    source = load.events(b.tokens, ids, limit=n, body=body)
    result = web.admit(f"{label} admission", source, n, ADMIT_CONNECTIONS, n / 20, spread=False)
    info.update(
        admit_per_s=result.rps,
        non_2xx=result.non_2xx,
        errors=result.errors,
        statuses=dict(result.statuses),
        failures=result.failure_lines,
    )
    start = functools.partial(procs.start_worker, f"worker-growth-{key}", b.logdir, concurrency)
    # The worker's CPU from a tenth of the runs done to the last; the noise over the drain.
    drained = database.drain(
        label, b.url, ids, n, start, procs.Proc.cpu_seconds, b.noise.measure(info)
    )
    info.update(wall_s=drained.wall_s, seconds=drained.seconds, per_s=drained.per_s(n))
    info["cpu_measured_runs"] = warm = drained.warm_runs
    info["worker_cpu_ms"] = (drained.end - drained.warm) * 1000 / warm if warm > 0 else float("nan")
    log(
        f"{label}: {info['per_s']:.0f} runs/s, worker CPU {info['worker_cpu_ms']:.2f} ms/run, "
        f"{procs.noise_text(info)}"
    )
    return info


def e2e_ratios(results: list[dict[str, Any]]) -> None:
    """Each row's runs/s against the 1-project, small-event row with as many worker processes
    (``ratio``) and, for ``-c 2``, against the same projects and events with ``-c 1``
    (``scaling``: what the second process adds on these cores)."""
    per_s = {(r["projects"], r["body_bytes"], r["concurrency"]): r["per_s"] for r in results[::-1]}
    for r in results:
        r["ratio"] = ratio(r["per_s"], per_s.get((1, len(load.BODY), r["concurrency"])))
        single = per_s.get((r["projects"], r["body_bytes"], 1))
        r["scaling"] = ratio(r["per_s"], single) if r["concurrency"] != 1 else None


# --- report ------------------------------------------------------------------------------------


def failures(results: dict[str, Any]) -> list[str]:
    return [line for part in ("admission", "e2e") for r in results[part] for line in r["failures"]]


def render_block(results: dict[str, Any]) -> str:
    """The markdown between the growth markers."""
    k = results["knobs"]
    anchor = "../bench/NOTES.md#make-bench-growth-benchgrowthpy"
    max_body = f"`AWOOOP_MAX_BODY_BYTES` {k['max_body_bytes']:,}, " + (
        "raised for the bench" if k["max_body_raised"] else "as configured"
    )
    written = report.written_by(results["command"], "bench.growth", results["machine"])
    lines = [
        "Admission and `noop-3` runs end to end as `make bench` measures them, with the events "
        "spread over more projects, with bigger bodies, and with a second worker process. The "
        "ratios compare rows of this run; the absolute figures are not comparable with "
        "`make bench`'s above (another run, another moment of the machine). How it is "
        f"measured: [bench/NOTES.md]({anchor}).",
        "",
        f"Settings: {k['web_workers']} gunicorn workers; admission {k['warmup']:g} s warm-up "
        f"then {k['duration']:g} s per row; bodies {len(load.BODY)} B or {k['body_bytes']:,} B "
        f"({max_body}); `AWOOOP_AUTH_CACHE_SECONDS` {k['auth_cache_seconds']:g} s; end to end "
        f"{k['e2e_runs']:,} runs per row, admitted over {ADMIT_CONNECTIONS} connections; "
        f"{results['projects_created']:,} projects created in {results['create_seconds']:.1f} s "
        "in one transaction, deleted at the end.",
        "",
        "### Admission",
        "",
        *table(
            "events | conns | req/s | vs 1 project | p50 ms | p99 ms | non-2xx | web CPU ms/req "
            f"| auth misses (model) | {report.NOISE_HEADER}",
            [
                f"{r['label']} | {r['connections']} | {r['rps']:,.0f} | {fmt(r['ratio'], 2)} | "
                f"{r['p50']:.1f} | {r['p99']:.1f} | {r['non_2xx']} | {r['web_cpu_ms']:.2f} | "
                f"{r['auth_miss_share'] * 100:.0f}% | {report.noise_cells(r)}"
                for r in results["admission"]
            ],
        ),
        "",
        "### End to end (`noop-3`)",
        "",
        *table(
            "projects | event body | worker processes | runs | runs/s | vs 1 project | vs `-c 1` "
            f"| worker CPU ms/run | non-2xx | {report.NOISE_HEADER}",
            [
                f"{r['projects']:,} | {size_text(r['body_bytes'])} | {r['concurrency']} | "
                f"{r['runs']:,} | {fmt(r['per_s'], 0)} | {fmt(r['ratio'], 2)} | "
                f"{'' if r['scaling'] is None else fmt(r['scaling'], 2)} | "
                f"{fmt(r['worker_cpu_ms'], 2)} | {r['non_2xx']} | {report.noise_cells(r)}"
                for r in results["e2e"]
            ],
            "ll",
        ),
    ]
    if fails := failures(results):
        lines += [""] + [f"- **FAIL** {line}" for line in fails]
    return report.section(BEGIN, END, "Cost as work grows (`make bench-growth`)", written, lines)


# --- main --------------------------------------------------------------------------------------


def main() -> None:
    from awooop.config import Settings

    knobs, settings = report.configure("bench-growth", lambda: (Knobs(), Settings.from_env()))
    url = settings.database_url
    tag = f"growth-{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(2)}"
    broker = redis.Redis.from_url(settings.broker_url, socket_timeout=10)
    ids: list[str] = []
    try:
        with report.session("bench-growth", knobs.timeout) as logdir:
            log(f"writes {knobs.output or 'no markdown (quick mode)'}")
            machine = report.machine_info(url, settings.broker_url)
            body = big_body(knobs.body_bytes)
            max_body = max(settings.max_body_bytes, len(body))
            raised = len(body) > settings.max_body_bytes
            web_env = {"AWOOOP_MAX_BODY_BYTES": str(max_body)} if raised else {}
            many = max(knobs.projects)
            # The end-to-end rows: (key, projects, worker processes, body)
            rows = [
                ("e1c1", 1, 1, load.BODY),
                ("e1c2", 1, 2, load.BODY),
                ("emc1", many, 1, load.BODY),
                ("emc2", many, 2, load.BODY),
                ("e1c1big", 1, 1, body),
            ]
            admission_ids = [f"{tag}-a{i}" for i in range(many)]
            e2e_ids = {key: [f"{tag}-{key}-{i}" for i in range(n)] for key, n, _, _ in rows}
            ids = admission_ids + [p for group in e2e_ids.values() for p in group]
            t0 = time.perf_counter()
            tokens = database.create_projects(url, ids)
            create_seconds = time.perf_counter() - t0
            log(f"created {len(ids):,} projects ({tag}-*) in {create_seconds:.1f} s")
            noise = procs.Noise(procs.running_pids)
            b = Bench(
                knobs, url, logdir, broker, noise, tokens, settings.auth_cache_seconds, web_env
            )
            admission = bench_admission(b, admission_ids, body)
            with procs.serving(procs.Web("web-growth-e2e", logdir, **web_env)) as web:
                e2e = [bench_e2e(b, web, key, e2e_ids[key], c, bd) for key, _, c, bd in rows]
            e2e_ratios(e2e)
            results: dict[str, Any] = {
                "command": report.command("bench-growth", "bench.growth", QUICK),
                "machine": machine,
                "knobs": {
                    **dataclasses.asdict(knobs),
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
            block = render_block(results)
            print(block, *report.failure_summary(failures(results)), sep="\n", flush=True)
            report.save_results(logdir, results)
            report.publish(knobs.output, block, BEGIN, END, logdir)
    finally:
        if ids:
            database.purge_queue(broker)
        if ids and not report.keep():
            database.delete_projects(url, ids, tag)


if __name__ == "__main__":
    main()
