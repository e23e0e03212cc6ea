"""The application processes of one chaos scenario, over its own database.

:class:`ChaosStack` starts gunicorn (web), two Celery workers (prefork, ``runs`` and
``notifications`` queues), the maintenance worker and beat — each in its own process
group; optionally two beats and two maintenance workers (``start(beats=2,
maintenance_workers=2)``) — with the lease, heartbeat, liveness and reaper settings at
production's ratios (:data:`TIMINGS`) and short orphan and timer sweeps, and stops exactly
what it started (also when a test fails). A worker is a :class:`Worker` handle: its parent
and prefork children, SIGKILL of either, SIGSTOP / SIGCONT of the whole group, restart, and
the ``worker_id`` prefixes (``host:pid:``) its processes write into journals.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import secrets as std_secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import Engine, create_engine, text

from awooop import cli, db, secrets
from awooop.config import Settings
from awooop.store import projects
from tests.chaos import checks, workflows
from tests.chaos.providers import Provider
from tests.chaos.recorder import Recorder
from tests.support import timings
from tests.support.netproxy import FaultProxy
from tests.support.processes import BIN, ROOT, Process, free_port, listening, wait_until

# The lease, heartbeat, liveness and reaper settings at production's ratios, a tenth of
# production's length (a 30 s lease renewed every 3 s, a liveness beat every 0.5 s, a worker
# dead after 2 s, the reaper every 6 s): a worker that stops or loses its database is taken
# over by the dead-worker path, as in production, long before its lease expires. The orphan,
# timer and outbox sweeps are short so that recovery fits in seconds.
TIME_SCALE = 0.1
TIMINGS = {
    **timings.production_ratios(TIME_SCALE),
    "AWOOOP_ORPHAN_AFTER_SECONDS": "5",
    "AWOOOP_ORPHAN_INTERVAL_SECONDS": "2",
    "AWOOOP_TIMER_INTERVAL_SECONDS": "1",
    "AWOOOP_OUTBOX_INTERVAL_SECONDS": "5",
    # One retry of a write that waited out its lock timeout (an operator's session holding
    # the run): with the timeouts scaled down, five tries would keep a worker from new work
    # for longer, relative to the scenario, than production's five tries of 10 s do.
    "AWOOOP_WRITE_RETRIES": "1",
}
LEASE_TTL = timings.seconds(TIMINGS, "lease_ttl_seconds")
HEARTBEAT_INTERVAL = timings.seconds(TIMINGS, "heartbeat_interval_seconds")
REAPER_INTERVAL = timings.seconds(TIMINGS, "reaper_interval_seconds")
WORKER_DEAD_AFTER = timings.seconds(TIMINGS, "worker_dead_after_seconds")
HOST = socket.gethostname()[:64]


class Placement(Protocol):
    """Where a process runs (a cluster host, ``tests/cluster/network.py``): its hostname,
    and the command line that runs ``argv`` there."""

    name: str

    def argv(self, argv: list[str]) -> list[str]: ...


def children_of(pid: int) -> list[int]:
    """The live direct children of ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may contain spaces and parentheses.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return sorted(found)


class Worker:
    """A Celery worker (parent + prefork pool) in its own process group.

    ``proxy``: the :class:`FaultProxy` its database connections go through, if any.
    ``host``: where it runs (this machine when None); ``env``: variables of its own.
    ``pids_seen``: every pid of its processes observed so far (parents and children of all
    its generations) — journal entries name the process in ``worker_id``.
    """

    def __init__(
        self,
        stack: ChaosStack,
        name: str,
        queues: str,
        concurrency: int,
        proxy: FaultProxy | None = None,
        host: Placement | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.stack = stack
        self.name = name
        self.queues = queues
        self.concurrency = concurrency
        self.proxy = proxy
        self.host = host
        self.hostname = host.name if host is not None else HOST
        self.own_env = dict(env or {})
        self.generation = 0
        self.process: Process | None = None
        self.pids_seen: set[int] = set()
        self.parent_kills = 0
        self.child_kills = 0
        # Exits nobody asked for (e.g. Celery gives up when a pool child dies while it starts).
        self.unexpected_exits = 0
        self._killed = False
        self._lock = threading.RLock()

    # --- lifecycle ---------------------------------------------------------------------

    def spawn(self) -> Worker:
        """Start a new generation of this worker (does not wait for it to be ready)."""
        with self._lock:
            return self._spawn()

    def _spawn(self) -> Worker:
        self._killed = False
        self.generation += 1
        env = {**self.stack.env, **self.own_env}
        if self.proxy is not None:
            env["AWOOOP_DATABASE_URL"] = self.stack.database_url_via(
                self.proxy.port, self.proxy.host
            )
        argv = [
            str(BIN / "celery"),
            "-A",
            "awooop.tasks.app",
            "worker",
            "-Q",
            self.queues,
            "-n",
            f"{self.name}-{self.generation}@%h",
            "--concurrency",
            str(self.concurrency),
            "--loglevel",
            "INFO",
            "--without-mingle",
            "--without-gossip",
        ]
        self.process = self.stack._start(f"{self.name}.{self.generation}", argv, env, self.host)
        return self

    def wait_ready(self, timeout: float = 60) -> Worker:
        assert self.process is not None
        self.process.wait_for_log("ready.", timeout)
        wait_until(lambda: len(self.children()) >= self.concurrency, timeout, f"{self.name}'s pool")
        return self

    def restart(self, wait: bool = True) -> Worker:
        self.spawn()
        return self.wait_ready() if wait else self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.popen.poll() is None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.popen.pid

    def children(self) -> list[int]:
        """The parent's live prefork children (remembered in ``pids_seen``)."""
        if not self.alive:
            return []
        found = children_of(self.pid)
        self.pids_seen.update([self.pid, *found])
        return found

    # --- faults ------------------------------------------------------------------------

    def kill(self) -> bool:
        """SIGKILL the parent and its pool at once (a container or host dying)."""
        with self._lock:
            if not self.alive:
                return False
            self.children()
            assert self.process is not None
            self._killed = True
            os.killpg(self.pid, signal.SIGKILL)
            self.process.popen.wait(timeout=10)
            self.parent_kills += 1
            return True

    def revive(self) -> bool:
        """Start a new generation if this one exited (what an orchestrator does); True if
        it did. An exit not caused by :meth:`kill` is counted in ``unexpected_exits``."""
        with self._lock:
            if self.process is None or self.alive:
                return False
            if not self._killed:
                self.unexpected_exits += 1
            self._spawn()
            return True

    def kill_child(self, rng: random.Random | None = None) -> int | None:
        """SIGKILL one prefork child (the parent starts another); its pid, or None."""
        children = self.children()
        if not children:
            return None
        pid = (rng or random).choice(children)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        self.child_kills += 1
        return pid

    def freeze(self) -> None:
        """SIGSTOP the whole process group: alive, holding its sockets, doing nothing."""
        self.children()
        os.killpg(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.killpg(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None:
            if self.alive:
                os.killpg(self.pid, signal.SIGCONT)  # a frozen group cannot act on SIGTERM
            self.process.stop()

    # --- what it wrote -----------------------------------------------------------------

    def worker_id_prefixes(self) -> list[str]:
        """``host:pid:`` of every process of this worker seen so far."""
        self.children()
        return [f"{self.hostname}:{pid}:" for pid in sorted(self.pids_seen)]

    def owns(self, worker_id: str | None) -> bool:
        return bool(worker_id) and any(worker_id.startswith(p) for p in self.worker_id_prefixes())

    def actions(self, action: str) -> list[dict[str, Any]]:
        """This worker's JSON log lines with ``action`` (a gate to wait on: assertions read
        PostgreSQL and the recorder)."""
        found = []
        for line in self.log().splitlines():
            if f'"{action}"' in line and line.startswith("{"):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("action") == action:
                    found.append(record)
        return found

    def log(self) -> str:
        """Every generation's log, oldest first."""
        parts = []
        for generation in range(1, self.generation + 1):
            path = self.stack.log_dir / f"{self.name}.{generation}.log"
            if path.exists():
                parts.append(path.read_text(errors="replace"))
        return "\n".join(parts)


class ChaosStack:
    """One scenario's database, broker database, project, recorder and processes.

    Made by the ``chaos_stack`` fixture with a fresh database cloned from the migrated
    template, Redis flushed, a project ``chaos`` whose API and Gitea channels route to
    ``chaos-saga``, and a :class:`Recorder`; :meth:`start` launches the processes.
    """

    def __init__(
        self,
        *,
        services: Any,
        database: str,
        settings: Settings,
        project: dict[str, Any],
        recorder: Recorder,
        log_dir: Path,
        broker_url: str | None = None,
    ) -> None:
        self.services = services
        self.database = database
        self.database_url = services.postgres.url(database)
        self.broker_url = broker_url or services.redis.url
        self.settings = settings
        self.project = project
        self.recorder = recorder
        self.log_dir = log_dir
        self.engine: Engine = db.make_engine(self.database_url, pool_size=4, role=db.SWEEPS)
        self.processes: list[Process] = []
        self.proxies: list[FaultProxy] = []
        self.workers: dict[str, Worker] = {}
        self.web: Process | None = None
        self.beats: list[Process] = []
        self.web_url = ""
        self.env = self._environment()
        self._supervising = threading.Event()
        self._supervisor: threading.Thread | None = None
        self.revivals = 0

    def _environment(self) -> dict[str, str]:
        # Nothing of the developer's AWOOOP_* environment leaks into the chaos stack.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWOOOP_")}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        metrics = self.log_dir / "metrics"
        metrics.mkdir(exist_ok=True)
        env.update(
            {
                "AWOOOP_DATABASE_URL": self.database_url,
                "AWOOOP_BROKER_URL": self.broker_url,
                "AWOOOP_SECRET_KEY": self.settings.secret_key,
                "AWOOOP_WORKFLOW_MODULES": "tests.chaos.workflows",
                workflows.RECORDER_ENV: self.recorder.url,
                "AWOOOP_BEAT_SCHEDULE_FILE": str(self.log_dir / "celerybeat-schedule"),
                "AWOOOP_WEB_WORKERS": "2",
                "AWOOOP_WEB_THREADS": "8",
                "AWOOOP_ACCESS_LOG": "0",
                "AWOOOP_TASK_EVENTS": "0",
                "AWOOOP_LOG_LEVEL": "INFO",
                "PROMETHEUS_MULTIPROC_DIR": str(metrics),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
                **TIMINGS,
            }
        )
        return env

    def database_url_via(self, port: int, host: str = "127.0.0.1") -> str:
        postgres = self.services.postgres
        return self.database_url.replace(f"{postgres.host}:{postgres.port}", f"{host}:{port}")

    def _start(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        host: Placement | None = None,
    ) -> Process:
        if host is not None:
            argv = host.argv(argv)
        process = Process(name, argv, env or self.env, self.log_dir)
        self.processes.append(process)
        return process

    # --- starting ----------------------------------------------------------------------

    def start(
        self,
        workers: tuple[str, ...] = ("worker-a", "worker-b"),
        concurrency: int = 2,
        proxied: tuple[str, ...] = (),
        web: bool = True,
        maintenance: bool = True,
        beat: bool = True,
        beats: int = 1,
        maintenance_workers: int = 1,
    ) -> ChaosStack:
        """Start everything at once, then wait until each is ready.

        ``proxied``: workers whose database connections go through their own
        :class:`FaultProxy` (``stack.workers[name].proxy``).
        ``beats``: how many beat processes (``beat``, ``beat-2``, …; ``self.beats``), each
        with its own schedule file — two beats is a deployment mistake AwoooP must survive
        (every sweep is sent twice). ``maintenance_workers``: how many maintenance workers
        (``maintenance``, ``maintenance-2``, …), so two sweeps of a kind really run at once.
        """
        pg_port = self.services.postgres.port
        for name in workers:
            proxy = None
            if name in proxied:
                proxy = FaultProxy("127.0.0.1", pg_port)
                self.proxies.append(proxy)
            self.workers[name] = Worker(self, name, "runs,notifications", concurrency, proxy)
        if maintenance:
            for i in range(1, maintenance_workers + 1):
                name = "maintenance" if i == 1 else f"maintenance-{i}"
                self.workers[name] = Worker(self, name, "maintenance", 1)
        for worker in self.workers.values():
            worker.spawn()
        if beat:
            for i in range(1, beats + 1):
                suffix = "" if i == 1 else f"-{i}"
                env = dict(self.env)
                env["AWOOOP_BEAT_SCHEDULE_FILE"] = str(
                    self.log_dir / f"celerybeat-schedule{suffix}"
                )
                # DEBUG: where beat logs each sweep it sends (scenario 6 counts them).
                argv = [
                    str(BIN / "celery"),
                    "-A",
                    "awooop.tasks.app",
                    "beat",
                    "--loglevel",
                    "DEBUG",
                ]
                self.beats.append(self._start(f"beat{suffix}", argv, env))
        if web:
            port = free_port()
            self.env["AWOOOP_PORT"] = str(port)
            self.web = self._start(
                "web",
                [str(BIN / "gunicorn"), "-c", "gunicorn.conf.py", "awooop.web.app:create_app()"],
            )
            self.web_url = f"http://127.0.0.1:{port}"
        for worker in self.workers.values():
            worker.wait_ready()
        for beat_process in self.beats:
            beat_process.wait_for_log("beat: Starting", 60)
        if web:
            wait_until(lambda: listening(int(self.env["AWOOOP_PORT"])), 60, "the web server")
        return self

    def worker(self, name: str) -> Worker:
        return self.workers[name]

    def wait_holding(self, worker: Worker, at_least: int = 2, timeout: float = 60) -> None:
        """Wait until ``worker`` holds the lease of ``at_least`` runs."""
        wait_until(
            lambda: len(checks.held_by(self.engine, worker.worker_id_prefixes())) >= at_least,
            timeout,
            f"{worker.name} to hold {at_least} runs",
        )

    def supervise(self, interval: float = 0.2) -> None:
        """From now on, start again at once any worker whose parent exited (killed or not),
        as an orchestrator restarts a container; ``self.revivals`` counts them. Stopped by
        :meth:`unsupervise` or :meth:`stop`."""
        self._supervising.set()

        def loop() -> None:
            while self._supervising.is_set():
                for worker in list(self.workers.values()):
                    if worker.revive():
                        self.revivals += 1
                time.sleep(interval)

        self._supervisor = threading.Thread(target=loop, name="supervisor", daemon=True)
        self._supervisor.start()

    def unsupervise(self) -> None:
        self._supervising.clear()
        if self._supervisor is not None:
            self._supervisor.join(timeout=10)
            self._supervisor = None

    def run_workers(self) -> list[Worker]:
        """The workers of the ``runs`` queue (not the maintenance workers)."""
        return [w for w in self.workers.values() if w.queues != "maintenance"]

    def maintenance_workers(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.queues == "maintenance"]

    def route(self, **routes: str) -> None:
        """Route the project's channels to these workflows (e.g. ``api="chaos-timers"``)."""
        with db.transaction(self.engine) as conn:
            projects.set_routes(conn, self.project["project_id"], routes)

    def provider(self, **options: Any) -> Provider:
        """A :class:`Provider` delivering to this stack's web server."""
        return Provider(self.web_url, **options)

    def new_key(self, prefix: str = "evt") -> str:
        return f"{prefix}-{uuid.uuid4().hex}"

    # --- stopping ----------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every process this stack started (SIGCONT first, SIGTERM, SIGKILL after
        10 s), then its proxies and engine."""
        self.unsupervise()
        for worker in self.workers.values():
            if worker.alive:
                os.killpg(worker.pid, signal.SIGCONT)
        for process in reversed(self.processes):
            if process.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in reversed(self.processes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            process.kill()  # the group, also what outlived its parent
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.popen.pid, signal.SIGKILL)
            process.stop()
        for proxy in self.proxies:
            proxy.close()
        self.engine.dispose()

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log()[-tail:]}" for p in self.processes)

    def lines_about(self, needle: str, last: int = 12, width: int = 300) -> list[str]:
        """The last ``last`` log lines of any process that mention ``needle`` (a run id),
        each cut to ``width`` characters and named by its process."""
        found = [
            f"{p.name}: {line[:width]}"
            for p in self.processes
            for line in p.log().splitlines()
            if needle in line
        ]
        return found[-last:]


S = TypeVar("S", bound=ChaosStack)


@contextlib.contextmanager
def scenario(
    factory: Callable[..., S],
    services: Any,
    template: str,
    recorder: Recorder,
    log_dir: Path,
    failed: Callable[[], bool],
    **options: Any,
) -> Iterator[S]:
    """A scenario's stack (made by ``factory``, e.g. :class:`ChaosStack`, with ``options``)
    over a fresh database cloned from ``template`` and a flushed Redis, with a project
    ``chaos`` whose API and Gitea channels route to ``chaos-saga``. On the way out every
    process it started is stopped and the database dropped; when ``failed()`` the logs'
    tails are printed (the logs stay in ``log_dir``)."""
    name = f"chaos_{std_secrets.token_hex(5)}"
    admin = create_engine(services.postgres.admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    services.redis.flushall()
    settings = Settings(
        database_url=services.postgres.url(name),
        broker_url=services.redis.url,
        secret_key=os.environ.get("AWOOOP_SECRET_KEY") or secrets.new_encryption_key(),
    )
    project = cli.create_project(settings, "chaos")
    engine = db.make_engine(settings.database_url, pool_size=1)
    with db.transaction(engine) as conn:
        projects.set_routes(conn, "chaos", {"api": "chaos-saga", "gitea": "chaos-saga"})
    engine.dispose()

    log_dir = log_dir.with_name(re.sub(r"[^A-Za-z0-9_.-]+", "_", log_dir.name))
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    stack = factory(
        services=services,
        database=name,
        settings=settings,
        project=project,
        recorder=recorder,
        log_dir=log_dir,
        **options,
    )
    try:
        yield stack
    finally:
        stack.stop()
        if failed():
            print(f"\nlogs in {log_dir}\n{stack.logs()}")
        admin.dispose()  # its pooled connection did not survive a scenario that restarted PG
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
