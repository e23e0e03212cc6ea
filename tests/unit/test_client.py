"""The Python client and `awooop runs` on the wire: what they send and how they read answers,
over a recording transport (the live web is in tests/e2e/test_client_processes.py)."""

from __future__ import annotations

import functools
import json

import pytest

from awooop import cli, client
from tests.support.recording import (
    BASE,
    RUN_ID,
    api,
    awooop,
    commands_over,
    run_body,
)


def test_start_posts_a_start_request_with_the_key_as_idempotency_key():
    api_client, sent = api((202, {"run_id": RUN_ID, "status": "PENDING"}))

    started = api_client.start("alert-triage", {"host": "db-1"}, key="t-1", version=2)

    request = sent.sent[0]
    assert (request.method, request.url) == ("POST", f"{BASE}/v1/projects/ops/runs")
    assert request.headers["Idempotency-Key"] == "t-1"
    assert request.headers["Authorization"] == "Bearer tok"
    assert sent.body() == {"workflow": "alert-triage", "input": {"host": "db-1"}, "version": 2}
    assert started == client.Started(RUN_ID, "PENDING", created=True)


def test_a_duplicate_start_is_reported_as_not_created():
    api_client, _ = api((200, {"run_id": RUN_ID, "status": "RUNNING", "code": "E-IDEMPOTENT-001"}))

    started = api_client.start("alert-triage", key="t-1")

    assert started.duplicate and started.status == "RUNNING"


def test_an_error_answer_raises_api_error_with_status_code_and_message():
    refused = {"error": {"code": "E-WORKFLOW-001", "message": "not allowed"}}
    api_client, _ = api((422, refused))

    with pytest.raises(client.ApiError) as caught:
        api_client.start("chatops", key="t-1")

    assert (caught.value.status, caught.value.code, caught.value.message) == (
        422,
        "E-WORKFLOW-001",
        "not allowed",
    )


def test_an_error_that_is_not_awooop_json_raises_api_error_without_a_code():
    api_client, _ = api((502, b"<html>Bad Gateway</html>"))

    with pytest.raises(client.ApiError) as caught:
        api_client.get(RUN_ID)

    assert (caught.value.status, caught.value.code) == (502, None)
    assert "Bad Gateway" in caught.value.message


def test_get_reads_the_run():
    api_client, sent = api((200, run_body()))

    run = api_client.get(RUN_ID)

    assert sent.sent[0].url == f"{BASE}/v1/projects/ops/runs/{RUN_ID}"
    assert (run.status, run.workflow_name, run.workflow_version, run.current_step) == (
        "RUNNING",
        "alert-triage",
        2,
        "diagnose",
    )
    assert run.raw["attempt_count"] == 1 and not run.finished


def test_wait_polls_until_the_run_finishes():
    api_client, sent = api((200, run_body()), (200, run_body()), (200, run_body("COMPLETED")))

    run = api_client.wait(RUN_ID, poll=0)

    assert run.status == "COMPLETED" and len(sent.sent) == 3


def test_wait_raises_timeout_error_naming_the_status_it_saw():
    api_client, _ = api((200, run_body()))

    with pytest.raises(TimeoutError, match="still RUNNING \\(step diagnose\\) after 0 s"):
        api_client.wait(RUN_ID, timeout=0, poll=0)


def test_signal_posts_the_payload_with_the_signal_id_as_idempotency_key():
    api_client, sent = api((202, {"status": "delivered"}))

    answer = api_client.signal(RUN_ID, "approved", {"by": "alice"}, signal_id="s-1")

    request = sent.sent[0]
    assert request.url == f"{BASE}/v1/projects/ops/runs/{RUN_ID}/signals/approved"
    assert request.headers["Idempotency-Key"] == "s-1"
    assert sent.body() == {"by": "alice"}
    assert answer == {"status": "delivered"}


def test_a_redelivered_signal_is_an_answer_and_a_finished_run_an_error():
    redelivered = {"status": "delivered", "code": "E-IDEMPOTENT-001"}
    finished = {"error": {"code": "E-OPERATION-001", "message": "finished"}}
    api_client, _ = api((200, redelivered), (409, finished))

    assert api_client.signal(RUN_ID, "go", signal_id="s-1")["code"] == "E-IDEMPOTENT-001"
    with pytest.raises(client.ApiError) as caught:
        api_client.signal(RUN_ID, "go", signal_id="s-1")
    assert caught.value.status == 409


def test_a_name_cannot_reach_another_path():
    api_client, sent = api((202, {}))

    api_client.signal(RUN_ID, "../cancel", signal_id="s-1")

    assert sent.sent[0].url.endswith("/signals/..%2Fcancel")


def test_cancel_posts_an_operation_with_its_reason():
    api_client, sent = api((200, {"applied": True}))

    api_client.cancel(RUN_ID, "wrong host", operation_id="op-1")

    assert sent.sent[0].url == f"{BASE}/v1/projects/ops/runs/{RUN_ID}/cancel"
    assert sent.body() == {"operation_id": "op-1", "reason": "wrong host"}


# --- awooop runs --------------------------------------------------------------------------


@pytest.fixture
def wire(monkeypatch):
    """`awooop runs` over a recorder: call it with the answers to give."""
    return functools.partial(commands_over, monkeypatch)


def test_runs_start_json_prints_the_run_it_started(wire, capsys):
    sent = wire((202, {"run_id": RUN_ID, "status": "PENDING"}))

    code, out, _ = awooop(
        capsys, "runs", "start", "ops", "alert-triage", "--input", '{"host": "db-1"}',
        "--key", "t-1", "--version", "1", "--json",
    )  # fmt: skip

    assert code == 0
    assert json.loads(out) == {"run_id": RUN_ID, "status": "PENDING", "created": True}
    assert sent.body() == {"workflow": "alert-triage", "input": {"host": "db-1"}, "version": 1}


def test_runs_start_wait_prints_the_finished_run_and_fails_unless_it_completed(wire, capsys):
    failed = run_body("FAILED", failure_code="E-STEP-001", failure_reason="boom")
    wire((202, {"run_id": RUN_ID, "status": "PENDING"}), (200, failed))

    code, out, _ = awooop(capsys, "runs", "start", "ops", "alert-triage", "--key", "t", "--wait")

    assert code == 1
    assert out.splitlines() == [
        f"started run {RUN_ID} (PENDING)",
        f"run {RUN_ID} FAILED (saga FAILED) alert-triage v2",
        "  failure E-STEP-001: boom",
    ]


def test_runs_get_prints_one_line_for_people(wire, capsys):
    wire((200, run_body()))

    code, out, _ = awooop(capsys, "runs", "get", "ops", RUN_ID)

    assert code == 0
    assert out == f"run {RUN_ID} RUNNING (saga RUNNING) alert-triage v2 at step diagnose\n"


def test_an_api_error_exits_1_with_its_code(wire, capsys):
    wire((403, {"error": {"code": "E-AUTH-002", "message": "role viewer may not"}}))

    code, out, err = awooop(capsys, "runs", "start", "ops", "chatops", "--key", "t")

    assert (code, out) == (1, "")
    assert err == "awooop: error: E-AUTH-002 (HTTP 403): role viewer may not\n"


def test_an_api_refusal_of_the_input_exits_2_with_its_code(wire, capsys):
    wire((422, {"error": {"code": "E-WORKFLOW-001", "message": "not allowed here"}}))

    code, out, err = awooop(capsys, "runs", "start", "ops", "chatops", "--key", "t")

    assert (code, out) == (2, "")
    assert err == "awooop: error: E-WORKFLOW-001 (HTTP 422): not allowed here\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--input", "{nope"], "--input is not JSON"),
        (["--input", "[1, 2]"], "--input must be a JSON object"),
        (["--input", "@/no/such/file"], "--input @/no/such/file: No such file or directory"),
        (["--version", "0"], "--version must be a positive integer"),
        (["--url", "ftp://x"], "must be an http:// or https:// URL"),
    ],
)
def test_bad_input_exits_2_before_any_request(wire, capsys, argv, message):
    sent = wire((202, {}))

    code, _, err = awooop(capsys, "runs", "start", "ops", "wf", "--key", "k", *argv)

    assert code == 2 and message in err
    assert sent.sent == []


def test_a_missing_token_is_a_usage_error(wire, capsys, monkeypatch):
    wire((202, {}))
    monkeypatch.delenv("AWOOOP_API_TOKEN")

    code, _, err = awooop(capsys, "runs", "get", "ops", RUN_ID)

    assert code == 2 and "--token or AWOOOP_API_TOKEN" in err


def test_input_can_come_from_a_file(wire, capsys, tmp_path):
    sent = wire((202, {"run_id": RUN_ID, "status": "PENDING"}))
    event = tmp_path / "event.json"
    event.write_text('{"host": "db-2"}')

    awooop(capsys, "runs", "start", "ops", "wf", "--key", "k", "--input", f"@{event}")

    assert sent.body()["input"] == {"host": "db-2"}


def test_a_missing_key_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["runs", "start", "ops", "wf"])

    assert exited.value.code == 2
    assert "--key" in capsys.readouterr().err
