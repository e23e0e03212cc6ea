"""What `awooop dev up` writes to .awooop/env besides the service URLs (no server started:
both URLs are configured)."""

from __future__ import annotations

from pathlib import Path

from awooop import devstack

CONFIGURED = {
    "AWOOOP_DATABASE_URL": "postgresql+psycopg2://u@127.0.0.1:5432/db",
    "AWOOOP_BROKER_URL": "redis://127.0.0.1:6379/0",
}


def test_dev_up_generates_a_flower_credential_once_and_keeps_it(tmp_path: Path):
    first = devstack.up(tmp_path, dict(CONFIGURED))
    second = devstack.up(tmp_path, dict(CONFIGURED))

    user, _, password = first["FLOWER_BASIC_AUTH"].partition(":")
    assert user == "admin" and len(password) >= 16
    assert second["FLOWER_BASIC_AUTH"] == first["FLOWER_BASIC_AUTH"]
    assert devstack.read_env(tmp_path / "env")["FLOWER_BASIC_AUTH"] == first["FLOWER_BASIC_AUTH"]
    assert (tmp_path / "env").stat().st_mode & 0o077 == 0  # readable by its owner only


def test_dev_up_keeps_a_flower_credential_given_in_the_environment(tmp_path: Path):
    values = devstack.up(tmp_path, {**CONFIGURED, "FLOWER_BASIC_AUTH": "ops:from-env-0123"})

    assert values["FLOWER_BASIC_AUTH"] == "ops:from-env-0123"


def test_dev_up_gives_the_processes_one_metrics_directory(tmp_path: Path):
    values = devstack.up(tmp_path, dict(CONFIGURED))

    assert values["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path / "metrics")
