"""The processes a bench starts and stops, and what they cost in CPU and memory (``/proc``).

Every process runs in its own process group with its output in a log file, and is stopped
(SIGTERM to the group, then SIGKILL) on the way out. CPU of a process is ``utime + stime +
cutime + cstime`` from ``/proc/<pid>/stat`` (its children already reaped included).

:class:`Noise` splits the machine's CPU during a phase three ways: the bench's own (its
process trees, PostgreSQL and Redis), the kernel's threads (children of ``kthreadd``, PID 2:
the I/O of the durable commits, reported as "I/O CPU"), and the rest of the machine's busy
time from ``/proc/stat`` ("other CPU": user-space processes outside the bench, what makes a
measurement noisy). On a virtual machine it also reads the time the hypervisor gave this
machine's CPUs to others while they had work ("steal"): as noisy as other CPU.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import redis

from bench import database, load, report
from bench.report import BenchError, log

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
KTHREADD = 2
SERVERS = ("postgres", "redis-server")
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- /proc ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    pid: int
    ppid: int
    comm: str
    cpu: float  # seconds, reaped children included


def read_stat(pid: int, root: str = "/proc") -> Stat | None:
    try:
        with open(f"{root}/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    cpu = sum(int(x) for x in fields[11:15]) / CLK_TCK
    return Stat(pid, int(fields[1]), comm, cpu)


def all_stats(root: str = "/proc") -> dict[int, Stat]:
    out = {}
    for entry in os.scandir(root):
        if entry.name.isdigit() and (s := read_stat(int(entry.name), root)) is not None:
            out[s.pid] = s
    return out


def tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for s in all_stats().values():
        children.setdefault(s.ppid, []).append(s.pid)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pid: int) -> float:
    s = read_stat(pid)
    return s.cpu if s else 0.0


def comm(pid: int) -> str:
    s = read_stat(pid)
    return s.comm if s else ""


def rss_kib(pid: int) -> int:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    return {p: cpu_seconds(p) for p in pids}


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two samples by the processes alive at the second."""
    return sum(max(0.0, cpu - before.get(p, 0.0)) for p, cpu in after.items())


def machine_cpu(root: str = "/proc") -> tuple[float, float, float]:
    """Seconds of all CPUs so far (idle and steal included), of them busy (``/proc/stat``:
    user, nice, system, irq and softirq; guest time is inside user) and of them stolen (the
    hypervisor ran another machine while this one's CPUs had work)."""
    with open(f"{root}/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return total / CLK_TCK, (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK


# --- noise -----------------------------------------------------------------------------------


def classify(stat: Stat, ours: set[int]) -> str:
    """``ours`` (the bench's trees, PostgreSQL, Redis), ``io`` (a kernel thread) or
    ``other`` (any other user-space process)."""
    if stat.pid == KTHREADD or stat.ppid == KTHREADD:
        return "io"
    if stat.pid in ours or stat.comm in SERVERS:
        return "ours"
    return "other"


@dataclass(frozen=True)
class Sample:
    stats: dict[int, Stat]
    total: float  # seconds of all CPUs
    busy: float  # of them not idle
    steal: float = 0.0  # of them taken by the hypervisor


def split(a: Sample, b: Sample, ours: set[int]) -> dict[str, float]:
    """Share of all CPUs (%) used between two samples by ``ours`` and ``io``, each process
    judged as it is at the second sample (one that started meanwhile counts whole), by
    ``other``: the rest of the machine's busy time, and taken by the hypervisor (``steal``).
    Other CPU is not summed per process: a process that reaps a child gains the child's whole
    life in ``cutime`` at once, and one that came and went between the samples is never
    seen."""
    used = {"ours": 0.0, "io": 0.0}
    for pid, s in b.stats.items():
        before = a.stats.get(pid)
        base = before.cpu if before is not None and before.comm == s.comm else 0.0
        kind = classify(s, ours)
        if kind in used:
            used[kind] += max(0.0, s.cpu - base)
    used["other"] = max(0.0, (b.busy - a.busy) - used["ours"] - used["io"])
    used["steal"] = max(0.0, b.steal - a.steal)
    span = max(b.total - a.total, 1e-9)
    return {k: v / span * 100 for k, v in used.items()}


class Noise:
    """CPU of a phase beyond the bench: ``other_cpu_pct`` (user space outside the measured
    trees and the servers), ``steal_cpu_pct`` (the hypervisor's) and ``io_cpu_pct`` (kernel
    threads)."""

    def __init__(self, ours: Callable[[], list[int]], root: str = "/proc") -> None:
        self._ours, self._root = ours, root

    def sample(self) -> Sample:
        return Sample(all_stats(self._root), *machine_cpu(self._root))

    @contextlib.contextmanager
    def measure(self, into: dict[str, Any]) -> Iterator[None]:
        a = self.sample()
        yield
        shares = split(a, self.sample(), set(self._ours()) | {os.getpid()})
        into |= noise_figures(shares)


def noise_figures(shares: dict[str, float]) -> dict[str, float]:
    """The noise figures a phase's results keep, from :func:`split`'s shares."""
    return {
        "other_cpu_pct": shares["other"],
        "steal_cpu_pct": shares["steal"],
        "io_cpu_pct": shares["io"],
    }


def noise_text(info: dict[str, Any]) -> str:
    return (
        f"other CPU {info['other_cpu_pct']:.0f}%, steal {info['steal_cpu_pct']:.0f}%, "
        f"I/O CPU {info['io_cpu_pct']:.0f}%"
    )


# --- processes -----------------------------------------------------------------------------

_RUNNING: list[Proc] = []


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
        return tree(self.pid) if self.alive() else []

    def rss_mib(self) -> float:
        return sum(rss_kib(p) for p in self.pids()) / 1024.0

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(p) for p in self.pids())

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join("    " + line for line in text[-lines:])

    def failure(self, what: str) -> BenchError:
        return BenchError(f"{what}; log {self.log_path}:\n{self.log_tail()}")

    def check(self) -> None:
        if not self.alive():
            raise self.failure(f"{self.name} exited with status {self.popen.returncode}")

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The process group stopped (SIGSTOP) inside the block, continued after it."""
        os.killpg(self.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self.pid, signal.SIGCONT)

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


def stop_all() -> None:
    for proc in reversed(list(_RUNNING)):
        proc.stop()


def running_pids() -> list[int]:
    """Every process the bench started and has not stopped, with their children."""
    return [p for proc in _RUNNING for p in proc.pids()]


P = TypeVar("P", bound="Proc")


@contextlib.contextmanager
def started(proc: P, stop_timeout: float = 15.0) -> Iterator[P]:
    try:
        yield proc
    finally:
        proc.stop(stop_timeout)


@contextlib.contextmanager
def serving(web: Web) -> Iterator[Web]:
    """``web`` once it answers (:meth:`Web.wait`), stopped on the way out."""
    with started(web):
        yield web.wait()


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


def run_to_end(
    name: str, argv: list[str], env: dict[str, str], logdir: Path, timeout: float
) -> float:
    """Run a command to its end; seconds taken."""
    with started(Proc(name, argv, env, logdir)) as proc:
        t0 = time.perf_counter()
        try:
            proc.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise proc.failure(f"{name} did not finish within {timeout:.0f} s") from exc
    if proc.popen.returncode != 0:
        raise proc.failure(f"{name} exited with status {proc.popen.returncode}")
    return time.perf_counter() - t0


class Web(Proc):
    """gunicorn with ``gunicorn.conf.py`` on a free port, access log off."""

    def __init__(self, name: str, logdir: Path, app: str = "", **env: str) -> None:
        self.port = free_port()
        argv = [str(BIN / "gunicorn"), "-c", "gunicorn.conf.py", app or APP]
        env = child_env(AWOOOP_PORT=str(self.port), AWOOOP_ACCESS_LOG="0", **env)
        super().__init__(name, argv, env, logdir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def wait(self, timeout: float = 30.0) -> Web:
        """Until the server answers an HTTP request (any status)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=2) as s,
            ):
                s.sendall(b"GET /bench-ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(16).startswith(b"HTTP/1."):
                    return self
            time.sleep(0.1)
        raise self.failure(f"{self.name} did not answer on port {self.port} within {timeout:.0f} s")

    def spread(self) -> load.Spread | None:
        """Connections spread evenly over the gunicorn workers (BENCH_SPREAD=0: as accepted)."""
        if os.environ.get("BENCH_SPREAD", "1") == "0":
            return None

        def owner(client_port: int) -> int | None:
            return socket_owner(self.pids()[1:], tcp_inode(self.port, client_port))

        return load.Spread(owner, len(self.pids()) - 1)

    def run(
        self, source: load.Source, conns: int, spread: bool = True, **kw: Any
    ) -> load.LoadResult:
        return load.run(self.url, source, conns, spread=self.spread() if spread else None, **kw)

    def measure(
        self, label: str, source: load.Source, conns: int, noise: Noise, **kw: Any
    ) -> dict[str, Any]:
        """One measured load (``kw``: duration, warmup): its figures, the gunicorn tree's CPU
        per request (warm-up included on both sides) and the noise."""
        self.check()
        info: dict[str, Any] = {"label": label, "connections": conns}
        cpu0 = self.cpu_seconds()
        with noise.measure(info):
            result = self.run(source, conns, **kw)
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
            web_cpu_ms=(self.cpu_seconds() - cpu0) * 1000 / max(result.issued, 1),
        )
        log(f"{label:<28} {result.summary()}  {noise_text(info)}")
        info["failures"] = report.report_failures(label, result)
        if result.completed == 0:
            raise self.failure(f"{label}: no response completed")
        return info

    def admit(
        self, label: str, source: load.Source, n: int, conns: int = 16, floor: float = 60, **kw: Any
    ) -> load.LoadResult:
        """``n`` requests as fast as ``conns`` connections go (giving up after
        max(``floor``, n / 50) s); logged, FAIL lines for the summary in
        ``result.failure_lines``."""
        result = self.run(source, conns, timeout=max(floor, n / 50), **kw)
        log(
            f"{label}: admitted {result.statuses.get(202, 0)}/{n} in {result.seconds:.1f} s "
            f"({result.rps:.0f} req/s, non-2xx {result.non_2xx}, errors {result.errors})"
        )
        result.failure_lines = report.report_failures(label, result)
        return result


APP = "awooop.web.app:create_app()"


def start_worker(
    name: str,
    logdir: Path,
    concurrency: int = 1,
    app: str = "awooop.tasks.app",
    queue: str = "runs",
    **env: str,
) -> Proc:
    """One Celery prefork worker (no mingle, gossip or heartbeat); AwoooP's without task
    events unless ``env`` says otherwise, like for like with raw Celery."""
    if app == "awooop.tasks.app":
        env = {"AWOOOP_TASK_EVENTS": "0", **env}
    argv = [str(BIN / "celery"), "-A", app, "worker", "-Q", queue, "-c", str(concurrency)]
    argv += ["-n", f"{name}-{os.getpid()}@%h", "--without-mingle", "--without-gossip"]
    argv += ["--without-heartbeat", "-P", "prefork"]
    return Proc(name, argv, child_env(**env), logdir)


# --- sockets and servers ---------------------------------------------------------------------


def tcp_inode(local_port: int, remote_port: int) -> str | None:
    """The inode of the loopback socket local_port -> remote_port (/proc/net/tcp{,6})."""
    local, remote = f":{local_port:04X}", f":{remote_port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[1].endswith(local) and cols[2].endswith(remote):
                    return cols[9]
    return None


def socket_owner(pids: list[int], inode: str | None) -> int | None:
    """Which of ``pids`` holds the socket ``inode``."""
    if inode is None or inode == "0":
        return None
    target = f"socket:[{inode}]"
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        return pid
    return None


def redis_pids(r: redis.Redis) -> list[int]:
    """The broker's process when it runs on this machine (it serves every database of it)."""
    with contextlib.suppress(redis.RedisError, KeyError, ValueError):
        pid = int(r.info("server")["process_id"])
        if comm(pid).startswith("redis"):
            return [pid]
    return []


def rabbitmq_pids() -> list[int]:
    """The Erlang VMs running RabbitMQ on this machine (their children come with them)."""
    found = []
    for s in all_stats().values():
        if s.comm == "beam.smp":
            with contextlib.suppress(OSError), open(f"/proc/{s.pid}/cmdline", "rb") as f:
                if b"rabbit" in f.read():
                    found.append(s.pid)
    return found


def postgres_pids(url: str, database_name: str) -> list[int]:
    """The server's processes that work for ``database_name``: its client backends (less this
    harness's own sessions), the postmaster and the server's background processes (shared
    with its other databases). Empty when the server is not on this machine."""
    with database.connect(url) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT pid, datname, backend_type, client_port FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid()"
        )
        rows = cur.fetchall()
        cur.execute("SELECT pg_backend_pid()")
        me = read_stat(int(cur.fetchone()[0]))
        port = conn.info.port
    if me is None:
        return []
    pids = [me.ppid]
    for pid, datname, backend_type, client_port in rows:
        if backend_type != "client backend":
            if backend_type != "autovacuum worker" or datname == database_name:
                pids.append(pid)
        elif datname == database_name and not (
            client_port and socket_owner([os.getpid()], tcp_inode(client_port, port))
        ):
            pids.append(pid)
    return [p for p in pids if comm(p) == "postgres"]


def postgres_server_pid(url: str) -> int | None:
    """The postmaster of the server at ``url`` (the parent of our own backend), when it runs
    on this machine in this process namespace."""
    (backend,) = database.query(url, "SELECT pg_backend_pid()")[0]
    me = read_stat(int(backend))
    if me is None or me.comm != "postgres":
        return None
    return me.ppid if comm(me.ppid) == "postgres" else None
