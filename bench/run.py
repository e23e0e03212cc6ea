"""``make bench``: AwoooP against its baselines; prints a table, writes ``docs/benchmarks.md``
(down to :data:`MARKER`; the other benches' sections below it are kept).

(a) Admission over real HTTP: the real app and ``bench.baseline_app`` under the same
    ``gunicorn.conf.py``; new events (unique ``Idempotency-Key``) and duplicates (the same keys
    again) at 16 and 64 keep-alive connections. No worker runs; the queued messages are purged.
(b) End to end: raw Celery no-op tasks/s (``bench.raw_celery``) vs AwoooP ``noop-3`` runs/s,
    one prefork worker process each, the queue filled first; raw Celery runs just before and
    again just after AwoooP's batch, and the ratio is taken against the mean of the two, so a
    drift of the machine's speed across the phase cancels (a large gap between them is
    reported: the ratio is then uncertain); PostgreSQL commits per run over
    the whole lifecycle (admission included), counted exactly (``bench.commits``): the
    delta of the scratch database's ``xact_commit`` less the worker's liveness upserts, the
    web's project-auth loads and the harness's own transactions, each counted where it
    happens; a window with nothing running must count 0 (checked before the e2e phase).
(c) Memory: resident size of the web (gunicorn master + workers) and worker (celery parent +
    child) processes over the end-to-end batch and over a further soak of runs.

Everything runs in a scratch database of its own on the server of ``AWOOOP_DATABASE_URL``
(``awooop_bench_<yyyymmddhhmmss>_<hex>``, migrated to head, autovacuum off on its tables,
``VACUUM (ANALYZE)`` between phases; dropped at the end), and the processes it starts write
their metrics to a fresh ``PROMETHEUS_MULTIPROC_DIR`` under the logs folder. The summary
says FAIL when PostgreSQL is not durable (``fsync`` or ``synchronous_commit`` off) and when
more than 5 commits per run are left. Everything this starts runs in its own process group
and is stopped (SIGTERM, then SIGKILL) on the way out; only loopback traffic. Knobs
(environment): BENCH_DURATION (s, per measured phase, default 6), BENCH_WARMUP (1.5),
BENCH_CONNECTIONS ("16,64"), BENCH_RAW_TASKS (3000), BENCH_E2E_RUNS (2000), BENCH_SOAK_RUNS
(10000), BENCH_TIMEOUT (whole run, s, 420), BENCH_KEEP=1 keeps the scratch database (its
name is logged), BENCH_OUTPUT (default docs/benchmarks.md),
BENCH_PHASES ("admission,e2e"; a partial run writes no report unless BENCH_OUTPUT is set),
BENCH_SPREAD=0 leaves connections where gunicorn puts them (see ``bench.load.Spread``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import json
import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import redis
from sqlalchemy import Engine, create_engine
from sqlalchemy.exc import SQLAlchemyError

from bench import commits, load, scratch
from bench.baseline_app import RUN_LIST

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
MARKER = "<!-- Everything below this line is kept when `make bench` rewrites this file. -->"

TARGETS = {
    "admission_ratio": 0.80,  # AwoooP new events / baseline, req/s
    # A redelivery storm costs no more than new work: duplicates answered at least at the
    # baseline's rate of new events
    "duplicate_vs_baseline": 1.00,  # AwoooP duplicates / baseline new events, req/s
    "p99_ratio": 1.20,  # AwoooP p99 / baseline p99 at 64 connections
    "e2e_ratio": 0.40,  # AwoooP noop-3 runs/s / raw Celery no-op tasks/s
    "commits_per_run": 5.0,
    "memory_growth_pct": 10.0,
}


class BenchError(RuntimeError):
    """The benchmark could not run; the message says what to check."""


class Timeout(BaseException):
    """BENCH_TIMEOUT elapsed (a BaseException, so nothing swallows it on the way out)."""


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError as exc:
        raise BenchError(f"{name} must be a number") from exc


def _env_int(name: str, default: int) -> int:
    return int(_env_float(name, default))


PHASES = ("admission", "e2e")


@dataclass(frozen=True)
class Knobs:
    duration: float = field(default_factory=lambda: _env_float("BENCH_DURATION", 6.0))
    warmup: float = field(default_factory=lambda: _env_float("BENCH_WARMUP", 1.5))
    connections: tuple[int, ...] = field(
        default_factory=lambda: tuple(
            int(c) for c in os.environ.get("BENCH_CONNECTIONS", "16,64").split(",") if c.strip()
        )
    )
    raw_tasks: int = field(default_factory=lambda: _env_int("BENCH_RAW_TASKS", 3000))
    e2e_runs: int = field(default_factory=lambda: _env_int("BENCH_E2E_RUNS", 2000))
    soak_runs: int = field(default_factory=lambda: _env_int("BENCH_SOAK_RUNS", 10000))
    timeout: float = field(default_factory=lambda: _env_float("BENCH_TIMEOUT", 420))
    phases: tuple[str, ...] = field(
        default_factory=lambda: tuple(
            p.strip()
            for p in os.environ.get("BENCH_PHASES", ",".join(PHASES)).split(",")
            if p.strip()
        )
    )
    keep: bool = field(default_factory=lambda: os.environ.get("BENCH_KEEP") == "1")
    output: Path = field(
        default_factory=lambda: ROOT / os.environ.get("BENCH_OUTPUT", "docs/benchmarks.md")
    )


def failed(
    command: str, exc: BaseException, timeout_knob: str, timeout: float, logdir: Path
) -> int:
    """What a bench's ``main()`` that stopped on ``exc`` says on stderr, and its exit status:
    130 when interrupted, 1 otherwise (an error, or ``timeout_knob`` elapsed)."""
    if isinstance(exc, KeyboardInterrupt):
        print(f"\n{command}: interrupted", file=sys.stderr)
        return 130
    if isinstance(exc, Timeout):
        print(
            f"\n{command}: error: gave up after {timeout_knob}={timeout:.0f} s; "
            f"process logs in {logdir}",
            file=sys.stderr,
        )
    else:
        print(f"\n{command}: error: {exc}", file=sys.stderr)
    return 1


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- processes -----------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _tree(pid: int) -> list[int]:
    tree, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, []))
    return out


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime, stime (own) + cutime, cstime (children already reaped)
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class Proc:
    """A child process in its own process group, with its output in a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logdir: Path) -> None:
        self.name = name
        self.log_path = logdir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pid = self.popen.pid
        _RUNNING.append(self)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def pids(self) -> list[int]:
        return _tree(self.pid) if self.alive() else []

    def rss_mib(self) -> float:
        return sum(_rss_kib(p) for p in self.pids()) / 1024.0

    def cpu_seconds(self) -> float:
        return sum(_cpu_seconds(p) for p in self.pids())

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join("    " + line for line in text[-lines:])

    def check(self) -> None:
        if not self.alive():
            raise BenchError(
                f"{self.name} exited with status {self.popen.returncode}; "
                f"log {self.log_path}:\n{self.log_tail()}"
            )

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the group, wait, then SIGKILL whatever is left of the group."""
        if self in _RUNNING:
            _RUNNING.remove(self)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log(f"{self.name} did not stop within {timeout:.0f} s; killing it")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
        self._log.close()


_RUNNING: list[Proc] = []


def stop_all() -> None:
    for proc in reversed(list(_RUNNING)):
        proc.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env.update(extra)
    return env


def wait_http(proc: Proc, port: int, timeout: float = 30.0) -> None:
    """Until the server answers an HTTP request (any status)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.check()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(
                    b"GET /bench-ready HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                )
                if s.recv(16).startswith(b"HTTP/1."):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise BenchError(
        f"{proc.name} did not answer on port {port} within {timeout:.0f} s; "
        f"log {proc.log_path}:\n{proc.log_tail()}"
    )


def _tcp_inode(server_port: int, client_port: int) -> str | None:
    """The inode of the server side of a loopback connection, from /proc/net/tcp{,6}."""
    local, remote = f":{server_port:04X}", f":{client_port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[1].endswith(local) and cols[2].endswith(remote):
                    return cols[9]
    return None


def socket_owner(web: Proc, server_port: int) -> Callable[[int], int | None]:
    """local port of a client connection -> the gunicorn worker pid that accepted it."""

    def owner_of(client_port: int) -> int | None:
        inode = _tcp_inode(server_port, client_port)
        if inode is None or inode == "0":
            return None
        target = f"socket:[{inode}]"
        for pid in web.pids()[1:]:  # the workers, not the master
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):
                        if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                            return pid
        return None

    return owner_of


def spread_over(web: Proc, port: int) -> load.Spread | None:
    """Connections spread evenly over the gunicorn workers (BENCH_SPREAD=0: as accepted)."""
    if os.environ.get("BENCH_SPREAD", "1") == "0":
        return None
    return load.Spread(socket_owner(web, port), len(web.pids()) - 1)


def start_web(name: str, app: str, logdir: Path, **env: str) -> tuple[Proc, int]:
    port = free_port()
    proc = Proc(
        name,
        [str(BIN / "gunicorn"), "-c", "gunicorn.conf.py", app],
        child_env(AWOOOP_PORT=str(port), AWOOOP_ACCESS_LOG="0", **env),
        logdir,
    )
    return proc, port


def start_worker(
    name: str, app: str, queue: str, logdir: Path, concurrency: int = 1, **env: str
) -> Proc:
    return Proc(
        name,
        [
            str(BIN / "celery"),
            "-A",
            app,
            "worker",
            "-Q",
            queue,
            "-c",
            str(concurrency),
            "-n",
            f"{name}-{os.getpid()}@%h",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            "-P",
            "prefork",
        ],
        child_env(**env),
        logdir,
    )


# --- machine and noise -----------------------------------------------------------------------


def _cpu_busy() -> tuple[float, float]:
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / os.sysconf("SC_CLK_TCK"), sum(values) / os.sysconf("SC_CLK_TCK")


class Noise:
    """CPU used during a phase by processes other than the bench, its children and the
    database / broker servers (other people's tests, editors…), as a share of all CPUs."""

    def __init__(self, ours: Callable[[], list[int]]) -> None:
        self._ours = ours

    def _sample(self) -> tuple[float, float, float]:
        busy, total = _cpu_busy()
        ours = set(self._ours()) | {os.getpid()}
        mine = 0.0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                with open(f"/proc/{pid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if pid in ours or comm in ("postgres", "redis-server"):
                mine += _cpu_seconds(pid)
        return busy, total, mine

    @contextlib.contextmanager
    def measure(self, into: dict[str, Any]) -> Iterator[None]:
        b0, t0, m0 = self._sample()
        yield
        b1, t1, m1 = self._sample()
        # Others = all busy time minus ours (approximate: exited processes are not seen).
        into["other_cpu_pct"] = max(0.0, ((b1 - b0) - (m1 - m0)) / max(t1 - t0, 1e-9) * 100)


def machine_info(db_url: str, broker_url: str) -> dict[str, str]:
    cpu_model = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    changed = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "status",
            "--porcelain",
            "--",
            "awooop",  # awooop/web/gunicorn_conf.py included
            "migrations",
            "celeryconfig.py",
            "gunicorn.conf.py",
        ],
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    code = head or "unknown"
    if changed:
        code += f" + uncommitted changes in {len(changed)} files: " + ", ".join(
            line[3:] for line in changed
        )
    with _pg(db_url) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT current_setting('server_version'), current_setting('fsync'),"
            " current_setting('synchronous_commit'), current_setting('shared_buffers')"
        )
        pg_version, fsync, sync_commit, shared_buffers = cur.fetchone()
    redis_version = redis.Redis.from_url(broker_url).info("server").get("redis_version", "?")
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": nproc or str(os.cpu_count()),
        "cpu_model": cpu_model,
        "memory": mem,
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


# --- database helpers ------------------------------------------------------------------------


@contextlib.contextmanager
def _pg(url: str, autocommit: bool = True) -> Iterator[Any]:
    """A fresh connection (its backend exits, flushing its statistics, on close)."""
    conn = psycopg2.connect(
        url.replace("postgresql+psycopg2://", "postgresql://", 1),
        application_name="awooop-bench",
        connect_timeout=5,
    )
    conn.autocommit = autocommit
    try:
        yield conn
    finally:
        conn.close()


def other_clients(url: str, database: str | None = None) -> int:
    """Sessions on ``database`` (default: ``url``'s own) other than this one."""
    with _pg(url) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = coalesce(%s, current_database()) AND pid <> pg_backend_pid()",
            (database,),
        )
        return int(cur.fetchone()[0])


def create_projects(settings: Any, ids: list[str]) -> dict[str, str]:
    """Each project with an API token, its ``api`` channel routed to ``noop-3``."""
    from awooop import cli, db
    from awooop.store import projects

    tokens = {}
    for project_id in ids:
        try:
            tokens[project_id] = cli.create_project(settings, project_id)["api_token"]
        except cli.UsageError as exc:
            raise BenchError(str(exc)) from exc
    engine = db.make_engine(settings.database_url, pool_size=1)
    with engine.begin() as conn:
        for project_id in ids:
            projects.set_routes(conn, project_id, {"api": "noop-3"})
    engine.dispose()
    gc.collect()  # cli.create_project's engines: close their pooled connections now
    return tokens


def delete_projects(url: str, ids: list[str]) -> None:
    with _pg(url, autocommit=False) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            " AND tablename LIKE 'awooop%'"
        )
        tables = {r[0] for r in cur.fetchall()}
        # Children first; awooop_run_event goes with its runs (ON DELETE CASCADE).
        for table in (
            "awooop_channel_event_dedupe",
            "awooop_run_state",
            "awooop_credential",
            "awooop_project",
        ):
            if table in tables:
                cur.execute(f"DELETE FROM {table} WHERE project_id = ANY(%s)", (ids,))
        conn.commit()


# --- (a) admission ---------------------------------------------------------------------------

# The soak after the e2e batch runs at most this long at the measured rate.
SOAK_BUDGET_S = 75.0
# PostgreSQL flushes an idle backend's statistics within PGSTAT_IDLE_INTERVAL (10 s).
STATS_IDLE_FLUSH_S = 11.0
# The e2e phases give up when no run completes for this long.
STALL_S = 20.0

BODY = b'{"summary": "disk almost full on db-1", "source": "bench"}'


def _requests(
    project_id: str, token: str, keys: Iterator[str], limit: int | None = None
) -> load.Requests:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return load.Requests(
        "POST",
        f"/v1/projects/{project_id}/runs",
        headers,
        BODY,
        key_header="Idempotency-Key",
        keys=keys,
        limit=limit,
    )


def _phase(
    label: str, web: Proc, port: int, source: load.Source, conns: int, knobs: Knobs, noise: Noise
) -> dict[str, Any]:
    web.check()
    info: dict[str, Any] = {"label": label, "connections": conns}
    cpu0 = web.cpu_seconds()
    with noise.measure(info):
        result = load.run(
            f"http://127.0.0.1:{port}/",
            source,
            conns,
            duration=knobs.duration,
            warmup=knobs.warmup,
            spread=spread_over(web, port),
        )
    cpu1 = web.cpu_seconds()
    info.update(
        rps=result.rps,
        p50=result.p50,
        p99=result.p99,
        completed=result.completed,
        non_2xx=result.non_2xx,
        errors=result.errors,
        unfinished=result.unfinished,
        statuses=dict(result.statuses),
        issued=result.issued,
        # CPU of the gunicorn processes per request, warm-up included in both terms.
        web_cpu_ms=(cpu1 - cpu0) * 1000 / max(result.issued, 1),
    )
    log(f"{label:<28} {result.summary()}  other CPU {info['other_cpu_pct']:.0f}%")
    info["failures"] = report_failures(label, result)
    if result.completed == 0:
        raise BenchError(f"{label}: no response completed; log {web.log_path}:\n{web.log_tail()}")
    return info


def report_failures(label: str, result: load.LoadResult) -> list[str]:
    """Log a FAIL line for every non-2xx status (and dropped connection) of a phase; the
    lines, prefixed with the phase, for the summary at the end."""
    lines = [f"{label}: {line}" for line in result.failures()]
    for line in lines:
        log(f"FAIL {line}")
    return lines


def all_failures(results: list[dict[str, Any]], e2e: dict[str, Any]) -> list[str]:
    return [line for res in results for line in res.get("failures", [])] + e2e.get("failures", [])


def failed_answers(results: list[dict[str, Any]], e2e: dict[str, Any]) -> int:
    """Non-2xx answers and dropped connections, all phases together."""
    return sum(r["non_2xx"] + r["errors"] for r in results + [e2e] if "non_2xx" in r)


def durability_failures(machine: dict[str, str]) -> list[str]:
    """The targets hold on a durable database (fsync on, synchronous_commit on), as a
    deployment runs it: anything else is a FAIL."""
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


def failure_summary(failures: list[str]) -> list[str]:
    """The summary's verdict on the answers: the target is zero non-2xx."""
    if not failures:
        return ["Answers: every request of every phase was answered 2xx"]
    return ["FAIL: not every request was answered 2xx (the target is none):"] + [
        f"FAIL {line}" for line in failures
    ]


def purge_queue(r: redis.Redis, queue: str) -> int:
    """Delete a kombu Redis queue (and its priority sub-queues); returns messages dropped."""
    names = [queue] + [f"{queue}\x06\x16{p}" for p in range(1, 10)]
    dropped = sum(int(r.llen(n)) for n in names)
    r.delete(*names)
    return dropped


def bench_admission(
    knobs: Knobs,
    logdir: Path,
    projects_: dict[str, str],
    real_id: str,
    base_id: str,
    r: redis.Redis,
    noise: Noise,
    procs: list[Proc],
) -> list[dict[str, Any]]:
    real, real_port = start_web("web-awooop", "awooop.web.app:create_app()", logdir)
    base, base_port = start_web("web-baseline", "bench.baseline_app:create_app()", logdir)
    procs += [real, base]
    try:
        wait_http(real, real_port)
        wait_http(base, base_port)
        results = []
        for conns in knobs.connections:
            # Interleaved, so a burst of outside load hits both sides alike.
            prefix = f"a{conns}-{secrets.token_hex(4)}"
            unique = _phase(
                "AwoooP new events",
                real,
                real_port,
                _requests(real_id, projects_[real_id], load.unique_keys(prefix)),
                conns,
                knobs,
                noise,
            )
            results.append({**unique, "app": "awooop", "kind": "new"})
            baseline = _phase(
                "baseline new events",
                base,
                base_port,
                _requests(
                    base_id,
                    projects_[base_id],
                    load.unique_keys(f"b{conns}-{secrets.token_hex(4)}"),
                ),
                conns,
                knobs,
                noise,
            )
            results.append({**baseline, "app": "baseline", "kind": "new"})
            duplicates = _phase(
                "AwoooP duplicates",
                real,
                real_port,
                _requests(real_id, projects_[real_id], load.replay_keys(prefix, unique["issued"])),
                conns,
                knobs,
                noise,
            )
            results.append({**duplicates, "app": "awooop", "kind": "duplicate"})
    finally:
        for proc in (real, base):
            proc.stop()
            procs.remove(proc)
    dropped = purge_queue(r, "runs") + int(r.llen(RUN_LIST))
    r.delete(RUN_LIST)
    log(f"purged {dropped} queued messages (no worker ran during admission)")
    return results


# --- (b) end to end, (c) memory -------------------------------------------------------------


def bench_raw_celery(
    knobs: Knobs,
    logdir: Path,
    r: redis.Redis,
    procs: list[Proc],
    noise: Noise,
    name: str = "worker-raw-celery",
) -> dict[str, Any]:
    from bench import raw_celery

    n = knobs.raw_tasks
    r.delete(*raw_celery.KEYS)
    purge_queue(r, raw_celery.QUEUE)
    t0 = time.perf_counter()
    with raw_celery.app.producer_or_acquire() as producer:
        for _ in range(n):
            raw_celery.noop.apply_async((n,), queue=raw_celery.QUEUE, producer=producer)
    enqueue_s = time.perf_counter() - t0
    queued = int(r.llen(raw_celery.QUEUE))
    if queued != n:
        raise BenchError(f"raw Celery: {queued} messages in {raw_celery.QUEUE}, expected {n}")
    info: dict[str, Any] = {"tasks": n, "enqueue_per_s": n / enqueue_s}
    worker = start_worker(name, "bench.raw_celery", raw_celery.QUEUE, logdir)
    procs.append(worker)
    started = time.perf_counter()
    deadline = started + max(60.0, n / 100)
    try:
        with noise.measure(info):
            while int(r.get(raw_celery.COUNTER) or 0) < n:
                worker.check()
                if time.perf_counter() > deadline:
                    raise BenchError(
                        f"raw Celery: {int(r.get(raw_celery.COUNTER) or 0)}/{n} "
                        f"tasks after {deadline - started:.0f} s; "
                        f"log {worker.log_path}:\n{worker.log_tail()}"
                    )
                time.sleep(0.02)
        info["wall_s"] = time.perf_counter() - started
        info["worker_cpu_ms"] = worker.cpu_seconds() * 1000 / n
    finally:
        worker.stop()
        procs.remove(worker)
    first, last = float(r.get(raw_celery.FIRST) or 0), float(r.get(raw_celery.LAST) or 0)
    info["seconds"] = last - first
    info["per_s"] = n / (last - first) if last > first else float("nan")
    info["left_in_queue"] = int(r.llen(raw_celery.QUEUE))
    r.delete(*raw_celery.KEYS)
    log(
        f"raw Celery: {n} no-op tasks in {info['seconds']:.2f} s = {info['per_s']:.0f} "
        f"tasks/s (worker start to drained {info['wall_s']:.1f} s)  other CPU "
        f"{info['other_cpu_pct']:.0f}%"
    )
    return info


_PROGRESS = """
SELECT count(*) FILTER (WHERE status = 'COMPLETED'),
       count(*) FILTER (WHERE status IN ('FAILED', 'CANCELLED')),
       count(*)
FROM awooop_run_state WHERE project_id = %s
"""

_SPAN = """
SELECT (SELECT min(e.at) FROM awooop_run_event e JOIN awooop_run_state r USING (run_id)
        WHERE r.project_id = %(p)s AND e.kind = 'lease' AND e.trigger_id LIKE 'claim:%%'),
       (SELECT max(finished_at) FROM awooop_run_state WHERE project_id = %(p)s)
"""


# Raw Celery's two rates further apart than this (% of their mean): the machine's speed changed
# during the end-to-end phase, and the summary says the ratio is uncertain.
RAW_DRIFT_WARN_PCT = 20.0


def bracket_raw(before: dict[str, Any], after: dict[str, Any] | None) -> dict[str, Any]:
    """Raw Celery's figures from before AwoooP's batch, with the run after it: ``after``,
    the mean of the two rates (``bracket_per_s``, what the ratio divides by) and how far apart
    they were (``drift_pct``, of that mean). Without ``after``, ``before`` as it is."""
    if not after:
        return before
    a, b = before.get("per_s", float("nan")), after.get("per_s", float("nan"))
    mean = (a + b) / 2
    return {**before, "after": after, "bracket_per_s": mean, "drift_pct": abs(b - a) / mean * 100}


def drift_note(raw: dict[str, Any]) -> str | None:
    """A line for the summary when raw Celery's two rates are far apart, else None."""
    drift = raw.get("drift_pct")
    # Compared as printed, so a note never says "20 % apart" against a limit of 20 %.
    if drift is None or not round(drift) > RAW_DRIFT_WARN_PCT:
        return None
    return (
        f"note: raw Celery ran at {raw['per_s']:.0f} tasks/s before AwoooP's batch and "
        f"{raw['after']['per_s']:.0f} after it ({drift:.0f} % apart): the machine's speed "
        "changed during the phase, so the end-to-end ratio is uncertain; run the bench again"
    )


def _local_port_owned(pids: list[int], local_port: int, remote_port: int) -> bool:
    """Whether one of ``pids`` holds the client socket 127.0.0.1:local_port -> remote_port."""
    inode = _tcp_inode(local_port, remote_port)
    if inode is None:
        return False
    target = f"socket:[{inode}]"
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        return True
    return False


class SessionWatch(threading.Thread):
    """Notes every session on ``database`` that is not the benchmark's or its children's,
    twice a second, from a connection to ``url`` (another database of the server:
    ``pg_stat_activity`` shows them all) in one transaction that is rolled back."""

    def __init__(self, url: str, database: str, ours: Callable[[], list[int]]) -> None:
        super().__init__(name="bench-session-watch", daemon=True)
        self.url, self.database, self.ours = url, database, ours
        self.foreign: dict[tuple[int, str], str] = {}  # (pid, backend_start) -> app name
        self._mine: set[tuple[int, str]] = set()
        self._halt = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            with _pg(self.url, autocommit=False) as conn, conn.cursor() as cur:
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
                        ours = [os.getpid(), *self.ours()]
                        if client_port and _local_port_owned(ours, client_port, port):
                            self._mine.add(key)
                        else:
                            self.foreign[key] = app or "?"
                conn.rollback()
        except psycopg2.Error as exc:
            self.error = str(exc)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


class Progress:
    """Polls run counts inside ONE transaction (READ COMMITTED: each statement sees the
    latest commits), rolled back at the end, so polling adds no ``xact_commit`` beyond its
    session's start-up transaction (counted by ``tally`` when given)."""

    def __init__(self, url: str, project_id: str, tally: commits.Tally | None = None) -> None:
        self._cm = tally.connect(url) if tally is not None else _pg(url, autocommit=False)
        self.conn = self._cm.__enter__()
        self.project_id = project_id

    def counts(self) -> tuple[int, int, int]:
        with self.conn.cursor() as cur:
            cur.execute(_PROGRESS, (self.project_id,))
            done, failed, total = cur.fetchone()
        return int(done), int(failed), int(total)

    def span(self) -> float:
        with self.conn.cursor() as cur:
            cur.execute(_SPAN, {"p": self.project_id})
            first, last = cur.fetchone()
        return (last - first).total_seconds() if first and last else float("nan")

    def close(self) -> None:
        self.conn.rollback()
        self._cm.__exit__(None, None, None)


def _admit(
    label: str,
    web: Proc,
    port: int,
    project_id: str,
    token: str,
    n: int,
    conns: int,
    timeout: float,
    info: dict[str, Any],
) -> load.LoadResult:
    source = _requests(project_id, token, load.unique_keys(secrets.token_hex(6)), limit=n)
    result = load.run(
        f"http://127.0.0.1:{port}/", source, conns, timeout=timeout, spread=spread_over(web, port)
    )
    log(
        f"{label}: admitted {result.statuses.get(202, 0)}/{n} in {result.seconds:.1f} s "
        f"({result.rps:.0f} req/s, non-2xx {result.non_2xx}, errors {result.errors})"
    )
    info.setdefault("failures", []).extend(report_failures(label, result))
    info["non_2xx"] = info.get("non_2xx", 0) + result.non_2xx
    info["errors"] = info.get("errors", 0) + result.errors
    return result


def _wait_runs(
    progress: Progress,
    worker: Proc,
    web: Proc,
    broker: redis.Redis,
    expected: int,
    timeout: float,
    on_first: Callable[[], None] | None = None,
) -> None:
    """Until ``expected`` runs of the project are COMPLETED; fails early on a stall."""
    deadline = time.monotonic() + timeout
    first_seen = False
    last_done, last_change = -1, time.monotonic()
    while True:
        done, failed, total = progress.counts()
        if not first_seen and done > 0:
            first_seen = True
            if on_first:
                on_first()
        if done + failed >= expected:
            if failed:
                raise BenchError(f"{failed} runs failed; see {worker.log_path}")
            return
        worker.check()
        web.check()
        now = time.monotonic()
        if done != last_done:
            last_done, last_change = done, now
        stalled = now - last_change > STALL_S
        if now > deadline or stalled:
            why = f"no progress for {STALL_S:.0f} s" if stalled else f"after {timeout:.0f} s"
            raise BenchError(
                f"only {done}/{expected} runs COMPLETED ({why}); {total} admitted, "
                f"{broker.llen('runs')} messages queued in 'runs', {broker.hlen('unacked')} "
                "unacked (another consumer of this broker's 'runs' queue, e.g. a `make run` "
                f"worker, takes messages meant for the bench); worker log "
                f"{worker.log_path}:\n{worker.log_tail()}"
            )
        time.sleep(0.1)


def bench_awooop_e2e(
    knobs: Knobs,
    logdir: Path,
    meter: commits.Meter,
    e2e_id: str,
    token: str,
    r: redis.Redis,
    procs: list[Proc],
    noise: Noise,
    raw_again: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``raw_again``: measures raw Celery once more, right after the batch (before the soak),
    while AwoooP's web and worker idle; its figures are returned under ``raw_after``."""
    n, soak = knobs.e2e_runs, knobs.soak_runs
    url = meter.url
    info: dict[str, Any] = {"runs": n, "soak_runs": soak, "database": meter.database}
    purge_queue(r, "runs")
    idle = idle_window(meter)
    info["idle_commits"] = idle.runs
    if idle.runs:
        info.setdefault("target_failures", []).append(
            f"commit counting: a window with nothing running counted {idle.runs} commits "
            f"({idle.total} in all; {idle.background_text()}): something else commits in "
            f"{meter.database}"
        )
    # The window opens before the web starts: whatever its start-up commits is counted.
    before = meter.read()
    info["other_db_clients"] = other_clients(meter.maintenance_url, meter.database)
    web, port = start_web("web-awooop-e2e", "awooop.web.app:create_app()", logdir)
    procs.append(web)
    worker: Proc | None = None
    progress: Progress | None = None
    watch: SessionWatch | None = None
    warm_before: commits.Reading | None = None
    warm_after: commits.Reading | None = None
    try:
        watch = SessionWatch(
            meter.maintenance_url,
            meter.database,
            lambda: [p for proc in procs for p in proc.pids()],
        )
        watch.start()
        wait_http(web, port)
        mem: dict[str, dict[str, float]] = {"web": {"start": web.rss_mib()}, "worker": {}}

        result = _admit("e2e batch", web, port, e2e_id, token, n, 16, max(60.0, n / 50), info)
        info["admit_per_s"] = result.rps
        progress = Progress(url, e2e_id, meter.tally)
        _, _, total = progress.counts()
        if total != n:
            raise BenchError(
                f"e2e batch: {total} runs admitted, expected {n}; "
                f"log {web.log_path}:\n{web.log_tail()}"
            )

        # Like for like with raw Celery, which sends no task events (see the report text).
        worker = start_worker(
            "worker-awooop", "awooop.tasks.app", "runs", logdir, AWOOOP_TASK_EVENTS="0"
        )
        procs.append(worker)
        w = worker
        started = time.perf_counter()
        with noise.measure(info):
            _wait_runs(
                progress,
                w,
                web,
                r,
                n,
                timeout=max(90.0, n / 20),
                on_first=lambda: mem["worker"].__setitem__("start", w.rss_mib()),
            )
        info["wall_s"] = time.perf_counter() - started
        info["worker_cpu_ms"] = worker.cpu_seconds() * 1000 / n
        info["seconds"] = progress.span()
        info["per_s"] = n / info["seconds"]
        log(
            f"AwoooP: {n} noop-3 runs, first claim to last completion {info['seconds']:.2f} s"
            f" = {info['per_s']:.0f} runs/s (worker start to done {info['wall_s']:.1f} s)"
            f"  other CPU {info['other_cpu_pct']:.0f}%"
        )
        mem["web"]["after_e2e"] = web.rss_mib()
        mem["worker"]["after_e2e"] = worker.rss_mib()
        if raw_again is not None:
            info["raw_after"] = raw_again()

        if soak > 0 and info["per_s"] == info["per_s"]:
            # Bounded in time: at most ~SOAK_BUDGET_S of work at the measured rate.
            fits = max(100, int(info["per_s"] * SOAK_BUDGET_S))
            if fits < soak:
                log(
                    f"soak: {soak} runs would take ~{soak / info['per_s']:.0f} s at "
                    f"{info['per_s']:.0f} runs/s; running {fits}"
                )
                soak = info["soak_runs"] = fits
        if soak > 0:
            # Commits per run are counted over the soak, when the web and the worker are warm:
            # their sessions opened and their statements prepared during the batch (set-up,
            # not run work). An idle backend flushes its statistics within PostgreSQL's
            # PGSTAT_IDLE_INTERVAL (10 s), so the window opens once that has passed.
            time.sleep(STATS_IDLE_FLUSH_S)
            warm_before = meter.read()
            t0 = time.perf_counter()
            soak_result = _admit(
                "soak", web, port, e2e_id, token, soak, 8, max(120.0, soak / 50), info
            )
            if soak_result.statuses.get(202, 0) != soak:
                raise BenchError(
                    f"soak: only {soak_result.statuses.get(202, 0)}/{soak} "
                    f"admitted; log {web.log_path}:\n{web.log_tail()}"
                )
            _wait_runs(
                progress,
                worker,
                web,
                r,
                n + soak,
                timeout=max(60.0, 2 * soak / max(info["per_s"], 1.0)),
            )
            info["soak_wall_s"] = time.perf_counter() - t0
            log(f"soak: {soak} more runs admitted and completed in {info['soak_wall_s']:.1f} s")
            # The window closes the same way it opened: processes idle, statistics flushed
            # (their shutdown is not the soak's work).
            time.sleep(STATS_IDLE_FLUSH_S)
            warm_after = meter.read()
            mem["web"]["after_soak"] = web.rss_mib()
            mem["worker"]["after_soak"] = worker.rss_mib()
        info["memory"] = mem
        progress.close()
        progress = None
    finally:
        if watch is not None:  # before our processes go: their sessions must look ours
            watch.stop()
        if progress is not None:
            progress.close()
        # Stopping closes every session, which flushes its statistics before we read them.
        for proc in (worker, web):
            if proc is not None:
                proc.stop()
                procs.remove(proc)
    after = meter.read()
    whole = commits.Count.between(before, after)
    info["commits_whole_window"] = {"total": whole.runs, "runs": n + soak}
    # Over the soak (warm processes) when there was one; else over everything, set-up included.
    counted = soak if warm_after is not None else n + soak
    count = (
        commits.Count.between(warm_before, warm_after)
        if warm_before is not None and warm_after is not None
        else whole
    )
    info["commits_counted_runs"] = counted
    info["commits_sessions"] = count.sessions
    assert watch is not None
    info["commits"] = count.total
    info["commits_runs"] = count.runs
    info["commits_background"] = {
        "liveness": count.liveness,
        "auth_loads": count.auth_loads,
        "harness": count.harness,
    }
    info["background_text"] = count.background_text()
    info["commits_per_run"] = count.per_run(counted)
    info["foreign_sessions"] = sorted(set(watch.foreign.values()))
    info["foreign_session_count"] = len(watch.foreign)
    log(
        f"PostgreSQL commits: {count.runs} for {counted} runs = "
        f"{info['commits_per_run']:.3f} per run ({count.total} in {meter.database}, "
        f"{count.background_text()}; sessions started meanwhile: {count.sessions}); "
        f"over the whole e2e window, processes' start-up included: {whole.runs} for "
        f"{n + soak} runs; other sessions on the database meanwhile: "
        f"{len(watch.foreign)} {info['foreign_sessions'] or ''}"
    )
    if count.runs > TARGETS["commits_per_run"] * counted:
        info.setdefault("target_failures", []).append(
            f"PostgreSQL commits per run {info['commits_per_run']:.3f} > "
            f"{TARGETS['commits_per_run']:.0f}: {count.runs} commits for {counted} runs "
            f"after {count.background_text()}"
        )
    if warm_after is not None and count.sessions:
        info.setdefault("target_failures", []).append(
            f"commit counting: {count.sessions} sessions started while the soak was counted; "
            "their set-up commits are in the figure, which is not exact"
        )
    if watch.error:
        log(f"(session watch failed: {watch.error})")
    return info


def idle_window(meter: commits.Meter, seconds: float = 2.0) -> commits.Count:
    """A window with nothing of the bench running: the subtraction must leave 0."""
    gc.collect()  # engines the setup dropped close their pooled connections now
    scratch.wait_no_sessions(meter.maintenance_url, meter.database)
    before = meter.read()
    time.sleep(seconds)
    idle = commits.Count.between(before, meter.read())
    log(
        f"commit counting, idle window of {seconds:.0f} s: {idle.runs} commits left "
        f"({idle.total} in all; {idle.background_text()})"
    )
    return idle


# --- report ----------------------------------------------------------------------------------


def _find(results: list[dict[str, Any]], app: str, kind: str, conns: int) -> dict[str, Any]:
    for res in results:
        if (res["app"], res["kind"], res["connections"]) == (app, kind, conns):
            return res
    return {}


def _ratio(a: float | None, b: float | None) -> float:
    if not a or not b:
        return float("nan")
    return a / b


def _verdict(value: float, target: float, higher_is_better: bool) -> str:
    if value != value:  # NaN
        return "n/a"
    ok = value >= target if higher_is_better else value <= target
    return "met" if ok else "MISSED"


def ratios(
    results: list[dict[str, Any]], raw: dict[str, Any], e2e: dict[str, Any], conns: tuple[int, ...]
) -> list[tuple[str, float, str, str]]:
    """(what, measured, target text, verdict)."""
    rows = []
    # (label, (app, kind) measured, (app, kind) it is divided by, target) per connection count
    throughput = (
        ("AwoooP new events / baseline", ("awooop", "new"), ("baseline", "new"), "admission_ratio"),
        (
            "AwoooP duplicates / baseline new events",
            ("awooop", "duplicate"),
            ("baseline", "new"),
            "duplicate_vs_baseline",
        ),
        # Beside it, what a duplicate costs against AwoooP's own new event: no target.
        ("AwoooP duplicates / new events", ("awooop", "duplicate"), ("awooop", "new"), None),
    )
    for label, measured, against, target in throughput:
        for c in conns:
            value = _ratio(
                _find(results, *measured, c).get("rps"), _find(results, *against, c).get("rps")
            )
            if target is None:
                rows.append((f"{label}, req/s @{c}", value, "(none)", "-"))
                continue
            t = TARGETS[target]
            rows.append((f"{label}, req/s @{c}", value, f">= {t:.2f}", _verdict(value, t, True)))
    c = max(conns)
    value = _ratio(
        _find(results, "awooop", "new", c).get("p99"),
        _find(results, "baseline", "new", c).get("p99"),
    )
    t = TARGETS["p99_ratio"]
    rows.append(
        (f"p99 AwoooP new events / baseline @{c}", value, f"<= {t:.2f}", _verdict(value, t, False))
    )
    value = _ratio(e2e.get("per_s"), raw.get("bracket_per_s", raw.get("per_s")))
    t = TARGETS["e2e_ratio"]
    rows.append(
        (
            "AwoooP noop-3 runs/s / raw Celery tasks/s",
            value,
            f">= {t:.2f}",
            _verdict(value, t, True),
        )
    )
    value = e2e.get("commits_per_run", float("nan"))
    t = TARGETS["commits_per_run"]
    rows.append(
        (
            "PostgreSQL commits per run (admission included)",
            value,
            f"<= {t:.0f}",
            _verdict(value, t, False),
        )
    )
    value = float(failed_answers(results, e2e))
    rows.append(
        ("non-2xx answers and dropped connections", value, "= 0", _verdict(value, 0, False))
    )
    for side in ("web", "worker"):
        m = e2e.get("memory", {}).get(side, {})
        value = (_ratio(m.get("after_soak"), m.get("after_e2e")) - 1) * 100
        t = TARGETS["memory_growth_pct"]
        rows.append(
            (f"{side} RSS growth over the soak, %", value, f"< {t:.0f}", _verdict(value, t, False))
        )
    return rows


def _fmt(value: Any, digits: int = 0) -> str:
    if isinstance(value, float):
        return "n/a" if value != value else f"{value:,.{digits}f}"
    return str(value)


def _digits(what: str) -> int:
    return 3 if "commits" in what else 1 if "%" in what else 0 if "non-2xx" in what else 2


def render_table(
    results: list[dict[str, Any]],
    raw: dict[str, Any],
    e2e: dict[str, Any],
    rows: list[tuple[str, float, str, str]],
    failed_targets: list[str],
) -> str:
    out = [
        "",
        "Admission, POST /v1/projects/{p}/runs (API channel)",
        f"  {'':<22}{'conns':>6}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'non-2xx':>9}"
        f"{'web CPU ms/req':>16}{'other CPU':>11}",
    ]
    for res in results:
        name = f"{'AwoooP' if res['app'] == 'awooop' else 'baseline'} " + (
            "new events" if res["kind"] == "new" else "duplicates"
        )
        out.append(
            f"  {name:<22}{res['connections']:>6}{res['rps']:>9.0f}{res['p50']:>9.1f}"
            f"{res['p99']:>9.1f}{res['non_2xx']:>9}{res['web_cpu_ms']:>16.2f}"
            f"{res['other_cpu_pct']:>10.0f}%"
        )
    out += [
        "",
        "End to end (one prefork worker process, queue filled first)",
        f"  raw Celery no-op        {raw.get('per_s', float('nan')):>8.0f} tasks/s"
        f"  ({raw.get('tasks')} tasks, worker CPU {raw.get('worker_cpu_ms', 0):.2f} ms/task)",
    ]
    after = raw.get("after")
    if after:
        out += [
            f"  raw Celery, after       {after.get('per_s', float('nan')):>8.0f} tasks/s"
            f"  (after AwoooP's batch; worker CPU {after.get('worker_cpu_ms', 0):.2f} ms/task)",
            f"  raw Celery, mean        {raw['bracket_per_s']:>8.0f} tasks/s"
            f"  (what the ratio divides by; the two {raw['drift_pct']:.0f} % apart)",
        ]
    out += [
        f"  AwoooP noop-3           {e2e.get('per_s', float('nan')):>8.0f} runs/s "
        f"  ({e2e.get('runs')} runs, worker CPU {e2e.get('worker_cpu_ms', 0):.2f} ms/run)",
        f"  commits                 {e2e.get('commits_runs', 'n/a'):>8} "
        f"  for {e2e.get('commits_counted_runs', 'n/a')} runs"
        f" = {_fmt(e2e.get('commits_per_run', float('nan')), 3)} per run",
        f"  background, subtracted  {e2e.get('background_text', 'n/a')}"
        f" (of {e2e.get('commits', 'n/a')} in the scratch database)",
    ]
    mem = e2e.get("memory", {})
    out += ["", "Memory, RSS MiB (start / after e2e batch / after soak)"]
    for side in ("web", "worker"):
        m = mem.get(side, {})
        out.append(
            f"  {side:<8}"
            + " / ".join(
                _fmt(m.get(k, float("nan")), 1) for k in ("start", "after_e2e", "after_soak")
            )
        )
    out += ["", f"  {'ratio':<52}{'measured':>10}  {'target':<9}verdict"]
    for what, value, target, verdict in rows:
        out.append(f"  {what:<52}{_fmt(value, _digits(what)):>10}  {target:<9}{verdict}")
    out += [""] + [f"  {line}" for line in failure_summary(all_failures(results, e2e))]
    note = drift_note(raw)
    if note:
        out.append(f"  {note}")
    out += [f"  FAIL {line}" for line in failed_targets]
    return "\n".join(out)


def _raw_rows(raw: dict[str, Any]) -> list[str]:
    """The raw Celery rows of the end-to-end table: before, after and their mean."""

    def row(label: str, r: dict[str, Any]) -> str:
        return (
            f"| {label} | {r.get('tasks')} | {_fmt(r.get('per_s'), 0)} | "
            f"{_fmt(r.get('seconds'), 2)} | {_fmt(r.get('worker_cpu_ms'), 2)} | "
            f"{_fmt(r.get('other_cpu_pct'), 0)}% |"
        )

    after = raw.get("after")
    if not after:
        return [row("raw Celery no-op task", raw)]
    return [
        row("raw Celery no-op task, before AwoooP's batch", raw),
        row("raw Celery no-op task, after it", after),
        f"| raw Celery, mean of the two (the ratio's divisor) | | "
        f"{_fmt(raw.get('bracket_per_s'), 0)} | | | |",
    ]


def render_markdown(
    machine: dict[str, str],
    knobs: Knobs,
    results: list[dict[str, Any]],
    raw: dict[str, Any],
    e2e: dict[str, Any],
    rows: list[tuple[str, float, str, str]],
    kept: str,
) -> str:
    m = machine
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
        "| | |",
        "|---|---|",
        f"| date | {m['date']} |",
        f"| CPUs (`nproc`) | {m['cpus']} × {m['cpu_model']} |",
        f"| memory | {m['memory']} |",
        f"| kernel | {m['kernel']} |",
        f"| Python | {m['python']} |",
        f"| PostgreSQL | {m['postgresql']} |",
        f"| Redis | {m['redis']} |",
        f"| load average at start | {m['load_before']} |",
        f"| code measured | {m['code']} |",
        "",
        "Everything — load generator, gunicorn, Celery, PostgreSQL, Redis — shares these CPUs. "
        '"other CPU" is the share of all CPUs that processes outside the benchmark (and '
        "outside PostgreSQL/Redis) used during a phase; above a few percent the figures are "
        "noisy.",
        "",
        "## Targets",
        "",
        "| measure | measured | target | |",
        "|---|---:|---|---|",
    ]
    for what, value, target, verdict in rows:
        shown = target.replace(">=", "≥").replace("<=", "≤")
        lines.append(f"| {what} | {_fmt(value, _digits(what))} | {shown} | {verdict} |")
    failures = all_failures(results, e2e) + target_failures(machine, e2e)
    if failures:
        lines += [""] + [f"- **FAIL** {line}" for line in failures]
    note = drift_note(raw)
    if note:
        lines += ["", f"- {note[0].upper()}{note[1:]}."]
    lines += [
        "",
        "## (a) Admission over HTTP",
        "",
        "| app | events | conns | req/s | p50 ms | p99 ms | non-2xx | web CPU ms/req | other CPU |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        lines.append(
            f"| {'AwoooP' if res['app'] == 'awooop' else 'baseline'} | "
            f"{'new' if res['kind'] == 'new' else 'duplicate'} | {res['connections']} | "
            f"{res['rps']:,.0f} | {res['p50']:.1f} | {res['p99']:.1f} | {res['non_2xx']} | "
            f"{res['web_cpu_ms']:.2f} | {res['other_cpu_pct']:.0f}% |"
        )
    mem = e2e.get("memory", {})
    whole = e2e.get("commits_whole_window") or {}
    lines += [
        "",
        "`POST /v1/projects/{p}/runs` (the API channel) with a Bearer token, a JSON body and "
        "an `Idempotency-Key`: new keys (answered 202), or the new-event row's keys sent again "
        "(duplicates, answered 200 `E-IDEMPOTENT-001`). N keep-alive connections, one request "
        "in flight each, spread evenly over the 4 gunicorn workers; "
        f"{knobs.warmup:g} s warm-up, then {knobs.duration:g} s measured per row, the rows "
        "interleaved. AwoooP (`gunicorn.conf.py`, access log off) does its whole admission: "
        "token check, validation, routing, the dedupe + run + history statement, the run's "
        "message to Redis. The baseline (`bench/baseline_app.py`, the same gunicorn settings) "
        "does one transaction inserting a dedupe row and a run row, and one Redis `LPUSH`: no "
        "authentication, no validation, no ORM. req/s: responses completed in the window; "
        "p50/p99: latency seen by the client; web CPU: the gunicorn tree's, per request. No "
        "worker runs.",
        "",
        "## (b) End to end",
        "",
        "| | count | per second | seconds | worker CPU ms/item | other CPU |",
        "|---|---:|---:|---:|---:|---:|",
        *_raw_rows(raw),
        f"| AwoooP `noop-3` run (3 steps) | {e2e.get('runs')} | {_fmt(e2e.get('per_s'), 0)} "
        f"| {_fmt(e2e.get('seconds'), 2)} | {_fmt(e2e.get('worker_cpu_ms'), 2)} | "
        f"{_fmt(e2e.get('other_cpu_pct'), 0)}% |",
        "",
        "| PostgreSQL commits, counted over the soak | |",
        "|---|---|",
        f"| committed in the bench's database | {e2e.get('commits', 'n/a')} |",
        f"| not run work, subtracted | {e2e.get('background_text', 'n/a')} |",
        f"| left, for the {e2e.get('commits_counted_runs', 'n/a')} runs of the soak "
        f"(admission included) | {e2e.get('commits_runs', 'n/a')} |",
        f"| over the whole phase, the processes' start-up included | "
        f"{whole.get('total', 'n/a')} for {whole.get('runs', 'n/a')} runs |",
        f"| an idle window of 2 s before it (must be 0) | {e2e.get('idle_commits', 'n/a')} |",
        f"| sessions started in the counted window (must be 0) | "
        f"{e2e.get('commits_sessions', 'n/a')} |",
        f"| sessions not of the benchmark seen on its database | "
        f"{e2e.get('foreign_session_count', 'n/a')}"
        + (f": {', '.join(e2e['foreign_sessions'])}" if e2e.get("foreign_sessions") else "")
        + " |",
        "",
        f"Raw Celery (`bench/raw_celery.py`): {raw.get('tasks')} no-op tasks queued on the "
        "same broker (JSON, acks late, prefetch 1, results ignored), then ONE prefork worker "
        "process drains them; tasks / (last − first). It runs just before AwoooP's batch and "
        "again just after it, and the ratio divides by the mean of the two, so a drift of the "
        f"machine's speed across the phase cancels (more than {RAW_DRIFT_WARN_PCT:.0f} % apart: "
        "the ratio is called uncertain"
        + (f"; here {raw['drift_pct']:.0f} %" if "drift_pct" in raw else "")
        + f"). AwoooP: {e2e.get('runs')} `noop-3` runs admitted over HTTP "
        f"({_fmt(e2e.get('admit_per_s'), 0)} req/s, 16 connections) with no worker running, "
        "then ONE worker process (`-Q runs`, the same flags) drains them; runs / (first "
        "claim → last `finished_at`), on the database's clock. Both run without task events "
        "(production keeps them on for Flower, at about 0.8 ms of worker CPU per run). Worker "
        f"start to all COMPLETED: {_fmt(e2e.get('wall_s'), 1)} s (raw Celery "
        f"{_fmt(raw.get('wall_s'), 1)} s), start-up included. Commits: `xact_commit` of the "
        f"bench's own database (`{e2e.get('database', 'awooop_bench_…')}`, migrated, "
        "autovacuum off on its tables, vacuumed between phases, dropped at the end) over the "
        "soak's runs on warm processes, read once they have been idle for 11 s; what is not "
        "run work is counted where it happens and subtracted (`bench/commits.py`). More than 5 "
        "per run left fails the target.",
        "",
        "## (c) Memory",
        "",
        "| process | RSS at start MiB | after e2e batch | after soak | growth over e2e batch "
        "| growth over soak |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for side, what in (
        ("web", "web (gunicorn master + workers)"),
        ("worker", "worker (celery parent + child)"),
    ):
        mm = mem.get(side, {})
        growth = (_ratio(mm.get("after_soak"), mm.get("after_e2e")) - 1) * 100
        warmup = (_ratio(mm.get("after_e2e"), mm.get("start")) - 1) * 100
        lines.append(
            f"| {what} | {_fmt(mm.get('start', float('nan')), 1)} | "
            f"{_fmt(mm.get('after_e2e', float('nan')), 1)} | "
            f"{_fmt(mm.get('after_soak', float('nan')), 1)} | {_fmt(warmup, 1)} % | "
            f"{_fmt(growth, 1)} % |"
        )
    lines += [
        "",
        "VmRSS from `/proc/<pid>/status`, summed over each process tree: the web just after "
        "its first answer, the worker at its first completed run, both after the end-to-end "
        f"batch, and after a soak of {e2e.get('soak_runs')} more runs admitted (8 connections) "
        "while the worker runs them (cut to what fits in about 75 s). The target (flat: < 10 % "
        "over 10,000 runs) is judged over the soak, on warm processes; the growth over the "
        "batch is mostly warm-up (imports on first use, pooled connections, statement caches).",
        "",
        "## Running it",
        "",
        "`make bench` (migrations first, then `python -m bench.run`), about three minutes, on "
        "the configured PostgreSQL and Redis; run it with nothing else using that broker "
        "database, since a worker there would take the bench's messages. Knobs: "
        "`BENCH_DURATION`, `BENCH_WARMUP`, `BENCH_CONNECTIONS`, `BENCH_RAW_TASKS`, "
        "`BENCH_E2E_RUNS`, `BENCH_SOAK_RUNS`, `BENCH_TIMEOUT`, `BENCH_PHASES` (`admission`, "
        "`e2e`; a partial run leaves this file alone unless `BENCH_OUTPUT` is set), "
        "`BENCH_SPREAD=0` (connections where gunicorn puts them), `BENCH_KEEP=1` (keep the "
        "scratch database). `make bench` rewrites this file down to here and keeps the other "
        "benches' sections below.",
        "",
        MARKER,
    ]
    return "\n".join(lines) + "\n" + kept


def _kept_notes(path: Path) -> str:
    try:
        text = path.read_text()
    except OSError:
        return ""
    _, found, rest = text.partition(MARKER)
    return rest.lstrip("\n") if found else ""


def use_scratch_database(
    settings: Any, admin: Engine, database: str, logdir: Path
) -> tuple[Any, commits.Meter]:
    """Create ``database`` (migrated, autovacuum off on its tables) for every process the bench
    starts, and a fresh metrics directory for them; the settings pointing at it, and the meter
    of its commits."""
    from awooop.config import Settings

    try:
        url = scratch.create_database(admin, settings.database_url, database)
    except SQLAlchemyError as exc:
        raise BenchError(f"could not create the scratch database {database}: {exc}") from exc
    tables = scratch.autovacuum_off(url)
    metrics_dir = logdir / "metrics"
    metrics_dir.mkdir()
    # Every child process inherits these (child_env copies os.environ).
    os.environ["AWOOOP_DATABASE_URL"] = url
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    log(
        f"scratch database {database} created and migrated, autovacuum off on its "
        f"{len(tables)} tables; metrics of the bench's processes in {metrics_dir}"
    )
    meter = commits.Meter(settings.database_url, url, database, metrics_dir)
    return Settings(**{**settings.__dict__, "database_url": url}), meter


# --- main ------------------------------------------------------------------------------------


def main() -> int:
    from awooop.config import ConfigError, Settings

    try:
        knobs = Knobs()
        unknown = set(knobs.phases) - set(PHASES)
        if unknown:
            raise BenchError(
                f"BENCH_PHASES: unknown {', '.join(sorted(unknown))}; known: {', '.join(PHASES)}"
            )
    except (BenchError, ValueError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2

    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    logdir = Path(tempfile.mkdtemp(prefix="awooop-bench-"))
    log(f"process logs in {logdir}")
    procs: list[Proc] = []

    def on_timeout(*_: object) -> None:
        raise Timeout()

    def on_term(*_: object) -> None:
        raise KeyboardInterrupt()

    signal.signal(signal.SIGALRM, on_timeout)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(int(knobs.timeout))

    tag = f"bench-{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(2)}"
    real_id, base_id, e2e_id = tag, f"{tag}-base", f"{tag}-e2e"
    ids = [real_id, base_id, e2e_id]
    created = False
    admin = create_engine(scratch.server_url(settings.database_url), isolation_level="AUTOCOMMIT")
    database: str | None = None
    try:
        try:
            r = redis.Redis.from_url(settings.broker_url, socket_timeout=10)
            r.ping()
        except redis.RedisError as exc:
            raise BenchError(f"no Redis at AWOOOP_BROKER_URL: {exc}") from exc
        try:
            machine = machine_info(settings.database_url, settings.broker_url)
        except psycopg2.Error as exc:
            raise BenchError(f"no PostgreSQL at AWOOOP_DATABASE_URL: {exc}") from exc
        database = scratch.new_name("awooop_bench")
        settings, meter = use_scratch_database(settings, admin, database, logdir)
        log(
            f"{machine['cpus']} CPUs ({machine['cpu_model']}), PostgreSQL "
            f"{machine['postgresql']}, Redis {machine['redis']}, load {machine['load_before']}"
        )

        def ours() -> list[int]:
            return [p for proc in procs for p in proc.pids()]

        noise = Noise(ours)
        consumers = [
            c
            for c in r.client_list()
            if c.get("cmd") in ("brpop", "blpop", "bzpopmin")
            and c.get("db") == str(r.connection_pool.connection_kwargs.get("db", 0))
        ]
        if consumers:
            log(
                f"warning: {len(consumers)} other client(s) are blocked reading lists on this "
                "broker database (Celery workers?); they may take the bench's run messages"
            )
        tokens = create_projects(settings, ids)
        created = True
        log(f"projects {', '.join(ids)} created, api -> noop-3")
        scratch.vacuum_analyze(meter.url, meter.maintenance_url)  # out of every window

        results: list[dict[str, Any]] = []
        raw: dict[str, Any] = {}
        e2e: dict[str, Any] = {}
        if "admission" in knobs.phases:
            results = bench_admission(knobs, logdir, tokens, real_id, base_id, r, noise, procs)
        if "e2e" in knobs.phases:
            raw = bench_raw_celery(knobs, logdir, r, procs, noise)
            scratch.vacuum_analyze(meter.url, meter.maintenance_url)  # admission dead rows
            e2e = bench_awooop_e2e(
                knobs,
                logdir,
                meter,
                e2e_id,
                tokens[e2e_id],
                r,
                procs,
                noise,
                raw_again=lambda: bench_raw_celery(
                    knobs, logdir, r, procs, noise, name="worker-raw-celery-after"
                ),
            )
            raw = bracket_raw(raw, e2e.pop("raw_after", None))

        rows = ratios(results, raw, e2e, knobs.connections)
        print(render_table(results, raw, e2e, rows, target_failures(machine, e2e)), flush=True)
        if set(knobs.phases) != set(PHASES) and "BENCH_OUTPUT" not in os.environ:
            log(f"only {','.join(knobs.phases)} ran: {knobs.output} left as it was")
            return 0
        knobs.output.parent.mkdir(parents=True, exist_ok=True)
        knobs.output.write_text(
            render_markdown(machine, knobs, results, raw, e2e, rows, _kept_notes(knobs.output))
        )
        (logdir / "results.json").write_text(
            json.dumps(
                {"machine": machine, "admission": results, "raw_celery": raw, "awooop_e2e": e2e},
                indent=2,
                default=str,
            )
        )
        log(f"wrote {knobs.output} (raw figures: {logdir}/results.json)")
        return 0
    except (BenchError, Timeout, KeyboardInterrupt) as exc:
        return failed("bench", exc, "BENCH_TIMEOUT", knobs.timeout, logdir)
    finally:
        signal.alarm(0)
        for proc in reversed(procs):
            proc.stop()
        stop_all()
        if created:
            # Interrupted runs leave messages behind; they nudge runs that are about to go.
            with contextlib.suppress(redis.RedisError):
                from bench import raw_celery

                broker = redis.Redis.from_url(settings.broker_url, socket_timeout=10)
                purge_queue(broker, "runs")
                purge_queue(broker, raw_celery.QUEUE)
                broker.delete(RUN_LIST, *raw_celery.KEYS)
        if database is not None:
            if knobs.keep:
                log(f"kept the scratch database {database} (BENCH_KEEP=1)")
            else:
                try:
                    scratch.drop_database(admin, database)
                    log(f"dropped the scratch database {database}")
                except SQLAlchemyError as exc:
                    log(f"could not drop the scratch database {database}: {exc}")
        admin.dispose()


if __name__ == "__main__":
    sys.exit(main())
