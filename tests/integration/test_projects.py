"""`awooop project create / routes` against a real database."""

from __future__ import annotations

import json

from sqlalchemy import text

from awooop import cli


def run(capsys, monkeypatch, settings, *argv: str):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("AWOOOP_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("AWOOOP_SECRET_KEY", settings.secret_key)
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_project_create_prints_fresh_credentials_and_stores_none_of_them(
    capsys, monkeypatch, settings, engine
):
    code, out, _ = run(capsys, monkeypatch, settings, "project", "create", "ops")

    assert code == 0
    created = json.loads(out)
    assert created["project_id"] == "ops"
    assert set(created["secrets"]) == {"telegram", "alertmanager", "gitea", "line"}
    values = [created["api_token"], *created["secrets"].values()]
    assert len(set(values)) == 5
    with engine.connect() as conn:
        dump = " ".join(str(r) for r in conn.execute(text("SELECT * FROM awooop_credential")))
        routes = conn.execute(text("SELECT routes FROM awooop_project")).scalar_one()
    assert not any(v in dump for v in values)
    assert routes == {c: f"demo-{c}" for c in ("telegram", "alertmanager", "gitea", "line", "api")}


def test_project_create_twice_is_refused(capsys, monkeypatch, settings, engine):
    run(capsys, monkeypatch, settings, "project", "create", "ops")

    code, _, err = run(capsys, monkeypatch, settings, "project", "create", "ops")

    assert code == 2
    assert "already exists" in err


def test_project_routes_changes_only_the_named_channels(capsys, monkeypatch, settings, engine):
    run(capsys, monkeypatch, settings, "project", "create", "ops")

    code, out, _ = run(capsys, monkeypatch, settings, "project", "routes", "ops", "api=noop-3")

    assert code == 0
    routes = json.loads(out)["routes"]
    assert routes["api"] == "noop-3" and routes["telegram"] == "demo-telegram"


def test_project_routes_for_an_unknown_project_is_refused(capsys, monkeypatch, settings, engine):
    code, _, err = run(capsys, monkeypatch, settings, "project", "routes", "nope", "api=noop-3")

    assert code == 2
    assert "no project 'nope'" in err


def test_project_config_sets_the_actions_url(capsys, monkeypatch, settings, engine):
    run(capsys, monkeypatch, settings, "project", "create", "ops")

    code, out, _ = run(
        capsys,
        monkeypatch,
        settings,
        "project",
        "config",
        "ops",
        "actions_url=https://automation.example",
    )

    assert code == 0
    assert json.loads(out)["config"] == {"actions_url": "https://automation.example"}


def test_project_config_refuses_unknown_keys_and_bad_urls(capsys, monkeypatch, settings, engine):
    run(capsys, monkeypatch, settings, "project", "create", "ops")

    bad_key = run(capsys, monkeypatch, settings, "project", "config", "ops", "colour=blue")
    bad_url = run(capsys, monkeypatch, settings, "project", "config", "ops", "actions_url=ftp://x")

    assert (bad_key[0], bad_url[0]) == (2, 2)
    assert "keys: actions_url" in bad_key[2] and "http://" in bad_url[2]
