"""``make bench``: AwoooP against its baselines; prints a table, writes ``docs/benchmarks.md``
(down to :data:`MARKER`; the other benches' sections below it are kept).

Every ratio is the median of three interleaved pairs; a noisy pair is measured again
(``bench.verdicts``).

(a) Admission over real HTTP: the real app and ``bench.baseline_app`` under the same
    ``gunicorn.conf.py``; new events (unique ``Idempotency-Key``) and duplicates (the same keys
    again) at 16 and 64 keep-alive connections, a pair being AwoooP's new events, the
    baseline's, then AwoooP's duplicates. No worker runs; the queued messages are purged.
(b) End to end: raw Celery no-op tasks/s (``bench.raw_celery``) vs AwoooP ``noop-3`` runs/s,
    one prefork worker process each at the same concurrency, the queue filled first; raw
    Celery, AwoooP, raw Celery, AwoooP, …, each AwoooP batch over the mean of the raw rates
    either side of it; PostgreSQL commits per run over
    the whole lifecycle (admission included), counted exactly (``bench.commits``): the
    delta of the scratch database's ``xact_commit`` less the worker's liveness upserts, the
    web's project-auth loads and the harness's own transactions, each counted where it
    happens; a window with nothing running must count 0 (checked before the e2e phase).
(c) Memory: resident size of the web (gunicorn master + workers) and worker (celery parent +
    child) processes over the last end-to-end batch and over a further soak of runs.

Everything runs in a scratch database of its own on the server of ``AWOOOP_DATABASE_URL``
(``awooop_bench_<yyyymmddhhmmss>_<hex>``, migrated to head, autovacuum off on its tables,
``VACUUM (ANALYZE)`` between phases; dropped at the end), and the processes it starts write
their metrics to a fresh ``PROMETHEUS_MULTIPROC_DIR`` under the logs folder. The summary
says FAIL when PostgreSQL is not durable (``fsync`` or ``synchronous_commit`` off) and when
more than 5 commits per run are left. Everything this starts runs in its own process group
and is stopped (SIGTERM, then SIGKILL) on the way out; only loopback traffic. Knobs
(environment): BENCH_DURATION (s, per measured phase, default 3), BENCH_WARMUP (1),
BENCH_CONNECTIONS ("16,64"), BENCH_RAW_TASKS (2000 per raw batch), BENCH_E2E_RUNS (1000 per
AwoooP batch), BENCH_E2E_CONCURRENCY ("2,1"), BENCH_SOAK_RUNS (10000), BENCH_TIMEOUT (whole
run, s, 720), BENCH_KEEP=1 keeps the scratch database (its
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
import statistics
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

from bench import commits, load, scratch, verdicts
from bench.baseline_app import RUN_LIST

ROOT = Path(__file__).resolve().parent.parent
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
BIN = Path(sys.executable).parent
MARKER = "<!-- Everything below this line is kept when `make bench` rewrites this file. -->"

TARGETS = {
    "admission_ratio": 0.80,  # AwoooP new events / baseline, req/s
    # A redelivery storm costs no more than new work: duplicates answered at least at the
    # baseline's rate of new events
    "duplicate_vs_baseline": 1.00,  # AwoooP duplicates / baseline new events, req/s
    "p99_ratio": 1.20,  # AwoooP p99 / baseline p99 at 64 connections
    # AwoooP noop-3 runs/s / raw Celery no-op tasks/s, one worker process each
    "e2e_ratio": 0.40,  # at the Procfile's concurrency (-c 2)
    "e2e_ratio_c1": 0.33,  # at -c 1, where Celery's hand-over is serial with every run
    "e2e_stretch_c1": 0.40,
    # web + worker + PostgreSQL + Redis CPU per run / the producer + worker + Redis per task
    "cpu_ratio": 4.0,
    "commits_per_run": 5.0,
    "wal_flushes_per_run": 3.0,
    "memory_growth_pct": 10.0,
}


# The end-to-end rows per worker concurrency: (target, suffix of the row's label).
E2E_TARGETS: dict[int, tuple[tuple[str, str], ...]] = {
    1: (("e2e_ratio_c1", ""), ("e2e_stretch_c1", " (stretch)")),
    2: (("e2e_ratio", ""),),
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
    duration: float = field(default_factory=lambda: _env_float("BENCH_DURATION", 3.0))
    warmup: float = field(default_factory=lambda: _env_float("BENCH_WARMUP", 1.0))
    connections: tuple[int, ...] = field(
        default_factory=lambda: tuple(
            int(c) for c in os.environ.get("BENCH_CONNECTIONS", "16,64").split(",") if c.strip()
        )
    )
    raw_tasks: int = field(default_factory=lambda: _env_int("BENCH_RAW_TASKS", 2000))
    e2e_runs: int = field(default_factory=lambda: _env_int("BENCH_E2E_RUNS", 1000))
    soak_runs: int = field(default_factory=lambda: _env_int("BENCH_SOAK_RUNS", 10000))
    # One end-to-end series per worker concurrency, in this order; the last one's worker
    # runs the soak.
    e2e_concurrency: tuple[int, ...] = field(
        default_factory=lambda: tuple(
            int(c) for c in os.environ.get("BENCH_E2E_CONCURRENCY", "2,1").split(",") if c.strip()
        )
    )
    timeout: float = field(default_factory=lambda: _env_float("BENCH_TIMEOUT", 720))
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


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def postgres_pids(url: str, database: str) -> list[int]:
    """The server's processes that work for ``database``: its client backends (less this
    harness's own sessions), the postmaster and the server's background processes (WAL
    writer, checkpointer…, shared with the server's other databases). Empty when the server
    is not on this machine."""
    with _pg(url) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT pid, datname, backend_type, client_port FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid()"
        )
        rows = cur.fetchall()
        cur.execute("SELECT pg_backend_pid()")
        me = int(cur.fetchone()[0])
        port = conn.info.port
    try:
        with open(f"/proc/{me}/stat") as f:
            postmaster = int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return []
    pids = [postmaster]
    for pid, datname, backend_type, client_port in rows:
        if backend_type != "client backend":
            if backend_type != "autovacuum worker" or datname == database:
                pids.append(pid)
        elif datname == database and not (
            client_port and _local_port_owned([os.getpid()], client_port, port)
        ):
            pids.append(pid)
    return [p for p in pids if _comm(p) == "postgres"]


def redis_pids(r: redis.Redis) -> list[int]:
    """The broker's process when it runs on this machine (it serves every database of it)."""
    with contextlib.suppress(redis.RedisError, KeyError, ValueError):
        pid = int(r.info("server")["process_id"])
        if _comm(pid).startswith("redis"):
            return [pid]
    return []


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    return {p: _cpu_seconds(p) for p in pids}


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two samples by the processes alive at the second."""
    return sum(max(0.0, cpu - before.get(p, 0.0)) for p, cpu in after.items())


def wal_syncs(url: str) -> int:
    """``pg_stat_wal.wal_sync``: WAL flushes to disk so far, server-wide."""
    with _pg(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT wal_sync FROM pg_stat_wal")
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
) -> tuple[list[dict[str, Any]], dict[int, list[verdicts.Pair]]]:
    """Admission at each connection count, in interleaved pairs (``bench.verdicts``)."""
    real, real_port = start_web("web-awooop", "awooop.web.app:create_app()", logdir)
    base, base_port = start_web("web-baseline", "bench.baseline_app:create_app()", logdir)
    procs += [real, base]
    try:
        wait_http(real, real_port)
        wait_http(base, base_port)
        results: list[dict[str, Any]] = []
        pairs: dict[int, list[verdicts.Pair]] = {}
        for conns in knobs.connections:
            series = pairs[conns] = []
            while verdicts.need_more(series):
                # A pair: AwoooP, the baseline, AwoooP's duplicates, one right after the other,
                # so a burst of outside load hits both sides alike.
                k = len(series) + 1
                prefix = f"a{conns}-{secrets.token_hex(4)}"
                unique = _phase(
                    f"AwoooP new events #{k}",
                    real,
                    real_port,
                    _requests(real_id, projects_[real_id], load.unique_keys(prefix)),
                    conns,
                    knobs,
                    noise,
                )
                baseline = _phase(
                    f"baseline new events #{k}",
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
                duplicates = _phase(
                    f"AwoooP duplicates #{k}",
                    real,
                    real_port,
                    _requests(
                        real_id, projects_[real_id], load.replay_keys(prefix, unique["issued"])
                    ),
                    conns,
                    knobs,
                    noise,
                )
                results += [
                    {**unique, "app": "awooop", "kind": "new", "pair": k},
                    {**baseline, "app": "baseline", "kind": "new", "pair": k},
                    {**duplicates, "app": "awooop", "kind": "duplicate", "pair": k},
                ]
                pair = verdicts.Pair(
                    {
                        "new": _ratio(unique["rps"], baseline["rps"]),
                        "duplicate": _ratio(duplicates["rps"], baseline["rps"]),
                        "duplicate_own": _ratio(duplicates["rps"], unique["rps"]),
                        "p99": _ratio(unique["p99"], baseline["p99"]),
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
    finally:
        for proc in (real, base):
            proc.stop()
            procs.remove(proc)
    dropped = purge_queue(r, "runs") + int(r.llen(RUN_LIST))
    r.delete(RUN_LIST)
    log(f"purged {dropped} queued messages (no worker ran during admission)")
    return results, pairs


# --- (b) end to end, (c) memory -------------------------------------------------------------


def bench_raw_celery(
    knobs: Knobs,
    logdir: Path,
    r: redis.Redis,
    procs: list[Proc],
    noise: Noise,
    name: str = "worker-raw-celery",
    concurrency: int = 1,
) -> dict[str, Any]:
    from bench import raw_celery

    n = knobs.raw_tasks
    r.delete(*raw_celery.KEYS)
    purge_queue(r, raw_celery.QUEUE)
    t0, c0 = time.perf_counter(), time.process_time()
    with raw_celery.app.producer_or_acquire() as producer:
        for _ in range(n):
            raw_celery.noop.apply_async((n,), queue=raw_celery.QUEUE, producer=producer)
    enqueue_s = time.perf_counter() - t0
    enqueue_cpu = time.process_time() - c0
    queued = int(r.llen(raw_celery.QUEUE))
    if queued != n:
        raise BenchError(f"raw Celery: {queued} messages in {raw_celery.QUEUE}, expected {n}")
    info: dict[str, Any] = {"tasks": n, "enqueue_per_s": n / enqueue_s}
    worker = start_worker(name, "bench.raw_celery", raw_celery.QUEUE, logdir, concurrency)
    procs.append(worker)
    started = time.perf_counter()
    deadline = started + max(60.0, n / 100)
    broker = redis_pids(r)
    first: tuple[int, dict[int, float]] | None = None  # tasks done, CPU, once the first is
    try:
        with noise.measure(info):
            while (done := int(r.get(raw_celery.COUNTER) or 0)) < n:
                if first is None and done:
                    first = (done, cpu_by_pid(worker.pids() + broker))
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
        if first is not None and first[0] < n:
            # The producer's (this process) + the worker's + Redis's, per task; the worker's
            # start-up before its first task left out.
            warm = cpu_delta(first[1], cpu_by_pid(worker.pids() + broker))
            info["cpu_ms"] = (enqueue_cpu / n + warm / (n - first[0])) * 1000
    finally:
        worker.stop()
        procs.remove(worker)
    t_first, last = float(r.get(raw_celery.FIRST) or 0), float(r.get(raw_celery.LAST) or 0)
    info["seconds"] = last - t_first
    info["per_s"] = n / (last - t_first) if last > t_first else float("nan")
    info["left_in_queue"] = int(r.llen(raw_celery.QUEUE))
    r.delete(*raw_celery.KEYS)
    log(
        f"raw Celery -c {concurrency}: {n} no-op tasks in {info['seconds']:.2f} s = "
        f"{info['per_s']:.0f} "
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
        WHERE r.project_id = %(p)s AND e.kind = 'lease' AND e.trigger_id LIKE 'claim:%%'
          AND e.at >= %(since)s),
       (SELECT max(finished_at) FROM awooop_run_state
        WHERE project_id = %(p)s AND finished_at >= %(since)s)
"""


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

    def clock(self) -> dt.datetime:
        """The database's clock now (not the transaction's start)."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT clock_timestamp()")
            return cur.fetchone()[0]

    def span(self) -> float:
        """First claim to last completion of the project's runs."""
        return self.span_since(EPOCH)

    def span_since(self, since: dt.datetime) -> float:
        """First claim to last completion of the runs claimed since ``since``."""
        with self.conn.cursor() as cur:
            cur.execute(_SPAN, {"p": self.project_id, "since": since})
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
    done_before: int = 0,
) -> None:
    """Until ``expected`` runs of the project are COMPLETED; fails early on a stall.
    ``on_first`` is called once more than ``done_before`` are."""
    deadline = time.monotonic() + timeout
    first_seen = False
    last_done, last_change = -1, time.monotonic()
    while True:
        done, failed, total = progress.counts()
        if not first_seen and done > done_before:
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


def awooop_batch(
    knobs: Knobs,
    logdir: Path,
    web: Proc,
    port: int,
    progress: Progress,
    token: str,
    r: redis.Redis,
    procs: list[Proc],
    noise: Noise,
    concurrency: int,
    label: str,
    into: dict[str, Any],
    on_first: Callable[[Proc], None] | None = None,
) -> tuple[dict[str, Any], Proc]:
    """``knobs.e2e_runs`` runs admitted over HTTP with no worker running, then one worker
    process (``-c concurrency``) drains them; its figures, and the worker (still running)."""
    n = knobs.e2e_runs
    info: dict[str, Any] = {"runs": n, "concurrency": concurrency}
    done0, _, total0 = progress.counts()
    result = _admit(label, web, port, progress.project_id, token, n, 16, max(60.0, n / 50), into)
    info["admit_per_s"] = result.rps
    _, _, total = progress.counts()
    if total != total0 + n:
        raise BenchError(
            f"{label}: {total - total0} runs admitted, expected {n}; "
            f"log {web.log_path}:\n{web.log_tail()}"
        )
    since = progress.clock()
    # Like for like with raw Celery, which sends no task events (see the report text).
    worker = start_worker(
        f"worker-{label.replace(' ', '-').replace('#', '')}",
        "awooop.tasks.app",
        "runs",
        logdir,
        concurrency,
        AWOOOP_TASK_EVENTS="0",
    )
    procs.append(worker)
    started = time.perf_counter()
    with noise.measure(info):
        _wait_runs(
            progress,
            worker,
            web,
            r,
            total,
            timeout=max(90.0, n / 20),
            on_first=(lambda: on_first(worker)) if on_first else None,
            done_before=done0,
        )
    info["wall_s"] = time.perf_counter() - started
    info["worker_cpu_ms"] = worker.cpu_seconds() * 1000 / n
    info["seconds"] = progress.span_since(since)
    info["per_s"] = n / info["seconds"]
    log(
        f"{label}: {n} noop-3 runs, first claim to last completion {info['seconds']:.2f} s"
        f" = {info['per_s']:.0f} runs/s (worker start to done {info['wall_s']:.1f} s)"
        f"  other CPU {info['other_cpu_pct']:.0f}%"
    )
    return info, worker


def e2e_series(
    knobs: Knobs,
    logdir: Path,
    web: Proc,
    port: int,
    progress: Progress,
    token: str,
    r: redis.Redis,
    procs: list[Proc],
    noise: Noise,
    concurrency: int,
    into: dict[str, Any],
    keep_last: bool,
    on_first: Callable[[Proc], None] | None = None,
) -> tuple[dict[str, Any], Proc | None]:
    """Raw Celery, AwoooP, raw Celery, AwoooP, … at ``-c concurrency`` until three clean
    pairs (``bench.verdicts``); pair k is AwoooP's batch k over the mean of the raw rates
    either side of it. AwoooP's worker idles while the raw run after its batch is measured,
    and is then stopped, except the last one when ``keep_last`` (returned)."""
    c = concurrency
    raws = [bench_raw_celery(knobs, logdir, r, procs, noise, f"worker-raw-c{c}-1", c)]
    batches: list[dict[str, Any]] = []
    pairs: list[verdicts.Pair] = []
    worker: Proc | None = None
    while verdicts.need_more(pairs):
        k = len(pairs) + 1
        if worker is not None:
            worker.stop()
            procs.remove(worker)
        batch, worker = awooop_batch(
            knobs,
            logdir,
            web,
            port,
            progress,
            token,
            r,
            procs,
            noise,
            c,
            f"AwoooP -c {c} #{k}",
            into,
            on_first,
        )
        batches.append(batch)
        raws.append(bench_raw_celery(knobs, logdir, r, procs, noise, f"worker-raw-c{c}-{k + 1}", c))
        before, after = raws[-2], raws[-1]
        pair = verdicts.Pair(
            {"e2e": _ratio(batch["per_s"], (before["per_s"] + after["per_s"]) / 2)},
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
        procs.remove(worker)
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


def bench_e2e(
    knobs: Knobs,
    logdir: Path,
    meter: commits.Meter,
    e2e_id: str,
    token: str,
    r: redis.Redis,
    procs: list[Proc],
    noise: Noise,
) -> dict[str, Any]:
    """The end-to-end series at each concurrency (the last one's worker then runs the soak),
    commits per run and memory over the soak."""
    soak = knobs.soak_runs
    url = meter.url
    info: dict[str, Any] = {"runs": knobs.e2e_runs, "soak_runs": soak, "database": meter.database}
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
    last_series: dict[str, Any] = {"raw": []}
    warm_before: commits.Reading | None = None
    warm_after: commits.Reading | None = None
    admitted = 0
    try:
        watch = SessionWatch(
            meter.maintenance_url,
            meter.database,
            lambda: [p for proc in procs for p in proc.pids()],
        )
        watch.start()
        wait_http(web, port)
        mem: dict[str, dict[str, float]] = {"web": {"start": web.rss_mib()}, "worker": {}}
        progress = Progress(url, e2e_id, meter.tally)
        info["series"] = {}
        for i, c in enumerate(knobs.e2e_concurrency):
            last = i == len(knobs.e2e_concurrency) - 1
            series, worker = e2e_series(
                knobs,
                logdir,
                web,
                port,
                progress,
                token,
                r,
                procs,
                noise,
                c,
                info,
                keep_last=last,
                on_first=lambda w: mem["worker"].__setitem__("start", w.rss_mib()),
            )
            info["series"][c] = series
            admitted += len(series["batches"]) * knobs.e2e_runs
        assert worker is not None
        last_series = info["series"][knobs.e2e_concurrency[-1]]
        info["per_s"] = last_series["batches"][-1]["per_s"]
        mem["web"]["after_e2e"] = web.rss_mib()
        mem["worker"]["after_e2e"] = worker.rss_mib()

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
            wal0 = wal_syncs(meter.maintenance_url)
            groups = {
                "web": web.pids,
                "worker": worker.pids,
                "PostgreSQL": lambda: postgres_pids(meter.maintenance_url, meter.database),
                "Redis": lambda: redis_pids(r),
            }
            cpu0 = {name: cpu_by_pid(pids()) for name, pids in groups.items()}
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
                admitted + soak,
                timeout=max(60.0, 2 * soak / max(info["per_s"], 1.0)),
            )
            info["soak_wall_s"] = time.perf_counter() - t0
            info["cpu_ms_per_run"] = {
                name: cpu_delta(cpu0[name], cpu_by_pid(pids())) * 1000 / soak
                for name, pids in groups.items()
            }
            log(f"soak: {soak} more runs admitted and completed in {info['soak_wall_s']:.1f} s")
            # The window closes the same way it opened: processes idle, statistics flushed
            # (their shutdown is not the soak's work).
            time.sleep(STATS_IDLE_FLUSH_S)
            warm_after = meter.read()
            info["wal_syncs"] = wal_syncs(meter.maintenance_url) - wal0
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
            if proc is not None and proc in procs:
                proc.stop()
                procs.remove(proc)
    after = meter.read()
    raw_cpu = [m["cpu_ms"] for m in last_series["raw"] if "cpu_ms" in m]
    info["raw_cpu_ms"] = statistics.median(raw_cpu) if raw_cpu else float("nan")
    if "cpu_ms_per_run" in info:
        info["cpu_ms"] = sum(info["cpu_ms_per_run"].values())
        info["cpu_ratio"] = _ratio(info["cpu_ms"], info["raw_cpu_ms"])
        log(
            f"CPU per run over the soak {info['cpu_ms']:.2f} ms ("
            + ", ".join(f"{k} {v:.2f}" for k, v in info["cpu_ms_per_run"].items())
            + f"); raw Celery {info['raw_cpu_ms']:.2f} ms per task: {info['cpu_ratio']:.2f}"
        )
    whole = commits.Count.between(before, after)
    info["commits_whole_window"] = {"total": whole.runs, "runs": admitted + soak}
    # Over the soak (warm processes) when there was one; else over everything, set-up included.
    counted = soak if warm_after is not None else admitted + soak
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
    if "wal_syncs" in info:
        info["wal_flushes_per_run"] = info["wal_syncs"] / soak
    info["foreign_sessions"] = sorted(set(watch.foreign.values()))
    info["foreign_session_count"] = len(watch.foreign)
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
    results: list[dict[str, Any]],
    pairs: dict[int, list[verdicts.Pair]],
    e2e: dict[str, Any],
    conns: tuple[int, ...],
) -> list[tuple[str, float, str, str]]:
    """(what, measured, target text, verdict); each ratio the median of its counted pairs."""
    rows = []
    throughput = (
        ("AwoooP new events / baseline", "new", "admission_ratio"),
        ("AwoooP duplicates / baseline new events", "duplicate", "duplicate_vs_baseline"),
        # Beside it, what a duplicate costs against AwoooP's own new event: no target.
        ("AwoooP duplicates / new events", "duplicate_own", None),
    )
    for label, key, target in throughput:
        for c in conns:
            value = verdicts.median(pairs.get(c, []), key)
            if target is None:
                rows.append((f"{label}, req/s @{c}", value, "(none)", "-"))
                continue
            t = TARGETS[target]
            rows.append((f"{label}, req/s @{c}", value, f">= {t:.2f}", _verdict(value, t, True)))
    c = max(conns) if conns else 0
    value = verdicts.median(pairs.get(c, []), "p99")
    t = TARGETS["p99_ratio"]
    rows.append(
        (f"p99 AwoooP new events / baseline @{c}", value, f"<= {t:.2f}", _verdict(value, t, False))
    )
    for conc, series in sorted(e2e.get("series", {}).items()):
        value = series["ratio"]
        for key, suffix in E2E_TARGETS.get(conc, (("e2e_ratio", ""),)):
            t = TARGETS[key]
            rows.append(
                (
                    f"AwoooP noop-3 runs/s / raw Celery tasks/s, -c {conc}{suffix}",
                    value,
                    f">= {t:.2f}",
                    _verdict(value, t, True),
                )
            )
    for what, key, digits in (
        ("CPU per run (web + worker + PostgreSQL + Redis) / raw Celery's per task", "cpu_ratio", 1),
        ("PostgreSQL commits per run (admission included)", "commits_per_run", 0),
        ("of which waited for a WAL flush (WAL flushes per run)", "wal_flushes_per_run", 0),
    ):
        value = e2e.get(key, float("nan"))
        t = TARGETS[key]
        rows.append((what, value, f"<= {t:.{digits}f}", _verdict(value, t, False)))
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


def noise_lines(pairs: dict[int, list[verdicts.Pair]], e2e: dict[str, Any]) -> list[str]:
    """Which pairs were measured again, or counted although noisy, and why."""
    lines = []
    for c, series in sorted(pairs.items()):
        lines += verdicts.describe(series, f"admission @{c}")
    for c, series in sorted(e2e.get("series", {}).items()):
        lines += verdicts.describe(series["pairs"], f"end to end -c {c}")
    return lines


def _fmt(value: Any, digits: int = 0) -> str:
    if isinstance(value, float):
        return "n/a" if value != value else f"{value:,.{digits}f}"
    return str(value)


def _digits(what: str) -> int:
    return (
        3
        if "commits" in what or "WAL" in what
        else 1
        if "%" in what
        else 0
        if "non-2xx" in what
        else 2
    )


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


def render_table(
    results: list[dict[str, Any]],
    pairs: dict[int, list[verdicts.Pair]],
    e2e: dict[str, Any],
    rows: list[tuple[str, float, str, str]],
    failed_targets: list[str],
) -> str:
    out = [
        "",
        "Admission, POST /v1/projects/{p}/runs (API channel), in interleaved pairs",
        f"  {'':<22}{'pair':>5}{'conns':>6}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'non-2xx':>9}"
        f"{'web CPU ms/req':>16}{'other CPU':>11}",
    ]
    for res in results:
        name = f"{'AwoooP' if res['app'] == 'awooop' else 'baseline'} " + (
            "new events" if res["kind"] == "new" else "duplicates"
        )
        out.append(
            f"  {name:<22}{res.get('pair', 1):>5}{res['connections']:>6}{res['rps']:>9.0f}"
            f"{res['p50']:>9.1f}{res['p99']:>9.1f}{res['non_2xx']:>9}{res['web_cpu_ms']:>16.2f}"
            f"{res['other_cpu_pct']:>10.0f}%"
        )
    for c, series in sorted(pairs.items()):
        out.append(
            f"  pairs @{c}: "
            + ", ".join(
                f"{_fmt(p.ratios['new'], 2)} ({_pair_mark(p, p is series[-1])})" for p in series
            )
        )
    for c, series in sorted(e2e.get("series", {}).items()):
        out += ["", f"End to end, one prefork worker process at -c {c}, queue filled first"]
        for label, m in _chain(series):
            unit = "tasks/s" if label.startswith("raw") else "runs/s "
            out.append(
                f"  {label:<22}{m.get('per_s', float('nan')):>8.0f} {unit}"
                f"  worker CPU {m.get('worker_cpu_ms', 0):.2f} ms/item,"
                f" other CPU {m.get('other_cpu_pct', 0):.0f}%"
            )
        out.append(
            "  pairs: "
            + ", ".join(
                f"{_fmt(p.ratios['e2e'], 2)} ({_pair_mark(p, p is series['pairs'][-1])})"
                for p in series["pairs"]
            )
        )
    out += [
        f"  commits                 {e2e.get('commits_runs', 'n/a'):>8} "
        f"  for {e2e.get('commits_counted_runs', 'n/a')} runs"
        f" = {_fmt(e2e.get('commits_per_run', float('nan')), 3)} per run",
        f"  background, subtracted  {e2e.get('background_text', 'n/a')}"
        f" (of {e2e.get('commits', 'n/a')} in the scratch database)",
    ]
    out += [
        f"  WAL flushes             {e2e.get('wal_syncs', 'n/a'):>8} "
        f"  = {_fmt(e2e.get('wal_flushes_per_run', float('nan')), 3)} per run (server-wide)",
        f"  CPU per run, ms         {_fmt(e2e.get('cpu_ms', float('nan')), 2):>8} "
        f"  ({', '.join(f'{k} {v:.2f}' for k, v in e2e.get('cpu_ms_per_run', {}).items())});"
        f" raw Celery per task {_fmt(e2e.get('raw_cpu_ms', float('nan')), 2)}",
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
    out += ["", f"  {'ratio':<72}{'measured':>10}  {'target':<9}verdict"]
    for what, value, target, verdict in rows:
        out.append(f"  {what:<72}{_fmt(value, _digits(what)):>10}  {target:<9}{verdict}")
    out += [""] + [f"  {line}" for line in failure_summary(all_failures(results, e2e))]
    out += [f"  note: {line}" for line in noise_lines(pairs, e2e)]
    out += [f"  FAIL {line}" for line in failed_targets]
    return "\n".join(out)


def _e2e_rows(series: dict[str, Any]) -> list[str]:
    """The rows of one end-to-end series, in the order measured."""
    return [
        f"| {label} | {m.get('tasks', m.get('runs'))} | {_fmt(m.get('per_s'), 0)} | "
        f"{_fmt(m.get('seconds'), 2)} | {_fmt(m.get('worker_cpu_ms'), 2)} | "
        f"{_fmt(m.get('other_cpu_pct'), 0)}% |"
        for label, m in _chain(series)
    ]


def _pair_rows(pairs: list[verdicts.Pair], key: str, label: str) -> list[str]:
    return [
        f"| {label} | {i} | {_fmt(p.ratios[key], 2)} | {_pair_mark(p, i == len(pairs))} | "
        f"{'; '.join(p.reasons) or '-'} |"
        for i, p in enumerate(pairs, 1)
    ]


def render_markdown(
    machine: dict[str, str],
    knobs: Knobs,
    results: list[dict[str, Any]],
    pairs: dict[int, list[verdicts.Pair]],
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
    noisy = noise_lines(pairs, e2e)
    lines += [
        "",
        f"Each ratio is the median of {verdicts.PAIRS} interleaved pairs. A pair measured while "
        f"processes outside the benchmark used more than {verdicts.OTHER_CPU_MAX_PCT:.0f} % of "
        "the CPUs, or (end to end) whose raw Celery rates either side of AwoooP's batch are "
        f"more than {verdicts.RAW_APART_MAX_PCT:.0f} % apart, is measured again rather than "
        f"counted, up to {verdicts.MAX_PAIRS} pairs; when fewer than {verdicts.PAIRS} were "
        "clean, noisy ones are counted and marked (`bench/verdicts.py`). "
        + ("Pairs measured again or counted noisy:" if noisy else "Every counted pair was clean."),
    ]
    if noisy:
        lines += [""] + [f"- {line}" for line in noisy]
    lines += [
        "",
        "## (a) Admission over HTTP",
        "",
        "| app | events | pair | conns | req/s | p50 ms | p99 ms | non-2xx | web CPU ms/req "
        "| other CPU |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        lines.append(
            f"| {'AwoooP' if res['app'] == 'awooop' else 'baseline'} | "
            f"{'new' if res['kind'] == 'new' else 'duplicate'} | {res.get('pair', 1)} | "
            f"{res['connections']} | "
            f"{res['rps']:,.0f} | {res['p50']:.1f} | {res['p99']:.1f} | {res['non_2xx']} | "
            f"{res['web_cpu_ms']:.2f} | {res['other_cpu_pct']:.0f}% |"
        )
    lines += [
        "",
        "| pairs | pair | AwoooP new events / baseline | | noisy because |",
        "|---|---:|---:|---|---|",
    ]
    for c, series in sorted(pairs.items()):
        lines += _pair_rows(series, "new", f"@{c}")
    mem = e2e.get("memory", {})
    whole = e2e.get("commits_whole_window") or {}
    lines += [
        "",
        "`POST /v1/projects/{p}/runs` (the API channel) with a Bearer token, a JSON body and "
        "an `Idempotency-Key`: new keys (answered 202), or the new-event row's keys sent again "
        "(duplicates, answered 200 `E-IDEMPOTENT-001`). N keep-alive connections, one request "
        "in flight each, spread evenly over the 4 gunicorn workers; "
        f"{knobs.warmup:g} s warm-up, then {knobs.duration:g} s measured per row; a pair is "
        "AwoooP's new events, the baseline's, then AwoooP's duplicates, one after the other. "
        "AwoooP (`gunicorn.conf.py`, access log off) does its whole admission: "
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
        *[row for _, series in sorted(e2e.get("series", {}).items()) for row in _e2e_rows(series)],
        "",
        "| pairs | pair | AwoooP / mean of the raw rates either side | | noisy because |",
        "|---|---:|---:|---|---|",
        *[
            row
            for c, series in sorted(e2e.get("series", {}).items())
            for row in _pair_rows(series["pairs"], "e2e", f"-c {c}")
        ],
        "",
        "| CPU over the soak, ms per run | |",
        "|---|---:|",
        *[f"| {k} | {v:.2f} |" for k, v in e2e.get("cpu_ms_per_run", {}).items()],
        f"| AwoooP, all four | {_fmt(e2e.get('cpu_ms', float('nan')), 2)} |",
        f"| raw Celery per task: producer + worker + Redis (median of the -c "
        f"{knobs.e2e_concurrency[-1]} raw batches) | "
        f"{_fmt(e2e.get('raw_cpu_ms', float('nan')), 2)} |",
        "",
        "| PostgreSQL commits, counted over the soak | |",
        "|---|---|",
        f"| committed in the bench's database | {e2e.get('commits', 'n/a')} |",
        f"| not run work, subtracted | {e2e.get('background_text', 'n/a')} |",
        f"| left, for the {e2e.get('commits_counted_runs', 'n/a')} runs of the soak "
        f"(admission included) | {e2e.get('commits_runs', 'n/a')} |",
        f"| over the whole phase, the processes' start-up included | "
        f"{whole.get('total', 'n/a')} for {whole.get('runs', 'n/a')} runs |",
        f"| WAL flushes meanwhile, server-wide (`pg_stat_wal.wal_sync`) | "
        f"{e2e.get('wal_syncs', 'n/a')} = {_fmt(e2e.get('wal_flushes_per_run', float('nan')), 3)}"
        " per run |",
        f"| an idle window of 2 s before it (must be 0) | {e2e.get('idle_commits', 'n/a')} |",
        f"| sessions started in the counted window (must be 0) | "
        f"{e2e.get('commits_sessions', 'n/a')} |",
        f"| sessions not of the benchmark seen on its database | "
        f"{e2e.get('foreign_session_count', 'n/a')}"
        + (f": {', '.join(e2e['foreign_sessions'])}" if e2e.get("foreign_sessions") else "")
        + " |",
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
        "run work is counted where it happens and subtracted (`bench/commits.py`). More than 5 "
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
        pairs: dict[int, list[verdicts.Pair]] = {}
        e2e: dict[str, Any] = {}
        if "admission" in knobs.phases:
            results, pairs = bench_admission(
                knobs, logdir, tokens, real_id, base_id, r, noise, procs
            )
        if "e2e" in knobs.phases:
            scratch.vacuum_analyze(meter.url, meter.maintenance_url)  # admission dead rows
            e2e = bench_e2e(knobs, logdir, meter, e2e_id, tokens[e2e_id], r, procs, noise)

        rows = ratios(results, pairs, e2e, knobs.connections)
        print(render_table(results, pairs, e2e, rows, target_failures(machine, e2e)), flush=True)
        if set(knobs.phases) != set(PHASES) and "BENCH_OUTPUT" not in os.environ:
            log(f"only {','.join(knobs.phases)} ran: {knobs.output} left as it was")
            return 0
        knobs.output.parent.mkdir(parents=True, exist_ok=True)
        knobs.output.write_text(
            render_markdown(machine, knobs, results, pairs, e2e, rows, _kept_notes(knobs.output))
        )
        (logdir / "results.json").write_text(
            json.dumps(
                {"machine": machine, "admission": results, "pairs": pairs, "e2e": e2e},
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
