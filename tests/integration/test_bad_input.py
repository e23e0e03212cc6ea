"""Bad input on every channel: the documented 4xx and code, no rows written, no message sent."""

from __future__ import annotations

import io
import json

import pytest

from awooop.channels import base as channel_base
from tests.integration.conftest import queued_messages
from tests.support import db, requests, tokens
from tests.support import runs as test_runs

CHANNELS = ["telegram", "alertmanager", "gitea", "line", "api"]


@pytest.fixture
def assert_nothing_written(engine, redis_client):
    def check() -> None:
        assert db.row_counts(engine) == dict.fromkeys(db.TABLES, 0)
        assert queued_messages(redis_client) == 0

    return check


def expect_error(response, status: int, code: str) -> None:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.json == {"error": {"code": code, "message": response.json["error"]["message"]}}
    assert "Traceback" not in response.get_data(as_text=True)


@pytest.mark.parametrize("channel", CHANNELS)
def test_malformed_json_is_400(client, project, channel, assert_nothing_written):
    path, headers, _ = requests.valid(channel, project)
    raw = b'{"update_id": 1, "broken'

    response = client.post(path, headers=requests.resign(project, path, headers, raw), data=raw)

    expect_error(response, 400, "E-REQUEST-001")
    assert_nothing_written()


@pytest.mark.parametrize("channel", CHANNELS)
def test_absurdly_nested_json_is_400_not_a_crash(client, project, channel, assert_nothing_written):
    path, headers, _ = requests.valid(channel, project)
    raw = b"[" * 20000 + b"]" * 20000

    response = client.post(path, headers=requests.resign(project, path, headers, raw), data=raw)

    expect_error(response, 400, "E-REQUEST-001")
    assert_nothing_written()


@pytest.mark.parametrize("channel", CHANNELS)
def test_json_that_is_not_an_object_is_400(client, project, channel, assert_nothing_written):
    path, headers, _ = requests.valid(channel, project)
    raw = b"[1, 2, 3]"

    response = client.post(path, headers=requests.resign(project, path, headers, raw), data=raw)

    expect_error(response, 400, "E-REQUEST-001")
    assert_nothing_written()


@pytest.mark.parametrize("channel", CHANNELS)
def test_missing_credentials_are_401(client, project, channel, assert_nothing_written):
    path, headers, raw = requests.valid(channel, project)
    del headers[requests.CREDENTIAL_HEADERS[channel]]

    expect_error(client.post(path, headers=headers, data=raw), 401, "E-AUTH-001")
    assert_nothing_written()


@pytest.mark.parametrize("channel", CHANNELS)
def test_wrong_credentials_are_401(client, project, channel, assert_nothing_written):
    path, headers, raw = requests.valid(channel, project)
    header = requests.CREDENTIAL_HEADERS[channel]
    headers[header] = headers[header][:-4] + "AAAA"

    expect_error(client.post(path, headers=headers, data=raw), 401, "E-AUTH-001")
    assert_nothing_written()


@pytest.mark.parametrize("channel", ["gitea", "line"])
def test_signature_of_another_body_is_401(client, project, channel, assert_nothing_written):
    path, headers, raw = requests.valid(channel, project)
    tampered = raw.replace(b"e1", b"e9") if channel == "line" else raw.replace(b"opened", b"closed")

    expect_error(client.post(path, headers=headers, data=tampered), 401, "E-AUTH-001")
    assert_nothing_written()


@pytest.mark.parametrize("channel", CHANNELS)
def test_unknown_project_answers_like_bad_credentials(
    client, project, channel, assert_nothing_written
):
    path, headers, raw = requests.valid(channel, project)
    path = path.replace(project["project_id"], "no-such-project")

    expect_error(client.post(path, headers=headers, data=raw), 401, "E-AUTH-001")
    assert_nothing_written()


@pytest.mark.parametrize("channel", CHANNELS)
def test_oversized_body_is_413_before_parsing(
    client, project, settings, channel, assert_nothing_written
):
    path, headers, _ = requests.valid(channel, project)
    raw = b'{"pad": "' + b"x" * settings.max_body_bytes + b'"}'

    response = client.post(path, headers=requests.resign(project, path, headers, raw), data=raw)

    expect_error(response, 413, "E-REQUEST-002")
    assert_nothing_written()


@pytest.mark.parametrize("channel", CHANNELS)
def test_wrong_content_type_is_415(client, project, channel, assert_nothing_written):
    path, headers, raw = requests.valid(channel, project)
    headers["Content-Type"] = "text/plain"

    expect_error(client.post(path, headers=headers, data=raw), 415, "E-REQUEST-003")
    assert_nothing_written()


@pytest.mark.parametrize(
    ("key", "reason"),
    [(None, "missing"), ("", "empty"), ("k" * 256, "too long"), ("caf\u00e9", "not ascii")],
)
def test_api_without_a_valid_idempotency_key_is_400(
    client, project, key, reason, assert_nothing_written
):
    path, headers, raw = requests.api(project)
    del headers["Idempotency-Key"]
    if key is not None:
        headers["Idempotency-Key"] = key

    expect_error(client.post(path, headers=headers, data=raw), 400, "E-IDEMPOTENT-003")
    assert_nothing_written()


def test_viewer_token_cannot_admit(client, engine, project, assert_nothing_written):
    from awooop import secrets
    from awooop.store import projects

    viewer = secrets.new_token()
    with engine.begin() as conn:
        projects.add_api_token(conn, project["project_id"], "viewer", secrets.sha256_hex(viewer))
    path, headers, raw = requests.api(project)
    headers["Authorization"] = f"Bearer {viewer}"

    expect_error(client.post(path, headers=headers, data=raw), 403, "E-AUTH-002")
    # The credential insert above is the only write.
    assert db.row_counts(engine) == dict.fromkeys(db.TABLES, 0)


@pytest.mark.parametrize(
    ("channel", "payload"),
    [
        ("telegram", {"message": {"text": "no update id"}}),
        ("telegram", {"update_id": "12"}),
        ("alertmanager", {"receiver": "r", "groupKey": "g", "status": "odd", "alerts": []}),
        (
            "alertmanager",
            {"receiver": "r", "groupKey": "g", "status": "firing", "alerts": [{"fingerprint": 1}]},
        ),
        ("line", {"events": [{"type": "message"}]}),
        ("line", {"events": "nope"}),
    ],
)
def test_payload_missing_its_event_id_is_400(
    client, project, channel, payload, assert_nothing_written
):
    path, headers, _ = requests.valid(channel, project)
    raw = requests.body(payload)

    response = client.post(path, headers=requests.resign(project, path, headers, raw), data=raw)

    expect_error(response, 400, "E-REQUEST-001")
    assert_nothing_written()


def test_gitea_without_delivery_header_is_400(client, project, assert_nothing_written):
    path, headers, raw = requests.gitea(project)
    del headers["X-Gitea-Delivery"]

    expect_error(client.post(path, headers=headers, data=raw), 400, "E-REQUEST-001")
    assert_nothing_written()


def test_line_event_ids_repeated_in_one_request_are_400(client, project, assert_nothing_written):
    path, headers, raw = requests.line(
        project, [requests.line_event("x"), requests.line_event("x")]
    )

    expect_error(client.post(path, headers=headers, data=raw), 400, "E-REQUEST-001")
    assert_nothing_written()


def test_line_request_with_one_reused_event_id_writes_nothing(
    client, engine, project, redis_client
):
    path, headers, raw = requests.line(project, [requests.line_event("a")])
    assert client.post(path, headers=headers, data=raw).status_code == 202
    before = db.row_counts(engine)
    assert queued_messages(redis_client) == 1  # sent (the sender is a thread): then dropped
    redis_client.delete("runs")
    changed = requests.line_event("a", text="changed")
    path, headers, raw = requests.line(project, [requests.line_event("b"), changed])

    expect_error(client.post(path, headers=headers, data=raw), 422, "E-IDEMPOTENT-002")
    assert db.row_counts(engine) == before  # event "b" was rolled back with the request
    assert queued_messages(redis_client) == 0


def test_unknown_channel_is_404(client, project, assert_nothing_written):
    path, headers, raw = requests.telegram(project)

    expect_error(
        client.post(path.replace("telegram", "fax"), headers=headers, data=raw),
        404,
        "E-NOT-FOUND-001",
    )
    assert_nothing_written()


def test_get_on_a_webhook_is_405(client, project, assert_nothing_written):
    path, _, _ = requests.telegram(project)

    expect_error(client.get(path), 405, "E-REQUEST-004")
    assert_nothing_written()


def test_database_down_is_503_so_the_provider_retries(settings, project, redis_client):
    from awooop.web.app import create_app

    dead = settings.__class__(
        **{**settings.__dict__, "database_url": "postgresql+psycopg2://x@127.0.0.1:1/none"}
    )
    client = create_app(dead).test_client()
    path, headers, raw = requests.telegram(project)

    response = client.post(path, headers=headers, data=raw)

    expect_error(response, 503, "E-UNAVAILABLE-001")
    assert response.headers["Retry-After"] == "5"
    assert queued_messages(redis_client) == 0


def post_chunked(client, path: str, headers: dict, raw: bytes):
    """A body without Content-Length, framed ``Transfer-Encoding: chunked``, as a server that
    decodes the chunks (gunicorn) hands it to the app: a terminated input stream."""
    return client.post(
        path,
        headers={**headers, "Transfer-Encoding": "chunked"},
        input_stream=io.BytesIO(raw),
        environ_overrides={"wsgi.input_terminated": True},
    )


@pytest.mark.parametrize("channel", CHANNELS)
def test_a_chunked_body_over_the_limit_is_413_even_if_its_start_is_a_complete_event(
    client, project, settings, channel, assert_nothing_written
):
    # Given a valid event padded past the limit with whitespace (still valid JSON), signed
    # over the whole body, sent without a Content-Length
    path, headers, raw = requests.valid(channel, project)
    raw += b" " * settings.max_body_bytes

    response = post_chunked(client, path, requests.resign(project, path, headers, raw), raw)

    expect_error(response, 413, "E-REQUEST-002")
    assert_nothing_written()


def test_a_chunked_body_of_exactly_the_limit_is_admitted(client, engine, project, settings):
    path, headers, raw = requests.api(project)
    raw += b" " * (settings.max_body_bytes - len(raw))

    response = post_chunked(client, path, headers, raw)

    assert response.status_code == 202, response.get_data(as_text=True)
    assert db.count(engine, "awooop_run_state") == 1


def test_a_chunked_management_operation_over_the_limit_is_413_and_changes_nothing(
    client, engine, project, settings
):
    admin = tokens.add(engine, project["project_id"], "admin")
    run_id = test_runs.admit(engine, project["project_id"])
    raw = requests.body({"operation_id": "op-1", "reason": "why"}) + b" " * settings.max_body_bytes
    path = f"/v1/projects/{project['project_id']}/runs/{run_id}/pause"

    response = post_chunked(client, path, tokens.operation(admin), raw)

    expect_error(response, 413, "E-REQUEST-002")
    assert db.run(engine, run_id)["control_state"] == "ACTIVE"


def nested_to(raw: bytes, depth: int) -> bytes:
    """The request's JSON object with a ``note`` of lists making the whole ``depth`` deep
    (the object itself is one level)."""
    payload = json.loads(raw)
    note: list = []
    for _ in range(depth - 2):
        note = [note]
    payload["note"] = note
    return json.dumps(payload).encode()


@pytest.mark.parametrize("depth", [channel_base.MAX_JSON_DEPTH + 1, 950])
@pytest.mark.parametrize("channel", CHANNELS)
def test_json_nested_deeper_than_the_limit_is_400(
    client, project, channel, depth, assert_nothing_written
):
    # ~950 levels is valid JSON Python reads, but the worker's driver could not decode it.
    path, headers, raw = requests.valid(channel, project)
    raw = nested_to(raw, depth)

    response = client.post(path, headers=requests.resign(project, path, headers, raw), data=raw)

    expect_error(response, 400, "E-REQUEST-001")
    assert f"{channel_base.MAX_JSON_DEPTH} levels" in response.json["error"]["message"]
    assert_nothing_written()


@pytest.mark.parametrize("channel", CHANNELS)
def test_json_nested_exactly_to_the_limit_is_admitted(client, engine, project, channel):
    path, headers, raw = requests.valid(channel, project)
    raw = nested_to(raw, channel_base.MAX_JSON_DEPTH)

    response = client.post(path, headers=requests.resign(project, path, headers, raw), data=raw)

    assert response.status_code == 202, response.get_data(as_text=True)
    assert db.count(engine, "awooop_run_state") == 1


def test_a_telegram_bot_id_in_non_ascii_digits_is_400(client, project, assert_nothing_written):
    path, headers, raw = requests.telegram(project)

    response = client.post(path, query_string={"bot_id": "\u0661"}, headers=headers, data=raw)

    expect_error(response, 400, "E-REQUEST-001")
    assert_nothing_written()


def test_a_telegram_bot_id_given_twice_is_400(client, project, assert_nothing_written):
    # Which bot the update came from decides its event key: two values cannot both be it.
    path, headers, raw = requests.telegram(project)

    response = client.post(
        path, query_string=[("bot_id", "1"), ("bot_id", "2")], headers=headers, data=raw
    )

    expect_error(response, 400, "E-REQUEST-001")
    assert "bot_id" in response.json["error"]["message"]
    assert_nothing_written()


@pytest.mark.parametrize("shape", ["x", 5, [1, 2]])
@pytest.mark.parametrize("channel", ["telegram", "line"])
def test_a_button_press_that_is_not_an_object_is_an_ordinary_event_not_a_500(
    client, project, channel, shape
):
    # Found by the hostile-input scenario (tests/chaos/test_hostile_input.py).
    path, headers, _ = requests.valid(channel, project)
    if channel == "telegram":
        payload: dict = {"update_id": 7, "callback_query": shape}
    else:
        payload = {"events": [{"type": "postback", "webhookEventId": "e1", "postback": shape}]}
    raw = json.dumps(payload).encode()

    response = client.post(path, headers=requests.resign(project, path, headers, raw), data=raw)

    assert response.status_code in (200, 202), response.get_data(as_text=True)
    assert "error" not in response.json


@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.parametrize("trick", ["%2f", "/"])
def test_a_path_with_an_empty_segment_is_a_json_404_not_a_redirect(
    client, project, channel, trick, assert_nothing_written
):
    path, headers, raw = requests.valid(channel, project)
    bent = path.replace(
        f"/projects/{project['project_id']}/", f"/projects/{project['project_id']}{trick}/"
    )

    response = client.post(bent, headers=headers, data=raw)

    expect_error(response, 404, "E-NOT-FOUND-001")
    assert_nothing_written()
