"""JSON log lines carry the fields bound in the current context."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Callable, Iterator

import pytest

from awooop import logs

log = logging.getLogger("awooop.test_logs")


@pytest.fixture
def lines() -> Iterator[Callable[[], list[dict]]]:
    """What ``log`` wrote, as parsed JSON lines."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    log.removeHandler(handler)


def test_bound_fields_appear_on_every_line_inside_the_block_only(lines):
    with logs.bound(run_id="r-1", project_id="p-1", traceparent=None):
        log.info("inside", extra={"action": "inside"})
    log.info("after", extra={"action": "after"})

    inside, after = lines()
    assert (inside["run_id"], inside["project_id"], inside["action"]) == ("r-1", "p-1", "inside")
    assert "traceparent" not in inside  # None values are left out
    assert "run_id" not in after


def test_nested_bindings_add_fields_and_extra_wins(lines):
    with logs.bound(run_id="outer", worker_id="w"), logs.bound(run_id="inner"):
        log.info("line", extra={"action": "x", "worker_id": "explicit"})

    (line,) = lines()
    assert (line["run_id"], line["worker_id"]) == ("inner", "explicit")
    assert logs.context() == {}


def test_a_binding_in_one_thread_is_not_seen_by_another(lines):
    bound_in_thread = threading.Event()
    release = threading.Event()

    def other() -> None:
        with logs.bound(run_id="thread-run"):
            bound_in_thread.set()
            release.wait(5)

    thread = threading.Thread(target=other)
    thread.start()
    bound_in_thread.wait(5)
    log.info("main", extra={"action": "main"})
    release.set()
    thread.join(5)

    (line,) = lines()
    assert "run_id" not in line


# Celery's own lines about sweep passes (every few seconds) are DEBUG; a run's lines and any
# failure keep their level. The records are made by Celery's own logging calls.


@pytest.fixture
def celery_lines() -> Iterator[Callable[[int], list[tuple[str, str]]]]:
    """(level, message) of what Celery's task loggers emit, given the loggers' level."""
    from celery.app import trace

    logs.quiet_sweep_passes()
    names = ("celery.app.trace", "celery.beat")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    saved = {name: logging.getLogger(name).level for name in names}

    def emit(level: int) -> list[tuple[str, str]]:
        for name in names:
            logging.getLogger(name).setLevel(level)
            logging.getLogger(name).addHandler(handler)
        stream.seek(0)
        stream.truncate()
        context = {"id": "t-1", "runtime": 0.01, "return_value": 0}
        trace.info(trace.LOG_SUCCESS, {**context, "name": "awooop.sweeps.fire_due_timers"})
        trace.info(trace.LOG_SUCCESS, {**context, "name": "awooop.runs.execute"})
        trace.logger.error(
            trace.LOG_FAILURE,
            {"id": "t-2", "name": "awooop.sweeps.reap", "description": "raised", "exc": "boom"},
        )
        beat = logging.getLogger("celery.beat")
        beat.info("Scheduler: Sending due task %s (%s)", "fire-due-timers", "awooop.sweeps.x")
        beat.info("beat: Starting...")
        for name in names:
            logging.getLogger(name).removeHandler(handler)
        return [tuple(line.split(" ", 1)) for line in stream.getvalue().splitlines() if line]

    yield emit
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def test_celerys_lines_about_sweep_passes_are_left_out_at_info(celery_lines):
    assert celery_lines(logging.INFO) == [
        ("INFO", "Task awooop.runs.execute[t-1] succeeded in 0.01s: 0"),
        ("ERROR", "Task awooop.sweeps.reap[t-2] raised: boom"),
        ("INFO", "beat: Starting..."),
    ]


def test_celerys_lines_about_sweep_passes_are_shown_at_debug(celery_lines):
    assert celery_lines(logging.DEBUG) == [
        ("DEBUG", "Task awooop.sweeps.fire_due_timers[t-1] succeeded in 0.01s: 0"),
        ("INFO", "Task awooop.runs.execute[t-1] succeeded in 0.01s: 0"),
        ("ERROR", "Task awooop.sweeps.reap[t-2] raised: boom"),
        ("DEBUG", "Scheduler: Sending due task fire-due-timers (awooop.sweeps.x)"),
        ("INFO", "beat: Starting..."),
    ]
