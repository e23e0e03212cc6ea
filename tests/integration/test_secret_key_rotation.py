"""Rotating AWOOOP_SECRET_KEY with the real app and PostgreSQL: signed webhooks keep verifying
before, during and after the rotation, a console session outlives it, `awooop secrets
reencrypt` moves every stored secret to the new key (in batches, once), and dropping the old
key too early is refused by `awooop secrets check` — or, deployed anyway, answers 401 and
names the credential in the log."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from sqlalchemy import Engine, text

from awooop import cli, secrets
from awooop.config import Settings
from awooop.outbound.messages import Message
from awooop.store import outbox, sealed
from awooop.web.app import create_app
from tests.support import requests
from tests.support.console import login

NEW = secrets.new_encryption_key()
COOKIE = "awooop_console"
ONE_ROW_AT_A_TIME = ("secrets", "reencrypt", "--batch-size", "1")


@pytest.fixture
def old_key(settings: Settings) -> str:
    """The key the project's secrets were encrypted with (the test deployment's)."""
    (key,) = settings.secret_keys
    return key


def app_with(settings: Settings, engine: Engine, keys: str):
    """A web process started with ``AWOOOP_SECRET_KEY=keys`` (messages are not sent), reading
    the credentials from the database on every request (no auth cache)."""
    configured = dataclasses.replace(settings, secret_key=keys, auth_cache_seconds=0.0)
    return create_app(configured, engine, enqueue=lambda ids: len(ids), notify=lambda ids: 0)


def awooop(monkeypatch, capsys, settings: Settings, keys: str, *argv: str) -> tuple[int, str, str]:
    """Run the ``awooop`` command against the test database with ``AWOOOP_SECRET_KEY=keys``."""
    monkeypatch.setenv("AWOOOP_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("AWOOOP_SECRET_KEY", keys)
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def stored(engine: Engine) -> dict[str, str]:
    """Every encrypted value in the database, by row id."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT credential_id::text, secret_encrypted FROM awooop_credential"
                " WHERE secret_encrypted IS NOT NULL"
                " UNION ALL SELECT message_id::text, sealed FROM awooop_outbox"
                " WHERE sealed IS NOT NULL"
            )
        ).all()
    return {row[0]: row[1] for row in rows}


def gitea_webhook(client, project: dict, delivery: str) -> int:
    path, headers, raw = requests.gitea(project, delivery=delivery)
    return client.post(path, headers=headers, data=raw).status_code


def signed_webhooks(client, project: dict, name: str) -> list[int]:
    """The statuses of one HMAC-signed Gitea delivery and one LINE event (new ids each)."""
    path, headers, raw = requests.line(project, [requests.line_event(f"{name}-line")])
    line = client.post(path, headers=headers, data=raw).status_code
    return [gitea_webhook(client, project, f"{name}-gitea"), line]


def test_signed_webhooks_verify_before_during_and_after_a_key_rotation(
    settings, engine, project, old_key, monkeypatch, capsys, redis_client
):
    # Before: one key, the one the channel secrets are encrypted with
    before = app_with(settings, engine, old_key).test_client()
    assert signed_webhooks(before, project, "before") == [202, 202]

    # During: the new key in front, the old one behind it; secrets still under the old key
    during = app_with(settings, engine, f"{NEW},{old_key}").test_client()
    assert signed_webhooks(during, project, "during") == [202, 202]

    # ...and while `awooop secrets reencrypt` runs, one row per transaction: webhooks
    # arrive before each batch (none, one, then both secrets moved to the new key)
    answered: list[int] = []
    read = sealed.read

    def webhooks_then_read(conn, place, after, limit):
        answered.extend(signed_webhooks(during, project, f"batch-{len(answered)}"))
        return read(conn, place, after, limit)

    monkeypatch.setattr(sealed, "read", webhooks_then_read)
    code, out, err = awooop(monkeypatch, capsys, settings, f"{NEW},{old_key}", *ONE_ROW_AT_A_TIME)
    monkeypatch.setattr(sealed, "read", read)
    assert code == 0, err
    assert (
        "credentials: 2 re-encrypted with the newest key, 0 already were, 0 open with no key"
        in (out)
    )
    # (credentials: three batches, the last one empty; outbox messages: one, empty)
    assert answered == [202] * 8

    # After: the old key dropped
    after = app_with(settings, engine, NEW).test_client()
    assert signed_webhooks(after, project, "after") == [202, 202]


def test_reencrypt_twice_writes_nothing_the_second_time(
    settings, engine, project, old_key, monkeypatch, capsys
):
    keys = f"{NEW},{old_key}"
    assert awooop(monkeypatch, capsys, settings, keys, "secrets", "reencrypt")[0] == 0
    first = stored(engine)

    code, out, _ = awooop(monkeypatch, capsys, settings, keys, "secrets", "reencrypt")

    assert code == 0
    assert "credentials: 0 re-encrypted with the newest key, 2 already were" in out
    assert stored(engine) == first
    assert all(secrets.SecretBox([NEW]).decrypt(value) for value in first.values())


def test_reencrypt_moves_unsent_approval_tokens_too_a_batch_at_a_time(
    settings, engine, project, old_key, monkeypatch, capsys
):
    # Given two unsent messages carrying approval tokens sealed under the old key
    old_box = secrets.SecretBox([old_key])
    messages = [
        Message("telegram", "approval_prompt", {"chat_id": 42}, old_box.encrypt(f"token-{n}"))
        for n in range(2)
    ]
    with engine.connect() as conn:
        message_ids = outbox.add(conn, project["project_id"], None, messages)

    # When every stored secret is re-encrypted, one row per transaction
    code, out, err = awooop(monkeypatch, capsys, settings, f"{NEW},{old_key}", *ONE_ROW_AT_A_TIME)

    # Then the channel secrets and both tokens open with the new key alone
    assert code == 0, err
    assert "credentials: 2 re-encrypted" in out
    assert "outbox messages: 2 re-encrypted" in out
    values = stored(engine)
    new_box = secrets.SecretBox([NEW])
    assert [new_box.decrypt(values[str(m)]) for m in message_ids] == ["token-0", "token-1"]


def test_a_console_session_signed_under_the_old_key_outlives_the_rotation(
    settings, engine, project, old_key
):
    # Given a console session issued while only the old key was configured
    before = app_with(settings, engine, old_key).test_client()
    assert login(before, project["project_id"], project["api_token"]).status_code == 303
    cookie = before.get_cookie(COOKIE, path="/console")
    assert cookie is not None

    # When the web restarts with the new key in front, the session still opens pages
    during = app_with(settings, engine, f"{NEW},{old_key}").test_client()
    during.set_cookie(COOKIE, cookie.value, path="/console")
    assert during.get("/console/runs").status_code == 200
    reissued = during.get_cookie(COOKIE, path="/console")
    assert reissued is not None and reissued.value != cookie.value

    # Then the cookie it sent back is signed with the new key: it works once the old is dropped
    after = app_with(settings, engine, NEW).test_client()
    after.set_cookie(COOKIE, reissued.value, path="/console")
    assert after.get("/console/runs").status_code == 200
    # ...while the cookie signed with the dropped key is no session any more
    stale = app_with(settings, engine, NEW).test_client()
    stale.set_cookie(COOKIE, cookie.value, path="/console")
    assert stale.get("/console/runs").status_code == 303


def test_dropping_the_old_key_before_reencrypt_is_refused_by_the_check(
    settings, engine, project, old_key, monkeypatch, capsys
):
    before = stored(engine)

    code, out, err = awooop(monkeypatch, capsys, settings, NEW, "secrets", "check")

    assert code == 1
    assert "credentials: 0 under the newest key, 0 under an older key, 2 open with no key" in out
    for credential_id in before:
        assert f"credential {credential_id} (project {project['project_id']}," in err
    assert stored(engine) == before


def test_reencrypt_without_the_old_key_names_what_it_cannot_open_and_changes_nothing(
    settings, engine, project, monkeypatch, capsys
):
    before = stored(engine)

    code, _, err = awooop(monkeypatch, capsys, settings, NEW, "secrets", "reencrypt")

    assert code == 1
    assert "2 stored secret(s) open with none of the 1 key(s) in AWOOOP_SECRET_KEY" in err
    assert all(f"credential {credential_id}" in err for credential_id in before)
    assert stored(engine) == before


def test_the_check_passes_once_every_secret_is_under_the_new_key(
    settings, engine, project, old_key, monkeypatch, capsys
):
    assert awooop(monkeypatch, capsys, settings, f"{NEW},{old_key}", "secrets", "reencrypt")[0] == 0

    code, out, _ = awooop(monkeypatch, capsys, settings, NEW, "secrets", "check")

    assert code == 0
    assert "credentials: 2 under the newest key, 0 under an older key, 0 open with no key" in out


def test_a_webhook_whose_secret_no_key_opens_is_401_and_the_credential_is_logged(
    settings, engine, project, caplog, redis_client
):
    # Given the web restarted with the old key dropped before reencrypt (no check run)
    app = app_with(settings, engine, NEW)
    logger = logging.getLogger("awooop.web.ingress")
    logger.addHandler(caplog.handler)  # the awooop loggers do not propagate to the root

    # When a correctly signed Gitea webhook arrives
    try:
        status = gitea_webhook(app.test_client(), project, "lost")
    finally:
        logger.removeHandler(caplog.handler)

    # Then it is refused, and the log names the credential no key opens
    assert status == 401
    (record,) = {r for r in caplog.records if getattr(r, "action", "") == "secret_undecryptable"}
    assert record.credential_id == credential_of(engine, project, "gitea")
    assert record.channel == "gitea"


def credential_of(engine: Engine, project: dict, channel: str) -> str:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT credential_id::text FROM awooop_credential"
                " WHERE project_id = :project_id AND channel_type = :channel"
            ),
            {"project_id": project["project_id"], "channel": channel},
        ).scalar_one()
