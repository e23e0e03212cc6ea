"""`awooop project …` refusing what it cannot do as asked: a token registered twice, a route to
or permission for a workflow only the engine starts, bytes on stdin that are not UTF-8, a
display name the column cannot hold, settings that are unknown or malformed. Each refusal is
one line, exit 2, and writes nothing."""

from __future__ import annotations

import io
import json
import threading

import pytest
from sqlalchemy import text

from awooop import cli, db, secrets
from awooop.store import projects
from tests.support import requests
from tests.support.commands import run
from tests.support.waiting import lock_waiters, until


def stdin_bytes(monkeypatch, raw: bytes) -> None:
    """Standard input as a process gets it: bytes behind a text layer (surrogateescape, as
    under the C locale, so undecodable bytes reach the program instead of failing early)."""
    wrapper = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", errors="surrogateescape")
    monkeypatch.setattr("sys.stdin", wrapper)


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def credentials(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                text(
                    "SELECT project_id, kind, role, secret_hash, revoked_at FROM awooop_credential"
                    " ORDER BY created_at, credential_id"
                )
            )
        ]


def project_row(engine, project_id: str) -> dict:
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT * FROM awooop_project WHERE project_id = :p"), {"p": project_id}
        ).one()
    return dict(row._mapping)


# --- a token registered again -------------------------------------------------------------


@pytest.mark.parametrize("role", ["admin", "viewer", "operator"])
def test_a_token_the_project_already_has_is_not_registered_again(
    capsys, monkeypatch, settings, engine, role
):
    _, out, _ = run(capsys, monkeypatch, settings, "project", "create", "qa1")
    token = json.loads(out)["api_token"]  # an operator token of qa1
    before = credentials(engine)
    stdin_bytes(monkeypatch, token.encode() + b"\n")

    code, out, err = run(
        capsys, monkeypatch, settings, "project", "token", "qa1", "--role", role, "--stdin"
    )

    assert (code, out) == (2, "")
    one_line(err)
    assert "as an active operator token" in err and "awooop project revoke qa1" in err
    assert credentials(engine) == before


def test_a_revoked_token_can_be_registered_again_with_another_role(
    capsys, monkeypatch, settings, engine
):
    _, out, _ = run(capsys, monkeypatch, settings, "project", "create", "qa1")
    token = json.loads(out)["api_token"]
    _, listed, _ = run(capsys, monkeypatch, settings, "project", "credentials", "qa1")
    (old,) = [c for c in json.loads(listed) if c["kind"] == "api_token"]
    run(capsys, monkeypatch, settings, "project", "revoke", "qa1", old["credential_id"])
    stdin_bytes(monkeypatch, token.encode() + b"\n")

    code, out, _ = run(
        capsys, monkeypatch, settings, "project", "token", "qa1", "--role", "admin", "--stdin"
    )

    assert code == 0 and json.loads(out) == {"project_id": "qa1", "role": "admin"}


def test_the_same_token_may_be_registered_in_another_project(capsys, monkeypatch, settings, engine):
    _, out, _ = run(capsys, monkeypatch, settings, "project", "create", "qa1")
    run(capsys, monkeypatch, settings, "project", "create", "qa2")
    stdin_bytes(monkeypatch, json.loads(out)["api_token"].encode() + b"\n")

    code, _, err = run(
        capsys, monkeypatch, settings, "project", "token", "qa2", "--role", "admin", "--stdin"
    )

    assert code == 0, err


def test_two_registrations_of_one_token_at_once_keep_one(settings, engine):
    """The second waits for the first (the project row is locked) and then sees its row."""
    cli.create_project(settings, "qa1")
    token_hash = secrets.sha256_hex("t" * 43)
    outcomes: list[str] = []
    first_inserted = threading.Event()

    def second() -> None:
        first_inserted.wait(10)
        try:
            with db.transaction(engine) as conn:
                projects.add_api_token(conn, "qa1", "viewer", token_hash)
            outcomes.append("second added")
        except projects.TokenRegistered as exc:
            outcomes.append(f"second refused: {exc.role}")

    thread = threading.Thread(target=second)
    thread.start()
    with db.transaction(engine) as conn:
        projects.add_api_token(conn, "qa1", "admin", token_hash)
        first_inserted.set()
        until(lambda: lock_waiters(engine) > 0, 10, "the second registration to wait")
        assert thread.is_alive()
    thread.join(10)

    assert outcomes == ["second refused: admin"]
    with engine.connect() as conn:
        count = conn.execute(
            text("SELECT count(*) FROM awooop_credential WHERE secret_hash = :h"),
            {"h": token_hash},
        ).scalar_one()
    assert count == 1


# --- workflows only the engine starts -------------------------------------------------------


def test_a_route_to_a_workflow_only_the_engine_starts_is_refused(
    capsys, monkeypatch, settings, engine
):
    run(capsys, monkeypatch, settings, "project", "create", "qa2")
    before = project_row(engine, "qa2")

    code, out, err = run(
        capsys, monkeypatch, settings, "project", "routes", "qa2", "api=late-compensation"
    )

    assert (code, out) == (2, "")
    assert "late-compensation" in one_line(err) and "engine" in err
    assert project_row(engine, "qa2") == before


def test_allowing_a_workflow_only_the_engine_starts_is_refused(
    capsys, monkeypatch, settings, engine
):
    run(capsys, monkeypatch, settings, "project", "create", "qa2")
    before = project_row(engine, "qa2")

    code, out, err = run(
        capsys,
        monkeypatch,
        settings,
        "project",
        "workflows",
        "qa2",
        "--allow",
        "noop-3",
        "late-compensation",
    )

    assert (code, out) == (2, "")
    assert "late-compensation" in one_line(err) and "engine" in err
    assert project_row(engine, "qa2") == before


def test_the_store_refuses_them_too(settings, engine):
    cli.create_project(settings, "qa2")
    with engine.connect() as conn:
        with pytest.raises(projects.EngineOnlyWorkflow):
            projects.set_routes(conn, "qa2", {"api": "late-compensation"})
        with pytest.raises(projects.EngineOnlyWorkflow):
            projects.set_allowed_workflows(conn, "qa2", ["late-compensation"], [])


def test_a_client_cannot_start_a_workflow_only_the_engine_starts(settings, engine, client):
    """Not by name, even when an older release let it onto the list, nor through a route."""
    project = cli.create_project(settings, "qa2")
    with engine.connect() as conn:
        conn.execute(
            text(
                "UPDATE awooop_project SET allowed_workflows = '[\"late-compensation\"]',"
                " routes = routes || '{\"api\": \"late-compensation\"}' WHERE project_id = 'qa2'"
            )
        )

    path, headers, raw = requests.api(project, "k1", {"workflow": "late-compensation"})
    named = client.post(path, headers=headers, data=raw)
    path, headers, raw = requests.api(project, "k2", {"summary": "x"})
    routed = client.post(path, headers=headers, data=raw)

    assert named.status_code == 422 and named.json["error"]["code"] == "E-WORKFLOW-001"
    assert routed.status_code == 200 and routed.json["status"] == "ignored", routed.json
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM awooop_run_state")).scalar_one() == 0


# --- stdin that is not UTF-8 ------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("project", "inbound", "qa2", "gitea"),
        ("project", "inbound", "qa2", "telegram"),
        ("project", "outbound", "qa2", "telegram"),
        ("project", "token", "qa2", "--role", "viewer", "--stdin"),
    ],
)
def test_bytes_on_stdin_that_are_not_utf8_are_refused(capsys, monkeypatch, settings, engine, argv):
    run(capsys, monkeypatch, settings, "project", "create", "qa2")
    before = credentials(engine)
    stdin_bytes(monkeypatch, b"\xff\xfe" + b"a" * 40 + b"\n")

    code, out, err = run(capsys, monkeypatch, settings, *argv)

    assert (code, out) == (2, "")
    assert "UTF-8" in one_line(err)
    assert credentials(engine) == before


# --- the display name -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [("x" * 201, "1 to 200 characters"), ("a\x01b", "control"), ("\udcff", "UTF-8")],
)
def test_a_display_name_the_project_cannot_hold_is_refused(
    capsys, monkeypatch, settings, engine, name, message
):
    code, out, err = run(capsys, monkeypatch, settings, "project", "create", "qa3", "--name", name)

    assert (code, out) == (2, "")
    assert message in one_line(err)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM awooop_project")).scalar_one() == 0


def test_a_display_name_of_200_characters_is_kept(capsys, monkeypatch, settings, engine):
    name = "é" * 200

    code, _, err = run(capsys, monkeypatch, settings, "project", "create", "qa3", "--name", name)

    assert code == 0, err
    assert project_row(engine, "qa3")["name"] == name


# --- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("foo=bar", "unknown setting 'foo'; known: actions_url"),
        ("actions_url", "must look like <key>=<value>"),
        ("actions_url=http://x\x01y", "control characters"),
        ("notify_url=https://", "valid http:// or https:// URL"),
        ("gitea_url=https://git example", "valid http:// or https:// URL"),
        ("notify_telegram_chat=abc", "notify_telegram_chat"),
        ("notify_telegram_chat=@ab", "notify_telegram_chat"),
        ("notify_telegram_bot=12ab", "notify_telegram_bot"),
        ("notify_line_to=U1\x7f", "control"),
    ],
)
def test_unknown_or_malformed_settings_are_refused(
    capsys, monkeypatch, settings, engine, setting, message
):
    run(capsys, monkeypatch, settings, "project", "create", "qa2")

    code, out, err = run(
        capsys, monkeypatch, settings, "project", "config", "qa2", "notify_url=https://ok", setting
    )

    assert (code, out) == (2, "")
    assert message in one_line(err)
    assert project_row(engine, "qa2")["config"] == {}


def test_telegram_chats_are_numbers_or_channel_names(capsys, monkeypatch, settings, engine):
    run(capsys, monkeypatch, settings, "project", "create", "qa2")

    codes = [
        run(capsys, monkeypatch, settings, "project", "config", "qa2", setting)[0]
        for setting in (
            "notify_telegram_chat=-1001234567890",
            "notify_telegram_chat=777000111",
            "notify_telegram_chat=@ops_channel",
            "notify_telegram_bot=123456",
            "actions_url=https://automation.example:8443/base",
        )
    ]

    assert codes == [0, 0, 0, 0, 0]
    assert project_row(engine, "qa2")["config"]["notify_telegram_chat"] == "@ops_channel"
