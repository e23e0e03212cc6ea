"""`awooop project …` and `awooop outbox …` against a real database."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from awooop import cli, secrets
from tests.support import requests
from tests.support.commands import run


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


def test_project_routes_with_no_workflow_unroutes_the_channel(
    capsys, monkeypatch, settings, engine, client
):
    project = cli.create_project(settings, "ops")

    code, out, err = run(
        capsys, monkeypatch, settings, "project", "routes", "ops", "telegram=", "api=noop-3"
    )

    assert (code, err) == (0, "")
    routes = json.loads(out)["routes"]
    assert "telegram" not in routes and routes["api"] == "noop-3"
    path, headers, raw = requests.telegram(project)
    answer = client.post(path, headers=headers, data=raw)
    assert (answer.status_code, answer.json["status"]) == (200, "ignored")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM awooop_run_state")).scalar_one() == 0


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
    assert "unknown setting 'colour'; known: actions_url" in bad_key[2]
    assert "http://" in bad_url[2]


def test_project_config_sets_approvers_and_notification_targets(
    capsys, monkeypatch, settings, engine
):
    run(capsys, monkeypatch, settings, "project", "create", "ops")

    code, out, _ = run(
        capsys,
        monkeypatch,
        settings,
        "project",
        "config",
        "ops",
        "approvers=telegram:777,line:U1,telegram:778",
        "notify_url=https://hooks.example/awooop",
        "notify_telegram_chat=-1001",
    )
    bad = run(capsys, monkeypatch, settings, "project", "config", "ops", "approvers=slack:1")

    assert code == 0
    assert json.loads(out)["config"] == {
        "approvers": {"telegram": ["777", "778"], "line": ["U1"]},
        "notify_url": "https://hooks.example/awooop",
        "notify_telegram_chat": "-1001",
    }
    assert bad[0] == 2 and "telegram:<user id>" in bad[2]


def test_project_outbound_stores_the_credential_encrypted_from_stdin(
    capsys, monkeypatch, settings, engine
):
    import io

    run(capsys, monkeypatch, settings, "project", "create", "ops")
    monkeypatch.setattr("sys.stdin", io.StringIO("123456:SECRET-BOT-TOKEN\n"))

    code, out, _ = run(capsys, monkeypatch, settings, "project", "outbound", "ops", "telegram")

    assert code == 0 and json.loads(out) == {"project_id": "ops", "stored": "telegram:bot"}
    with engine.connect() as conn:
        stored = conn.execute(
            text(
                "SELECT secret_encrypted FROM awooop_credential WHERE channel_type = 'telegram:bot'"
            )
        ).scalar_one()
    assert "SECRET-BOT-TOKEN" not in stored
    from awooop.secrets import SecretBox

    assert SecretBox(settings.secret_keys).decrypt(stored) == "123456:SECRET-BOT-TOKEN"
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    empty = run(capsys, monkeypatch, settings, "project", "outbound", "ops", "telegram")
    assert empty[0] == 2 and "standard input" in empty[2]


def test_project_outbound_webhook_generates_or_takes_only_whsec_signing_secrets(
    capsys, monkeypatch, settings, engine
):
    import io

    from standardwebhooks import Webhook

    from awooop.outbound import signing
    from awooop.secrets import SecretBox

    run(capsys, monkeypatch, settings, "project", "create", "ops")
    # A free-form or malformed secret is refused and nothing is stored
    for given in ("not-a-whsec-secret", "whsec_c2hvcnQ="):
        monkeypatch.setattr("sys.stdin", io.StringIO(given + "\n"))
        code, _, err = run(capsys, monkeypatch, settings, "project", "outbound", "ops", "webhook")
        assert code == 2 and "--generate" in err
    # --generate makes one, stores it and prints it once
    code, out, _ = run(
        capsys, monkeypatch, settings, "project", "outbound", "ops", "webhook", "--generate"
    )
    printed = json.loads(out)
    assert code == 0 and printed["stored"] == "webhook:signing"
    assert signing.key_of(printed["secret"]) and Webhook(printed["secret"])
    # ...and a whsec_ secret from standard input is taken as it is
    given = signing.new_secret()
    monkeypatch.setattr("sys.stdin", io.StringIO(given + "\n"))
    code, out, _ = run(capsys, monkeypatch, settings, "project", "outbound", "ops", "webhook")
    assert code == 0 and "secret" not in json.loads(out)
    with engine.connect() as conn:
        stored = conn.execute(
            text(
                "SELECT secret_encrypted FROM awooop_credential"
                " WHERE channel_type = 'webhook:signing' ORDER BY created_at"
            )
        ).scalars()
        box = SecretBox(settings.secret_keys)
        assert [box.decrypt(s) for s in stored] == [printed["secret"], given]
    code, _, err = run(
        capsys, monkeypatch, settings, "project", "outbound", "ops", "telegram", "--generate"
    )
    assert code == 2 and "webhook" in err


def test_outbox_list_and_retry_a_parked_message(capsys, monkeypatch, settings, engine):
    from awooop.outbound.messages import Message
    from awooop.store import outbox

    run(capsys, monkeypatch, settings, "project", "create", "ops")
    with engine.connect() as conn:
        (message_id,) = outbox.add(
            conn, "ops", None, [Message("webhook", "run_outcome", {"url": "http://x", "body": {}})]
        )
        conn.execute(
            text(
                "UPDATE awooop_outbox SET status = 'PARKED', last_error = 'HTTP 500', attempts = 8"
            )
        )

    code, out, _ = run(capsys, monkeypatch, settings, "outbox", "list", "--status", "PARKED")
    assert code == 0
    (listed,) = json.loads(out)
    assert (listed["message_id"], listed["last_error"]) == (str(message_id), "HTTP 500")

    assert run(capsys, monkeypatch, settings, "outbox", "retry", str(message_id))[0] == 0
    again = run(capsys, monkeypatch, settings, "outbox", "retry", str(message_id))
    assert again[0] == 2 and "no parked message" in again[2]
    with engine.connect() as conn:
        row = conn.execute(text("SELECT status, attempts FROM awooop_outbox")).one()
    assert tuple(row) == ("PENDING", 0)


def test_project_limits_sets_and_removes_limits(capsys, monkeypatch, settings, engine):
    run(capsys, monkeypatch, settings, "project", "create", "ops")

    code, out, _ = run(
        capsys,
        monkeypatch,
        settings,
        *("project", "limits", "ops", "max_active_runs=100", "ingress_per_minute=6000"),
    )
    assert code == 0
    assert json.loads(out)["limits"] == {"max_active_runs": 100, "ingress_per_minute": 6000}

    code, out, _ = run(
        capsys, monkeypatch, settings, "project", "limits", "ops", "ingress_per_minute=none"
    )
    assert code == 0
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT limits FROM awooop_project")).scalar_one()
    assert stored == json.loads(out)["limits"] == {"max_active_runs": 100}


@pytest.mark.parametrize(
    "pair", ["max_active_runs=-1", "max_active_runs=lots", "max_runs=5", "max_active_runs"]
)
def test_project_limits_refuses_bad_input_and_writes_nothing(
    capsys, monkeypatch, settings, engine, pair
):
    run(capsys, monkeypatch, settings, "project", "create", "ops")

    code, _, err = run(
        capsys, monkeypatch, settings, "project", "limits", "ops", "management_per_minute=5", pair
    )

    assert code == 2 and err
    with engine.connect() as conn:
        assert conn.execute(text("SELECT limits FROM awooop_project")).scalar_one() == {}


def test_project_retention_sets_and_clears_the_override(capsys, monkeypatch, settings, engine):
    run(capsys, monkeypatch, settings, "project", "create", "ops")

    code, out, _ = run(capsys, monkeypatch, settings, "project", "retention", "ops", "90")
    assert code == 0
    assert json.loads(out) == {"project_id": "ops", "run_retention_days": 90, "effective_days": 90}
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT run_retention_days FROM awooop_project")).scalar_one()
    assert stored == 90

    # Shorter than the dedupe TTL (7 days): runs are kept until their dedupe rows expire.
    code, out, _ = run(capsys, monkeypatch, settings, "project", "retention", "ops", "2")
    assert (code, json.loads(out)["effective_days"]) == (0, 7)
    assert '"effective_days": 7\n' in out  # whole days print as whole numbers, not 7.0

    code, out, _ = run(capsys, monkeypatch, settings, "project", "retention", "ops", "default")
    assert code == 0
    assert json.loads(out) == {
        "project_id": "ops",
        "run_retention_days": None,
        "effective_days": 30,
    }
    assert '"effective_days": 30\n' in out
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT run_retention_days FROM awooop_project")).scalar_one()
    assert stored is None


@pytest.mark.parametrize("days", ["0", "3651", "ninety"])
def test_project_retention_refuses_bad_input_and_writes_nothing(
    capsys, monkeypatch, settings, engine, days
):
    run(capsys, monkeypatch, settings, "project", "create", "ops")
    run(capsys, monkeypatch, settings, "project", "retention", "ops", "90")

    code, _, err = run(capsys, monkeypatch, settings, "project", "retention", "ops", days)

    assert code == 2 and "retention must be" in err
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT run_retention_days FROM awooop_project")).scalar_one()
    assert stored == 90


def test_project_retention_of_an_unknown_project_is_refused(capsys, monkeypatch, settings, engine):
    code, _, err = run(capsys, monkeypatch, settings, "project", "retention", "nope", "90")
    assert code == 2 and "no project 'nope'" in err


def test_the_database_refuses_a_retention_out_of_range(engine, settings):
    from sqlalchemy.exc import IntegrityError

    cli.create_project(settings, "ops")
    with pytest.raises(IntegrityError), engine.connect() as conn:
        conn.execute(text("UPDATE awooop_project SET run_retention_days = 0"))


def test_project_token_creates_a_token_with_the_role_and_stores_only_its_hash(
    capsys, monkeypatch, settings, engine
):
    run(capsys, monkeypatch, settings, "project", "create", "ops")

    code, out, _ = run(capsys, monkeypatch, settings, "project", "token", "ops", "--role", "viewer")

    assert code == 0
    token = json.loads(out)["api_token"]
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT role, secret_hash FROM awooop_credential WHERE role = 'viewer'")
        ).all()
    assert [(r.role, r.secret_hash) for r in rows] == [("viewer", secrets.sha256_hex(token))]


def test_credentials_are_listed_without_secrets_and_revoked_by_id(
    capsys, monkeypatch, settings, engine
):
    _, created, _ = run(capsys, monkeypatch, settings, "project", "create", "ops")
    token = json.loads(created)["api_token"]

    code, out, _ = run(capsys, monkeypatch, settings, "project", "credentials", "ops")
    listed = json.loads(out)
    assert code == 0 and token not in out
    (api_token,) = [c for c in listed if c["kind"] == "api_token"]
    assert (api_token["role"], api_token["revoked_at"]) == ("operator", None)

    revoked = run(
        capsys, monkeypatch, settings, "project", "revoke", "ops", api_token["credential_id"]
    )
    again = run(
        capsys, monkeypatch, settings, "project", "revoke", "ops", api_token["credential_id"]
    )
    assert revoked[0] == 0 and again[0] == 2 and "no active credential" in again[2]
    with engine.connect() as conn:
        still_active = conn.execute(
            text(
                "SELECT count(*) FROM awooop_credential"
                " WHERE kind = 'api_token' AND revoked_at IS NULL"
            )
        ).scalar_one()
    assert still_active == 0


# --- the checkout's .awooop/env --------------------------------------------------------------


def _bare_checkout(monkeypatch, tmp_path, values: dict[str, str]):
    """A checkout whose .awooop/env holds ``values``, the current directory below it, and no
    AWOOOP_* variable in the environment (a new terminal beside `make run`)."""
    import os

    from awooop import devstack

    for name in list(os.environ):
        if name.startswith("AWOOOP_"):
            monkeypatch.delenv(name)
    (tmp_path / ".awooop").mkdir()
    devstack.write_env(tmp_path / ".awooop" / "env", values)
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path / "docs")
    return tmp_path / ".awooop" / "env"


def test_project_create_finds_the_checkouts_env_file_and_says_so(
    capsys, monkeypatch, settings, engine, tmp_path
):
    env_file = _bare_checkout(
        monkeypatch,
        tmp_path,
        {
            "AWOOOP_DATABASE_URL": settings.database_url,
            "AWOOOP_BROKER_URL": settings.broker_url,
            "AWOOOP_SECRET_KEY": settings.secret_key,
        },
    )

    code = cli.main(["project", "create", "ops"])

    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["project_id"] == "ops"
    assert err == f"awooop: using {env_file} (no database, broker or key in the environment)\n"
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM awooop_project")).scalar_one() == 1


def test_an_explicit_environment_wins_over_the_env_file(
    capsys, monkeypatch, settings, engine, tmp_path
):
    # Given an env file naming a database nobody serves, and the real one in the environment
    _bare_checkout(
        monkeypatch,
        tmp_path,
        {
            "AWOOOP_DATABASE_URL": "postgresql+psycopg2://nobody@127.0.0.1:1/none",
            "AWOOOP_SECRET_KEY": secrets.new_encryption_key(),
        },
    )
    monkeypatch.setenv("AWOOOP_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("AWOOOP_SECRET_KEY", settings.secret_key)

    code = cli.main(["project", "create", "ops"])

    # Then the environment alone is the configuration: the project is in the real database
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert json.loads(out)["project_id"] == "ops"
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM awooop_project")).scalar_one() == 1


def test_a_database_without_tables_says_to_migrate(capsys, monkeypatch, settings, server_url):
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    name = f"awooop_empty_{secrets.new_token(6).lower().replace('-', '_')}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        empty = make_url(settings.database_url).set(database=name)
        monkeypatch.setenv("AWOOOP_DATABASE_URL", empty.render_as_string(hide_password=False))
        monkeypatch.setenv("AWOOOP_SECRET_KEY", settings.secret_key)

        code = cli.main(["project", "create", "ops"])

        assert code == 1
        assert capsys.readouterr().err == (
            "awooop: error: the database has no AwoooP tables: run `awooop migrate` first\n"
        )
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_project_inbound_takes_the_providers_own_secret_and_the_channel_verifies_with_it(
    capsys, monkeypatch, settings, engine, client
):
    """LINE issues a channel's secret itself: AwoooP must verify with that one."""
    import io

    from tests.support import requests as channel_requests

    code, out, _ = run(capsys, monkeypatch, settings, "project", "create", "ops")
    project = json.loads(out)
    line_secret = "8c5e1f0f6a2b4d3c9e7f1a2b3c4d5e6f"  # as LINE's console shows one
    monkeypatch.setattr("sys.stdin", io.StringIO(line_secret + "\n"))

    code, out, _ = run(capsys, monkeypatch, settings, "project", "inbound", "ops", "line")

    assert code == 0 and json.loads(out) == {"project_id": "ops", "stored": "line"}
    signed_by_line = {**project, "secrets": {**project["secrets"], "line": line_secret}}
    path, headers, body = channel_requests.line(
        signed_by_line, [channel_requests.line_event("evt-1")]
    )
    assert client.post(path, headers=headers, data=body).status_code == 202
    with engine.connect() as conn:
        stored = (
            conn.execute(
                text("SELECT secret_encrypted FROM awooop_credential WHERE channel_type = 'line'")
            )
            .scalars()
            .all()
        )
    assert all(line_secret not in value for value in stored)


@pytest.mark.parametrize(
    ("channel", "given", "message"),
    [
        ("line", "", "standard input"),
        ("line", "short", "at least 16 characters"),
        ("telegram", "has spaces in it, sixteen+", "A-Z, a-z, 0-9, _ and -"),
        ("telegram", "x" * 257, "at most 256 characters"),
    ],
)
def test_project_inbound_refuses_a_bad_secret_and_stores_nothing(
    capsys, monkeypatch, settings, engine, channel, given, message
):
    import io

    run(capsys, monkeypatch, settings, "project", "create", "ops")
    before = db_count(engine)
    monkeypatch.setattr("sys.stdin", io.StringIO(given + "\n"))

    code, _, err = run(capsys, monkeypatch, settings, "project", "inbound", "ops", channel)

    assert code == 2 and message in err, err
    assert db_count(engine) == before


def db_count(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM awooop_credential")).scalar_one()
