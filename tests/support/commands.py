"""The `awooop` command run in the test's own process, against the test's database."""

from __future__ import annotations

from typing import Any

import pytest

from awooop import cli
from awooop.config import Settings


def run(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    settings: Settings,
    *argv: str,
) -> tuple[int, str, str]:
    """`awooop ARGV` with the test database's URL and secret key in the environment: exit
    status, stdout, stderr."""
    monkeypatch.setenv("AWOOOP_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("AWOOOP_SECRET_KEY", settings.secret_key)
    code = cli.main(list(argv))
    captured: Any = capsys.readouterr()
    return code, captured.out, captured.err
