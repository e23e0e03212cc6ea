"""Query parameters and opaque cursors of the runs API."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from werkzeug.datastructures import MultiDict

from awooop import errors
from awooop.web import params


def test_a_run_cursor_round_trips_its_keyset_exactly():
    row = {"created_at": datetime(2026, 11, 29, 10, 0, 0, 123456, UTC), "run_id": uuid.uuid4()}

    cursor = params.run_cursor("runs", row)
    position = params.run_position(params.decode_cursor(MultiDict({"cursor": cursor}), "runs"))

    assert position is not None
    assert (position.created_at, position.run_id) == (row["created_at"], row["run_id"])
    assert "=" not in cursor and "/" not in cursor and "+" not in cursor


def test_a_cursor_of_another_list_is_refused():
    cursor = params.encode_cursor("events", {"s": 4})

    with pytest.raises(errors.MalformedRequest):
        params.decode_cursor(MultiDict({"cursor": cursor}), "runs")


@pytest.mark.parametrize("cursor", ["", "!!!", "e30", "x" * 600, "bnVsbA"])
def test_garbage_cursors_are_refused(cursor):
    with pytest.raises(errors.MalformedRequest):
        params.run_position(params.decode_cursor(MultiDict({"cursor": cursor}), "runs"))


@pytest.mark.parametrize("seq", [-1, "3", True, None])
def test_bad_sequence_cursors_are_refused(seq):
    cursor = params.encode_cursor("events", {"s": seq})

    with pytest.raises(errors.MalformedRequest):
        params.seq_position(params.decode_cursor(MultiDict({"cursor": cursor}), "events"))


def test_limit_defaults_and_bounds():
    assert params.limit(MultiDict()) == params.DEFAULT_LIMIT
    assert params.limit(MultiDict({"limit": "200"})) == 200
    for bad in ("0", "201", "1e2", "٣"):
        with pytest.raises(errors.MalformedRequest):
            params.limit(MultiDict({"limit": bad}))


def test_repeated_and_comma_separated_choices_combine():
    args = MultiDict([("status", "PENDING,RUNNING"), ("status", "PENDING")])

    assert params.choices(args, "status", ("PENDING", "RUNNING")) == ("PENDING", "RUNNING")
