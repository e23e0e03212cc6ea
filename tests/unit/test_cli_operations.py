"""Operating from the command line on the wire: the client's list, history, operation,
approval and workers calls, and `awooop runs list|show|<operation>`, `awooop approvals` and
`awooop workers` — the requests they send and what they print, over a recording transport
(the live web is in tests/e2e/test_client_processes.py)."""

from __future__ import annotations

import functools
import io
import json
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest

from awooop import cli, client
from awooop.cli import output
from tests.support.recording import BASE, RUN_ID, api, awooop, commands_over, run_body

OTHER_ID = "0b7f3c1d-2e10-4b0e-9a43-6f1c5b4e2a55"
PAGE_URL = f"{BASE}/v1/projects/ops/runs"
NOW = datetime(2026, 11, 29, 10, 5, 0, tzinfo=UTC)  # run_body was created 5 minutes before


@pytest.fixture
def wire(monkeypatch):
    """The commands over a recorder (call it with the answers to give), at a fixed now."""
    monkeypatch.setattr(output, "now", lambda: NOW)
    return functools.partial(commands_over, monkeypatch)


def query(request) -> dict[str, list[str]]:
    return parse_qs(urlsplit(request.url).query)


def page(*runs: dict, cursor: str | None = None) -> tuple[int, dict]:
    return 200, {"runs": list(runs), "next_cursor": cursor}


def operated(operation: str = "pause", **extra) -> dict:
    """The API's answer to ``operation`` (a URL segment; the answer names the engine's)."""
    return {
        "run_id": RUN_ID,
        "operation": operation.replace("-", "_"),
        "operation_id": "op-1",
        "applied": True,
        "replayed": False,
        "status": "RUNNING",
        "saga_status": "RUNNING",
        "control_state": "PAUSED",
        "version": 4,
        **extra,
    }


WORKER = {
    "worker_id": "w1:4242:ab12",
    "host": "w1",
    "pid": 4242,
    "started_at": "2026-11-29T09:00:00+00:00",
    "seen_at": "2026-11-29T10:04:58+00:00",
    "seen_seconds_ago": 2.4,
    "judged_dead_at": None,
    "runs_held": 1,
}


# --- the client -------------------------------------------------------------------------------


def test_list_runs_sends_the_filters_as_query_parameters_and_reads_the_page():
    api_client, sent = api(page(run_body(), cursor="c2"))
    filters = client.RunFilters(
        status=("RUNNING", "PENDING"), workflow="alert-triage", created_from="2026-11-29T00:00Z"
    )

    listed = api_client.list_runs(filters, limit=10)

    assert urlsplit(sent.sent[0].url).path == "/v1/projects/ops/runs"
    assert query(sent.sent[0]) == {
        "status": ["RUNNING,PENDING"],
        "workflow": ["alert-triage"],
        "created_from": ["2026-11-29T00:00Z"],
        "limit": ["10"],
    }
    assert [run.run_id for run in listed.runs] == [RUN_ID]
    assert listed.next_cursor == "c2"


def test_iter_runs_follows_the_cursor_with_the_same_filters():
    api_client, sent = api(page(run_body(), cursor="c2"), page(run_body(run_id=OTHER_ID)), page())

    runs = list(api_client.iter_runs(client.RunFilters(saga_status=("COMPENSATING",))))

    assert [run.run_id for run in runs] == [RUN_ID, OTHER_ID]
    assert [query(request) for request in sent.sent] == [
        {"saga_status": ["COMPENSATING"]},
        {"saga_status": ["COMPENSATING"], "cursor": ["c2"]},
    ]


def test_events_reads_every_page_of_the_history():
    first = {"events": [{"seq": 1, "kind": "admitted"}], "next_cursor": "e2"}
    last = {"events": [{"seq": 2, "kind": "claimed"}], "next_cursor": None}
    api_client, sent = api((200, first), (200, last))

    events = api_client.events(RUN_ID)

    assert [event["seq"] for event in events] == [1, 2]
    assert urlsplit(sent.sent[1].url).path == f"/v1/projects/ops/runs/{RUN_ID}/events"
    assert query(sent.sent[1]) == {"cursor": ["e2"]}


def test_operate_posts_the_operation_id_and_reason_with_the_version_as_if_match():
    api_client, sent = api((200, operated("retry-compensation")))

    done = api_client.operate(
        RUN_ID, "retry-compensation", "fixed the API", operation_id="op-1", if_version=3
    )

    request = sent.sent[0]
    assert request.url == f"{PAGE_URL}/{RUN_ID}/retry-compensation"
    assert request.headers["If-Match"] == '"3"'
    assert sent.body() == {"operation_id": "op-1", "reason": "fixed the API"}
    assert (done.applied, done.replayed, done.control_state, done.version) == (
        True,
        False,
        "PAUSED",
        4,
    )


def test_operate_makes_an_operation_id_when_none_is_given_and_sends_no_if_match():
    api_client, sent = api((200, operated()))

    api_client.operate(RUN_ID, "pause")

    assert len(sent.body()["operation_id"]) == 36
    assert "If-Match" not in sent.sent[0].headers


def test_an_operation_the_api_has_not_is_refused_before_any_request():
    api_client, sent = api((200, operated()))

    with pytest.raises(ValueError, match="operation must be one of"):
        api_client.operate(RUN_ID, "manual-close")

    assert sent.sent == []


def test_decide_approval_posts_the_decision_to_the_token():
    api_client, sent = api((200, {"status": "approved", "run_id": RUN_ID}))

    answer = api_client.decide_approval("tok/../x", "approve", actor="alice", comment="ok")

    assert sent.sent[0].url == f"{BASE}/v1/projects/ops/approvals/tok%2F..%2Fx"
    assert sent.body() == {"decision": "approve", "actor": "alice", "comment": "ok"}
    assert answer == {"status": "approved", "run_id": RUN_ID}


def test_workers_reads_the_workers():
    api_client, sent = api((200, {"workers": [WORKER]}))

    (worker,) = api_client.workers()

    assert sent.sent[0].url == f"{BASE}/v1/projects/ops/workers"
    assert (worker.host, worker.pid, worker.runs_held, worker.judged_dead_at) == (
        "w1",
        4242,
        1,
        None,
    )


# --- awooop runs list -----------------------------------------------------------------------


def test_runs_list_prints_a_table_and_names_the_next_pages_cursor(wire, capsys):
    waiting = run_body(
        "WAITING_APPROVAL", run_id=OTHER_ID, current_step="approve",
        created_at="2026-11-29T07:05:00+00:00",
    )  # fmt: skip
    wire(page(run_body(), waiting, cursor="c2"))

    code, out, err = awooop(capsys, "runs", "list", "ops")

    assert code == 0
    assert out.splitlines() == [
        "RUN ID                                STATUS            SAGA              WORKFLOW"
        "         STEP      AGE",
        f"{RUN_ID}  RUNNING           RUNNING           alert-triage v2  diagnose  5m",
        f"{OTHER_ID}  WAITING_APPROVAL  WAITING_APPROVAL  alert-triage v2  approve   3h",
    ]
    assert err == "more runs: add --cursor c2 (or --all)\n"


def test_runs_list_sends_the_filters_given(wire, capsys):
    sent = wire(page())

    code, out, _ = awooop(
        capsys, "runs", "list", "ops", "--status", "RUNNING,PENDING", "--status", "PAUSED",
        "--saga-status", "MANUAL_INTERVENTION", "--workflow", "alert-triage", "--channel",
        "api", "--created-from", "2026-11-29T00:00Z", "--finished-until", "2026-11-30T00:00Z",
        "--failure-code", "E-STEP-001", "--outbox", "PARKED", "--limit", "20",
        "--cursor", "c1",
    )  # fmt: skip

    assert (code, out) == (0, "no runs match\n")
    assert query(sent.sent[0]) == {
        "status": ["RUNNING,PENDING,PAUSED"],
        "saga_status": ["MANUAL_INTERVENTION"],
        "workflow": ["alert-triage"],
        "channel": ["api"],
        "created_from": ["2026-11-29T00:00Z"],
        "finished_until": ["2026-11-30T00:00Z"],
        "failure_code": ["E-STEP-001"],
        "outbox": ["PARKED"],
        "limit": ["20"],
        "cursor": ["c1"],
    }


def test_runs_list_all_follows_the_cursor_and_prints_one_json_page(wire, capsys):
    sent = wire(page(run_body(), cursor="c2"), page(run_body(run_id=OTHER_ID)))

    code, out, err = awooop(capsys, "runs", "list", "ops", "--status", "RUNNING", "--all", "--json")

    assert (code, err) == (0, "")
    listed = json.loads(out)
    assert [run["run_id"] for run in listed["runs"]] == [RUN_ID, OTHER_ID]
    assert listed["next_cursor"] is None
    assert listed["runs"][0]["attempt_count"] == 1  # the API's fields, all of them
    assert query(sent.sent[1]) == {"status": ["RUNNING"], "cursor": ["c2"]}


def test_runs_list_refuses_a_limit_out_of_range_before_any_request(wire, capsys):
    sent = wire(page())

    code, _, err = awooop(capsys, "runs", "list", "ops", "--limit", "500")

    assert code == 2 and "--limit must be from 1 to 200" in err
    assert sent.sent == []


def test_an_unknown_status_is_the_apis_refusal_of_the_input_exit_2(wire, capsys):
    wire((400, {"error": {"code": "E-REQUEST-001", "message": "status 'NOPE' is not one of"}}))

    code, _, err = awooop(capsys, "runs", "list", "ops", "--status", "NOPE")

    assert code == 2
    assert err.startswith("awooop: error: E-REQUEST-001 (HTTP 400): status 'NOPE'")


# --- awooop runs show -----------------------------------------------------------------------

JOURNAL = [
    {
        "step": "diagnose", "phase": "forward", "attempt": 1, "status": "SUCCEEDED",
        "recorded_at": "2026-11-29T10:00:02+00:00", "output": {"disk": 97},
    },
    {
        "step": "restart", "phase": "forward", "attempt": 2, "status": "FAILED",
        "recorded_at": "2026-11-29T10:00:09+00:00", "error": "timeout",
    },
]  # fmt: skip
SHOWN = run_body(
    channel_type="api", direction="FORWARD", control_state="ACTIVE", max_attempts=3,
    updated_at="2026-11-29T10:00:09+00:00", worker_id="w1:4242:ab12",
    lease_until="2026-11-29T10:00:39+00:00", saga_steps=JOURNAL,
)  # fmt: skip


def test_runs_show_prints_the_run_and_its_step_journal(wire, capsys):
    sent = wire((200, SHOWN))

    code, out, _ = awooop(capsys, "runs", "show", "ops", RUN_ID)

    assert code == 0 and len(sent.sent) == 1
    assert out.splitlines() == [
        f"run {RUN_ID} RUNNING (saga RUNNING) alert-triage v2 at step diagnose",
        "  channel api, FORWARD, ACTIVE, attempt 1 of 3, version 3",
        "  created 2026-11-29 10:00:00 UTC, updated 2026-11-29 10:00:09 UTC, finished -",
        "  held by w1:4242:ab12 (lease until 2026-11-29 10:00:39 UTC)",
        "steps (2):",
        "  AT                       PHASE    STEP      OUTCOME    ATTEMPT    ERROR",
        "  2026-11-29 10:00:02 UTC  forward  diagnose  SUCCEEDED  attempt 1",
        "  2026-11-29 10:00:09 UTC  forward  restart   FAILED     attempt 2  timeout",
    ]


EVENTS = [
    {
        "seq": 1, "kind": "transition", "from_status": None, "to_status": "PENDING",
        "trigger": "admission", "trigger_id": None, "actor": None, "detail": None,
        "at": "2026-11-29T10:00:00+00:00",
    },
    {
        "seq": 2, "kind": "operation", "from_status": "RUNNING", "to_status": "RUNNING",
        "trigger": "operator", "trigger_id": "op-1", "actor": "api-token:c1",
        "detail": {"operation": "pause"}, "at": "2026-11-29T10:00:05+00:00",
    },
]  # fmt: skip


def test_runs_show_events_adds_the_history(wire, capsys):
    sent = wire((200, SHOWN), (200, {"events": EVENTS, "next_cursor": None}))

    code, out, _ = awooop(capsys, "runs", "show", "ops", RUN_ID, "--events")

    assert code == 0
    assert sent.sent[1].url == f"{PAGE_URL}/{RUN_ID}/events"
    assert out.splitlines()[-4:] == [
        "events (2):",
        "  SEQ  AT                       KIND        STATUS   TRIGGER    ACTOR         DETAIL",
        "  1    2026-11-29 10:00:00 UTC  transition  PENDING  admission",
        "  2    2026-11-29 10:00:05 UTC  operation   RUNNING  operator   api-token:c1  "
        '{"operation": "pause"}',
    ]


def test_runs_show_json_is_the_apis_run_with_its_events(wire, capsys):
    wire((200, SHOWN), (200, {"events": EVENTS, "next_cursor": None}))

    code, out, _ = awooop(capsys, "runs", "show", "ops", RUN_ID, "--events", "--json")

    shown = json.loads(out)
    assert code == 0
    assert shown["saga_steps"] == JOURNAL and shown["events"] == EVENTS


def test_runs_show_of_a_run_not_started_says_no_step_is_recorded(wire, capsys):
    wire((200, run_body("PENDING", current_step=None, saga_steps=[])))

    _, out, _ = awooop(capsys, "runs", "show", "ops", RUN_ID)

    assert out.splitlines()[-1] == "steps: none recorded yet"


# --- awooop runs cancel|pause|resume|retry-* --------------------------------------------------


def test_an_operation_without_an_id_prints_the_one_it_made_before_it_calls(wire, capsys):
    sent = wire((200, operated()))

    code, out, err = awooop(capsys, "runs", "pause", "ops", RUN_ID, "--reason", "deploy")

    made = sent.body()["operation_id"]
    assert code == 0
    assert sent.sent[0].url == f"{PAGE_URL}/{RUN_ID}/pause"
    assert sent.body() == {"operation_id": made, "reason": "deploy"}
    assert err == f"operation id {made} (to retry: --operation-id {made})\n"
    assert out == f"pause done: run {RUN_ID} RUNNING (saga RUNNING, PAUSED), version 4\n"


@pytest.mark.parametrize(
    "operation", ["cancel", "pause", "resume", "retry-compensation", "retry-resolution"]
)
def test_each_operation_posts_to_its_endpoint_with_the_given_id_and_version(
    wire, capsys, operation
):
    sent = wire((200, operated(operation)))

    code, out, err = awooop(
        capsys, "runs", operation, "ops", RUN_ID, "--reason", "why", "--operation-id", "op-1",
        "--if-version", "3", "--json",
    )  # fmt: skip

    assert (code, err) == (0, "")
    assert sent.sent[0].url == f"{PAGE_URL}/{RUN_ID}/{operation}"
    assert sent.sent[0].headers["If-Match"] == '"3"'
    assert sent.body() == {"operation_id": "op-1", "reason": "why"}
    assert json.loads(out) == operated(operation)


def test_a_replayed_operation_says_it_changed_nothing(wire, capsys):
    wire((200, operated("cancel", applied=False, replayed=True)))

    code, out, _ = awooop(
        capsys, "runs", "cancel", "ops", RUN_ID, "--reason", "x", "--operation-id", "op-1"
    )

    assert code == 0
    assert out.startswith("cancel already done by this operation id (replayed): run ")


def test_a_changed_run_refuses_the_operation_with_exit_1(wire, capsys):
    changed = {"error": {"code": "E-OPERATION-002", "message": "the run changed"}}
    wire((412, changed))

    code, out, err = awooop(
        capsys, "runs", "cancel", "ops", RUN_ID, "--reason", "x", "--if-version", "2",
        "--operation-id", "op-1",
    )  # fmt: skip

    assert (code, out) == (1, "")
    assert err == "awooop: error: E-OPERATION-002 (HTTP 412): the run changed\n"


def test_an_operation_needs_a_reason(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["runs", "cancel", "ops", RUN_ID])

    assert exited.value.code == 2
    assert "--reason" in capsys.readouterr().err


def test_an_operation_id_too_long_is_refused_before_any_request(wire, capsys):
    sent = wire((200, operated()))

    code, _, err = awooop(
        capsys, "runs", "resume", "ops", RUN_ID, "--reason", "x", "--operation-id", "x" * 129
    )

    assert code == 2 and "--operation-id must be 1 to 128 characters" in err
    assert sent.sent == []


# --- awooop approvals -----------------------------------------------------------------------


def test_approvals_list_lists_the_runs_waiting_for_an_approval(wire, capsys):
    waiting = run_body(
        "WAITING_APPROVAL", current_step="approve", updated_at="2026-11-29T10:04:20+00:00"
    )
    sent = wire(page(waiting))

    code, out, _ = awooop(capsys, "approvals", "list", "ops", "--workflow", "alert-triage")

    assert code == 0
    assert query(sent.sent[0]) == {"status": ["WAITING_APPROVAL"], "workflow": ["alert-triage"]}
    assert out.splitlines() == [
        "RUN ID                                WORKFLOW         STEP     WAITING",
        f"{RUN_ID}  alert-triage v2  approve  40s",
    ]


def test_approvals_list_says_when_no_run_waits(wire, capsys):
    wire(page())

    code, out, _ = awooop(capsys, "approvals", "list", "ops")

    assert (code, out) == (0, "no run is waiting for an approval\n")


def test_approvals_decide_posts_the_decision_with_the_actor(wire, capsys):
    sent = wire((200, {"status": "rejected", "run_id": RUN_ID}))

    code, out, _ = awooop(
        capsys, "approvals", "decide", "ops", "T" * 43, "reject", "--actor", "alice",
        "--comment", "not now", "--run-id", RUN_ID,
    )  # fmt: skip

    assert code == 0
    assert sent.sent[0].url == f"{BASE}/v1/projects/ops/approvals/{'T' * 43}"
    assert sent.sent[0].headers["Authorization"] == "Bearer tok"  # the API token, not TOKEN
    assert sent.body() == {
        "decision": "reject", "actor": "alice", "comment": "not now", "run_id": RUN_ID
    }  # fmt: skip
    assert out == f"rejected by alice: run {RUN_ID} moves on\n"


def test_approvals_decide_reads_the_token_from_stdin_for_a_dash(wire, capsys, monkeypatch):
    sent = wire((200, {"status": "approved", "run_id": RUN_ID}))
    monkeypatch.setattr("sys.stdin", io.StringIO("S" * 43 + "\n"))

    code, out, _ = awooop(
        capsys, "approvals", "decide", "ops", "-", "approve", "--actor", "bob", "--json"
    )

    assert code == 0
    assert sent.sent[0].url.endswith(f"/approvals/{'S' * 43}")
    assert sent.sent[0].headers["Authorization"] == "Bearer tok"
    assert json.loads(out) == {"status": "approved", "run_id": RUN_ID}


def test_an_expired_approval_exits_1_with_its_code(wire, capsys):
    wire((410, {"error": {"code": "E-APPROVAL-002", "message": "expired"}}))

    code, _, err = awooop(capsys, "approvals", "decide", "ops", "T" * 43, "approve", "--actor", "a")

    assert code == 1 and "E-APPROVAL-002 (HTTP 410)" in err


def test_a_decision_needs_approve_or_reject(capsys):
    for argv in ([], ["maybe", "--actor", "a"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(["approvals", "decide", "ops", "T" * 43, *argv])
        assert exited.value.code == 2


# --- awooop workers -------------------------------------------------------------------------


def test_workers_prints_a_table_of_the_workers(wire, capsys):
    dead = {
        **WORKER, "worker_id": "w2:7:cd34", "host": "w2", "pid": 7, "seen_seconds_ago": 95.0,
        "judged_dead_at": "2026-11-29T10:04:00+00:00", "runs_held": 0,
    }  # fmt: skip
    sent = wire((200, {"workers": [WORKER, dead]}))

    code, out, _ = awooop(capsys, "workers", "ops")

    assert code == 0 and sent.sent[0].url == f"{BASE}/v1/projects/ops/workers"
    assert out.splitlines() == [
        "WORKER        HOST  PID   LAST BEAT             RUNS HELD  STARTED",
        "w1:4242:ab12  w1    4242  2s ago                1          2026-11-29 09:00:00 UTC",
        "w2:7:cd34     w2    7     95s ago, judged dead  0          2026-11-29 09:00:00 UTC",
    ]


def test_workers_json_prints_every_field(wire, capsys):
    wire((200, {"workers": [WORKER]}))

    code, out, _ = awooop(capsys, "workers", "ops", "--json")

    assert (code, json.loads(out)) == (0, {"workers": [WORKER]})
