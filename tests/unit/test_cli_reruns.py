"""Rerunning and finding runs from the command line, on the wire: the client's rerun calls and
find filters, and `awooop runs rerun` / `runs list --tag` / `runs show` — the requests they
send and what they print, over a recording transport (the live web is in
tests/e2e/test_rerun_processes.py)."""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest

from awooop import client
from awooop.cli import output
from tests.support.recording import BASE, RUN_ID, api, awooop, commands_over, run_body

NEW_ID = "7c1f2a3b-4d5e-4f60-8a9b-0c1d2e3f4a5b"
RUNS_URL = f"{BASE}/v1/projects/ops/runs"
NOW = datetime(2026, 11, 29, 10, 5, 0, tzinfo=UTC)
RERUN = {
    "run_id": NEW_ID,
    "rerun_of": RUN_ID,
    "status": "PENDING",
    "available_at": "2026-11-29T10:05:00+00:00",
}


@pytest.fixture
def wire(monkeypatch):
    monkeypatch.setattr(output, "now", lambda: NOW)
    return functools.partial(commands_over, monkeypatch)


def bulk_answer(**extra) -> dict:
    return {
        "dry_run": False,
        "count": 1,
        "more": False,
        "next_cursor": None,
        "limit": 100,
        "rate": 5.0,
        "runs": [RERUN],
        **extra,
    }


def test_rerun_posts_the_key_and_reason_and_reads_the_new_run():
    api_client, sent = api((202, RERUN))

    done = api_client.rerun(RUN_ID, key="k-1", reason="fixed")

    assert sent.sent[0].url == f"{RUNS_URL}/{RUN_ID}/rerun"
    assert sent.sent[0].headers["Idempotency-Key"] == "k-1"
    assert sent.body() == {"reason": "fixed"}
    assert (done.run_id, done.rerun_of, done.created) == (NEW_ID, RUN_ID, True)


def test_a_duplicate_rerun_reads_as_not_created():
    api_client, _ = api((200, {**RERUN, "code": "E-IDEMPOTENT-001"}))

    assert api_client.rerun(RUN_ID, key="k-1").created is False


def test_rerun_matching_sends_the_filters_as_lists_and_the_bounds():
    api_client, sent = api((202, bulk_answer()))
    filters = client.RunFilters(status=("FAILED",), workflow="wf", tag=("service:db-1",))

    done = api_client.rerun_matching(filters, key="b-1", limit=10, rate=2.5)

    assert sent.sent[0].url == f"{RUNS_URL}/rerun"
    assert sent.sent[0].headers["Idempotency-Key"] == "b-1"
    assert sent.body() == {
        "filters": {"status": ["FAILED"], "workflow": "wf", "tag": ["service:db-1"]},
        "dry_run": False,
        "limit": 10,
        "rate": 2.5,
    }
    assert [r.run_id for r in done.runs] == [NEW_ID]


def test_a_bulk_rerun_needs_a_key_unless_it_is_a_dry_run():
    api_client, sent = api()

    with pytest.raises(ValueError, match="needs a key"):
        api_client.rerun_matching(client.RunFilters(workflow="wf"))

    assert sent.sent == []


def test_list_runs_sends_each_tag_as_its_own_parameter():
    api_client, sent = api((200, {"runs": [], "next_cursor": None}))
    filters = client.RunFilters(
        tag=("service:db-1", "host:a,b"), provider_event_id="e-1", idempotency_key="k"
    )

    api_client.list_runs(filters)

    assert parse_qs(urlsplit(sent.sent[0].url).query) == {
        "tag": ["service:db-1", "host:a,b"],
        "provider_event_id": ["e-1"],
        "idempotency_key": ["k"],
    }


def test_runs_rerun_one_run_prints_the_new_run_and_its_key(wire, capsys):
    sent = wire((202, RERUN))

    code, out, err = awooop(capsys, "runs", "rerun", "ops", RUN_ID, "--reason", "fixed")

    assert code == 0
    key = sent.sent[0].headers["Idempotency-Key"]
    assert f"rerun key {key} (to retry: --key {key})" in err
    assert out == f"run {RUN_ID} rerun as run {NEW_ID} (PENDING)\n"


def test_runs_rerun_json_prints_the_rerun(wire, capsys):
    wire((200, {**RERUN, "code": "E-IDEMPOTENT-001"}))

    code, out, _ = awooop(capsys, "runs", "rerun", "ops", RUN_ID, "--key", "k", "--json")

    assert code == 0
    assert json.loads(out) == {**RERUN, "created": False}


def test_runs_rerun_dry_run_counts_and_lists_the_runs(wire, capsys):
    answer = bulk_answer(dry_run=True, run_ids=[RUN_ID], more=True, next_cursor="c2")
    del answer["runs"]
    sent = wire((200, answer))

    code, out, err = awooop(
        capsys, "runs", "rerun", "ops", "--tag", "service:db-1", "--dry-run", "--rate", "2"
    )

    assert code == 0
    assert "Idempotency-Key" not in sent.sent[0].headers
    assert sent.body() == {"filters": {"tag": ["service:db-1"]}, "dry_run": True, "rate": 2.0}
    assert out.splitlines() == [
        "1 finished run would be rerun, at most 5 a second",
        "RUN ID",
        RUN_ID,
    ]
    assert "more runs match: add --cursor c2" in err


def test_runs_rerun_many_prints_the_new_runs(wire, capsys):
    wire((202, bulk_answer()))

    code, out, _ = awooop(capsys, "runs", "rerun", "ops", "--status", "FAILED", "--key", "b")

    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "rerun 1 run, at most 5 a second"
    assert lines[1].split() == ["RUN", "ID", "RERUN", "OF", "STATUS", "CLAIMABLE", "AT"]
    assert lines[2].split()[:3] == [NEW_ID, RUN_ID, "PENDING"]


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "rerun", "ops"],  # neither a run nor a filter
        ["runs", "rerun", "ops", RUN_ID, "--status", "FAILED"],
        ["runs", "rerun", "ops", RUN_ID, "--dry-run"],
        ["runs", "rerun", "ops", "--status", "FAILED", "--limit", "1001"],
        ["runs", "rerun", "ops", "--status", "FAILED", "--rate", "0"],
        ["runs", "rerun", "ops", "--tag", "no-colon"],
    ],
)
def test_runs_rerun_refuses_bad_usage_before_any_request(wire, capsys, argv):
    sent = wire()

    code, _, err = awooop(capsys, *argv)

    assert code == 2 and err
    assert sent.sent == []


def test_runs_show_prints_the_tags_and_the_rerun_links(wire, capsys):
    shown = run_body(
        "COMPLETED",
        channel_type="api",
        direction="FORWARD",
        control_state="ACTIVE",
        max_attempts=3,
        updated_at="2026-11-29T10:00:09+00:00",
        saga_steps=[],
        tags={"service": "db-1", "host": "x"},
        rerun_of=NEW_ID,
        rerun_key="k-1",
        reruns=[{"run_id": NEW_ID, "status": "PENDING", "created_at": "2026-11-29T10:04:00Z"}],
    )
    wire((200, shown))

    code, out, _ = awooop(capsys, "runs", "show", "ops", RUN_ID)

    assert code == 0
    lines = out.splitlines()
    assert "  tags host=x, service=db-1" in lines
    assert f"  rerun of {NEW_ID} (key k-1)" in lines
    assert "  reruns (1):" in lines
    assert f"    {NEW_ID} PENDING created 2026-11-29 10:04:00 UTC" in lines
