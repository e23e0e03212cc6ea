"""Log lines carry the run's ids and trace context; traceparent handling at ingress."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator

import pytest

from awooop import logs
from awooop.engine import runner
from tests.support import db, requests
from tests.support import runs as test_runs

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def json_lines() -> Iterator[Callable[[], list[dict]]]:
    """Every line the awooop loggers write during the test, parsed."""
    logs.configure()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("awooop")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_worker_log_lines_carry_the_run_ids_and_its_traceparent(
    engine, project, settings, json_lines
):
    project_id = project["project_id"]
    run_id = test_runs.admit(engine, project_id, "test-speaking", traceparent=TRACEPARENT)

    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    lines = {line["action"]: line for line in json_lines() if "action" in line}
    spoke = lines["test_step_spoke"]  # the handler passed no fields itself
    assert spoke["run_id"] == str(run_id)
    assert spoke["project_id"] == project_id
    assert spoke["worker_id"] == db.run(engine, run_id)["worker_id"]
    assert spoke["traceparent"] == TRACEPARENT
    assert lines["run_completed"]["traceparent"] == TRACEPARENT
    assert lines["run_completed"]["workflow"] == "test-speaking"
    assert "run_claimed" not in lines  # one line per segment at INFO: how it ended
    assert logs.context() == {}  # nothing left bound after the run


def test_a_run_admitted_without_traceparent_logs_none(engine, project, settings, json_lines):
    run_id = test_runs.admit(engine, project["project_id"], "test-speaking")

    runner.execute(engine, settings, run_id)

    spoke = next(line for line in json_lines() if line.get("action") == "test_step_spoke")
    assert spoke["run_id"] == str(run_id) and "traceparent" not in spoke


def test_invalid_traceparent_at_ingress_is_ignored_not_refused(client, engine, project):
    path, headers, body = requests.api(project, key="bad-trace")

    response = client.post(path, headers={**headers, "traceparent": "00-xyz"}, data=body)

    assert response.status_code == 202
    assert db.run(engine, response.json["run_id"])["traceparent"] is None
