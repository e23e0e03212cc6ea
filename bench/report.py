"""What every bench shares besides its processes and databases: its knobs from the
environment, its log lines, the way it starts and ends (timeout, signals, exit status), the
machine it ran on, and the tables it prints and writes into the docs."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

Row = tuple[str, float, str, str]  # (what, measured, target text, verdict)
MARKER = "<!-- Everything below this line is kept when `make bench` rewrites this file. -->"


class BenchError(RuntimeError):
    """The benchmark could not run; the message says what to check."""


class Timeout(BaseException):
    """The bench's timeout elapsed (a BaseException, so nothing swallows it on the way out)."""


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- knobs -----------------------------------------------------------------------------------


def knob(read: Any, name: str, default: Any, quick_knob: str = "", quick: Any = None) -> Any:
    """A dataclass field read from the environment when the object is made; by default
    ``default``, or ``quick`` when ``quick_knob`` is set (a bench's quick trial)."""
    return field(default_factory=lambda: read(name, quick if is_quick(quick_knob) else default))


def is_quick(quick_knob: str) -> bool:
    return bool(quick_knob) and os.environ.get(quick_knob) == "1"


def env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError as exc:
        raise BenchError(f"{name} must be a number") from exc


def env_int(name: str, default: float) -> int:
    return int(env_float(name, default))


def env_list(name: str, default: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in os.environ.get(name, default).split(",") if v.strip())


def env_ints(name: str, default: str) -> tuple[int, ...]:
    raw = os.environ.get(name, default)
    try:
        values = tuple(int(v) for v in env_list(name, default))
    except ValueError as exc:
        raise BenchError(f"{name} must be comma-separated whole numbers, not {raw!r}") from exc
    if not values or min(values) < 1:
        raise BenchError(f"{name} must name at least one positive number, not {raw!r}")
    return values


def env_choice(name: str, known: Sequence[str]) -> tuple[str, ...]:
    chosen = env_list(name, ",".join(known))
    unknown = set(chosen) - set(known)
    if unknown:
        raise BenchError(f"{name}: unknown {', '.join(sorted(unknown))}; known: {', '.join(known)}")
    return chosen


def output(default: str = "docs/benchmarks.md", name: str = "BENCH_OUTPUT") -> Path:
    return ROOT / os.environ.get(name, default)


def quick_output(quick_knob: str) -> Path | None:
    """BENCH_OUTPUT, else docs/benchmarks.md; None (print only) in quick mode without it."""
    chosen = os.environ.get("BENCH_OUTPUT")
    quick = is_quick(quick_knob)
    return ROOT / chosen if chosen else None if quick else ROOT / "docs/benchmarks.md"


def command(target: str, module: str, quick_knob: str = "") -> str:
    """How the bench was started: ``make <target>`` when make started it (make sets
    MAKELEVEL), else ``python -m <module>``; after ``<quick_knob>=1`` when that knob is set."""
    how = f"make {target}" if os.environ.get("MAKELEVEL") else f"python -m {module}"
    return f"{quick_knob}=1 {how}" if is_quick(quick_knob) else how


def keep() -> bool:
    return os.environ.get("BENCH_KEEP") == "1"


# --- a bench's life --------------------------------------------------------------------------


def configure(command: str, make: Any) -> Any:
    """``make()`` (the knobs, the settings); a bad value exits with status 2 and a line."""
    from awooop.config import ConfigError

    try:
        return make()
    except (BenchError, ConfigError, ValueError) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


@contextlib.contextmanager
def session(command: str, timeout: float, timeout_knob: str = "BENCH_TIMEOUT") -> Iterator[Path]:
    """The logs folder of a run that gives up after ``timeout`` seconds (SIGALRM) and stops on
    SIGTERM. A BenchError, a timeout or an interrupt becomes a line on stderr and SystemExit
    (1, or 130 when interrupted); every process started is stopped on the way out."""
    import psycopg2
    import redis

    from bench import procs

    logdir = Path(tempfile.mkdtemp(prefix=f"awooop-{command}-"))
    log(f"process logs in {logdir}")

    def on_timeout(*_: object) -> None:
        raise Timeout()

    def on_term(*_: object) -> None:
        raise KeyboardInterrupt()

    signal.signal(signal.SIGALRM, on_timeout)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(int(timeout))
    try:
        yield logdir
    except KeyboardInterrupt:
        print(f"\n{command}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Timeout:
        print(
            f"\n{command}: error: gave up after {timeout_knob}={timeout:.0f} s; "
            f"process logs in {logdir}",
            file=sys.stderr,
        )
        raise SystemExit(1) from None
    except (BenchError, psycopg2.Error, redis.RedisError) as exc:
        print(f"\n{command}: error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        signal.alarm(0)
        procs.stop_all()


def machine_info(db_url: str, broker_url: str) -> dict[str, str]:
    """The machine, the code and the servers, for a report's header."""
    import psycopg2
    import redis

    from bench import database

    def first(path: str, prefix: str) -> str | None:
        with contextlib.suppress(OSError), open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
        return None

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True
        ).stdout

    mem = first("/proc/meminfo", "MemTotal")
    changed = git(
        "status", "--porcelain", "--", "awooop", "migrations", "celeryconfig.py", "gunicorn.conf.py"
    ).splitlines()
    code = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    if changed:
        code += f" + uncommitted changes in {len(changed)} files: " + ", ".join(
            line[3:] for line in changed
        )
    try:
        with database.connect(db_url) as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT current_setting('server_version'), current_setting('fsync'),"
                " current_setting('synchronous_commit'), current_setting('shared_buffers')"
            )
            pg_version, fsync, sync_commit, shared_buffers = cur.fetchone()
    except psycopg2.Error as exc:
        raise BenchError(f"no PostgreSQL at AWOOOP_DATABASE_URL: {exc}") from exc
    try:
        broker = redis.Redis.from_url(broker_url, socket_timeout=10)
        redis_version = broker.info("server").get("redis_version", "?")
        db = str(broker.connection_pool.connection_kwargs.get("db", 0))
        blocked = [
            c for c in broker.client_list() if c.get("cmd") in ("brpop", "blpop", "bzpopmin")
        ]
    except redis.RedisError as exc:
        raise BenchError(f"no Redis at AWOOOP_BROKER_URL: {exc}") from exc
    if consumers := sum(1 for c in blocked if c.get("db") == db):
        log(
            f"warning: {consumers} other client(s) are blocked reading lists on this broker "
            "database (Celery workers?); they may take the bench's run messages"
        )
    info = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": str(len(os.sched_getaffinity(0))),
        "cpu_model": first("/proc/cpuinfo", "model name") or "unknown",
        "memory": f"{int((mem or '0').split()[0]) / 1024 / 1024:.1f} GiB" if mem else "unknown",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgresql": f"{pg_version} (fsync={fsync}, synchronous_commit={sync_commit}, "
        f"shared_buffers={shared_buffers})",
        "fsync": str(fsync),
        "synchronous_commit": str(sync_commit),
        "redis": str(redis_version),
        "load_before": Path("/proc/loadavg").read_text().split()[0],
        "code": code,
    }
    log(
        f"{info['cpus']} CPUs ({info['cpu_model']}), PostgreSQL {info['postgresql']}, "
        f"Redis {info['redis']}, load {info['load_before']}"
    )
    return info


def save_results(logdir: Path, results: Any) -> None:
    (logdir / "results.json").write_text(json.dumps(results, indent=2, default=str))


def partial(chosen: Sequence[str], known: Sequence[str], out: Path) -> bool:
    """Whether only some phases ran and no BENCH_OUTPUT asks for the report anyway."""
    if set(chosen) == set(known) or "BENCH_OUTPUT" in os.environ:
        return False
    log(f"only {','.join(chosen)} ran: {out} left as it was")
    return True


# How many consecutive full runs the page shows side by side.
RECENT_RUNS = 3


def recent_runs(path: Path, run: dict[str, Any], keep: int = RECENT_RUNS) -> list[dict[str, Any]]:
    """The last ``keep`` full runs, ``run`` the newest, kept in ``path`` (a JSON list of
    ``{"date", "code", "targets": [[measure, measured, target, verdict], ...]}``)."""
    runs = json.loads(path.read_text()) if path.exists() else []
    runs = [*runs, run][-keep:]
    path.write_text(json.dumps(runs, indent=1) + "\n")
    return runs


def recent_runs_table(runs: list[dict[str, Any]]) -> str:
    """One row per measure, one column per run (oldest first); a missed target marked ✗."""
    if not runs:
        return ""
    head = " | ".join(f"{r['date']}, code {r['code']}" for r in runs)
    lines = [f"| measure | {head} | target |", "|---|" + "---:|" * len(runs) + "---|"]
    by_measure = [{row[0]: row for row in r["targets"]} for r in runs]
    for what, _, target, _ in runs[-1]["targets"]:
        cells = []
        for rows in by_measure:
            row = rows.get(what)
            cells.append("n/a" if row is None else row[1] + (" ✗" if row[3] == "MISSED" else ""))
        lines.append(f"| {what} | {' | '.join(cells)} | {md_target(target)} |")
    return "\n".join(lines)


def write_page(path: Path, page: str) -> None:
    """``page`` (make bench's, ending with MARKER) written over what ``path`` holds down to
    MARKER; the other benches' sections below it are kept."""
    kept = path.read_text().partition(MARKER)[2].lstrip("\n") if path.exists() else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page + kept)


def publish(out: Path | None, block: str, begin: str, end: str, logdir: Path) -> None:
    """A bench's block written between its markers below MARKER (None: quick, print only)."""
    if out is None:
        log(f"quick mode: no markdown written (raw figures: {logdir}/results.json)")
    else:
        write_between(out, block, begin, end, after=MARKER)


def written_by(command: str, module: str, m: dict[str, str]) -> str:
    """The first sentence of a section: who wrote it (``command``, and the module when that
    is not how it was started), when, on what."""
    also = "" if f"python -m {module}" in command else f" (`python -m {module}`)"
    return (
        f"Written by `{command}`{also} on {m['date']}, code {m['code']}; "
        f"PostgreSQL {m['postgresql']}, Redis {m['redis']}, Python {m['python']}, on "
        f"{m['cpus']} × {m['cpu_model']} ({m['memory']}, load average {m['load_before']} at "
        "the start), shared by everything."
    )


def section(begin: str, end: str, title: str, written: str, body: Sequence[str]) -> str:
    """A bench's block below MARKER: ``begin``, its ``## title``, ``written`` (who wrote it:
    :func:`written_by`), ``body`` one line each, ``end``."""
    return "\n".join([begin, f"## {title}", "", written, "", *body, end]) + "\n"


# --- figures ---------------------------------------------------------------------------------


# The noise columns of a table (:func:`noise_cells` fills them).
NOISE_HEADER = "other CPU | steal | I/O CPU"


def noise_cells(r: dict[str, Any]) -> str:
    """The noise cells of a table row (steal "n/a" in results measured before it was read)."""
    steal = r.get("steal_cpu_pct")
    stolen = "n/a" if steal is None else f"{steal:.0f}%"
    return f"{r['other_cpu_pct']:.0f}% | {stolen} | {r['io_cpu_pct']:.0f}%"


def fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return "n/a" if value != value else f"{value:,.{digits}f}"
    return str(value)


def ratio(a: float | None, b: float | None) -> float:
    if not a or not b:
        return float("nan")
    return a / b


def verdict(value: float, target: float, higher_is_better: bool) -> str:
    if value != value:  # NaN
        return "n/a"
    ok = value >= target if higher_is_better else value <= target
    return "met" if ok else "MISSED"


def target_row(what: str, value: float, target: float, higher: bool, digits: int = 2) -> Row:
    sign = ">=" if higher else "<="
    return (what, value, f"{sign} {target:.{digits}f}", verdict(value, target, higher))


def md_target(target: str) -> str:
    return target.replace(">=", "≥").replace("<=", "≤")


def table(header: str, rows: Sequence[str | Sequence[Any]], align: str = "") -> list[str]:
    """A markdown table: ``header`` and each row its cells joined by ``|`` (or a row the
    sequence of its cells); ``align`` one letter per column (``l`` left, ``r`` right; by
    default the first left, the others right)."""
    cells = header.split("|")
    align = (align or "l").ljust(len(cells), "r")
    out = [
        "|" + "|".join(f" {c.strip()} " if c.strip() else " " for c in cells) + "|",
        "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|",
    ]
    return out + table_rows(rows)


def table_rows(rows: Sequence[str | Sequence[Any]]) -> list[str]:
    """Markdown table rows: each a string of cells joined by " | ", or the sequence of its
    cells."""
    return [f"| {r if isinstance(r, str) else ' | '.join(map(str, r))} |" for r in rows]


def report_failures(label: str, result: Any) -> list[str]:
    """A FAIL line logged for every non-2xx status (and dropped connection) of a load; the
    lines, prefixed with ``label``, for the summary at the end."""
    lines = [f"{label}: {line}" for line in result.failures()]
    for line in lines:
        log(f"FAIL {line}")
    return lines


def failure_summary(failures: list[str]) -> list[str]:
    """The summary's verdict on the answers: the target is zero non-2xx."""
    if not failures:
        return ["Answers: every request of every phase was answered 2xx"]
    return ["FAIL: not every request was answered 2xx (the target is none):"] + [
        f"FAIL {line}" for line in failures
    ]


def place_between(current: str, section: str, begin: str, end: str, after: str = "") -> str:
    """``current`` with what lies between ``begin`` and ``end`` (markers included) replaced by
    ``section`` (which carries them), or with ``section`` appended at its end (below the line
    ``after``, added when missing) when it has no such markers."""
    section = section.strip("\n")
    if begin in current and end in current.partition(begin)[2]:
        head, _, rest = current.partition(begin)
        return head + section + rest.partition(end)[2]
    text = current.rstrip("\n")
    if after and after not in text:
        text = (text + "\n\n" if text else "") + after
    return text + "\n\n" + section + "\n"


def write_between(
    path: Path, section: str, begin: str, end: str, new: str = "", after: str = ""
) -> None:
    """:func:`place_between` on the file at ``path`` (a missing one starts as ``new``)."""
    try:
        current = path.read_text()
    except FileNotFoundError:
        current = new
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(place_between(current, section, begin, end, after))
    log(f"wrote {path}")
