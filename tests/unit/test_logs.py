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
