"""A run whose stored JSON this process cannot decode (nested deeper than Python's decoder
goes) fails at once with its own code, and its detail still answers."""

from __future__ import annotations

from sqlalchemy import text

from awooop.engine import runner, sweeps
from tests.support import db, tokens
from tests.support import runs as test_runs

DEPTH = 5000  # PostgreSQL stores it; Python's recursive decoder cannot load it


def _bury(engine, run_id) -> None:
    deep = '{"a": ' * DEPTH + "1" + "}" * DEPTH
    with engine.connect() as conn:
        conn.execute(
            text(
                "UPDATE awooop_run_state SET input = jsonb_set(input, '{event}',"
                " CAST(:deep AS jsonb)) WHERE run_id = :r"
            ),
            {"deep": deep, "r": run_id},
        )


def test_a_run_the_worker_cannot_load_fails_at_once_with_a_clear_code(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    _bury(engine, run_id)

    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED

    # (not SELECT *: the test's own driver could not decode the input either)
    (row,) = db.rows(
        engine,
        "SELECT status, failure_code, failure_reason, lease_until, lease_epoch"
        " FROM awooop_run_state WHERE run_id = :r",
        r=run_id,
    )
    assert (row["status"], row["failure_code"], row["lease_until"]) == ("FAILED", "E-RUN-001", None)
    assert "nested too deeply" in row["failure_reason"]
    assert [e["trigger_id"] for e in db.events(engine, run_id) if e["to_status"] == "FAILED"] == [
        f"unloadable:{row['lease_epoch']}"
    ]
    assert sweeps.reap_once(engine) == []  # nothing left for the reaper


def test_the_detail_of_a_run_too_deep_to_decode_answers_with_a_placeholder(client, engine, project):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    _bury(engine, run_id)
    viewer = tokens.bearer(tokens.add(engine, project["project_id"], "viewer"))

    response = client.get(f"/v1/projects/{project['project_id']}/runs/{run_id}", headers=viewer)

    assert response.status_code == 200
    body = response.get_json()
    assert body["run_id"] == str(run_id)
    assert "undecodable" in body["input"]
