"""What `awooop project token --help` says each role may do, against what the API allows
(awooop.web.roles), and how `awooop workflows` shows the workflows only the engine starts."""

from __future__ import annotations

import pytest

from awooop import cli
from awooop.web import roles
from awooop.workflows import registry


def token_help(capsys) -> str:
    with pytest.raises(SystemExit):
        cli.main(["project", "token", "--help"])
    return " ".join(capsys.readouterr().out.split())


def role_said(help_text: str, role: str) -> str:
    """The part of the help about ``role``: from its name to the next role's."""
    start = help_text.index(f"{role} (")
    return help_text[start : help_text.index(")", start)]


def test_the_token_help_says_admins_rerun_in_bulk(capsys):
    assert "admin" in roles.RERUN_MANY and "operator" not in roles.RERUN_MANY
    admin = role_said(token_help(capsys), "admin")

    assert "manual close" in admin and "rerun" in admin


def test_the_token_help_says_what_ingest_tokens_do_besides_admitting_events(capsys):
    assert "ingest" in roles.ADMIT and "ingest" not in roles.READ
    ingest = role_said(token_help(capsys), "ingest")

    assert "admits events" in ingest and "signals" in ingest and "tool results" in ingest
    assert "only" not in ingest.split("admits events")[0]


def test_the_operator_help_says_it_reruns_one_run(capsys):
    assert "operator" in roles.RERUN
    assert "rerun" in role_said(token_help(capsys), "operator")


def test_late_compensation_is_started_by_the_engine_only():
    assert registry.engine_only("late-compensation")
    assert not registry.engine_only("noop-3")
    assert not registry.engine_only("no-such-workflow")


def test_awooop_workflows_marks_the_ones_only_the_engine_starts(capsys, monkeypatch):
    from awooop import secrets

    monkeypatch.setenv("AWOOOP_DATABASE_URL", "postgresql+psycopg2://u@127.0.0.1:1/none")
    monkeypatch.setenv("AWOOOP_SECRET_KEY", secrets.new_encryption_key())
    monkeypatch.delenv("AWOOOP_WORKFLOW_MODULES", raising=False)

    assert cli.main(["workflows"]) == 0
    lines = capsys.readouterr().out.splitlines()

    (late,) = [line for line in lines if line.startswith("late-compensation ")]
    assert "started by the engine only" in late
    assert not any("engine only" in line for line in lines if line is not late)
