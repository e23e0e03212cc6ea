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


@pytest.mark.parametrize(
    ("raw", "utc"),
    [
        ("2026-11-29T10:00:00Z", datetime(2026, 11, 29, 10, 0, tzinfo=UTC)),
        ("2026-11-29T10:00:00-23:59", datetime(2026, 11, 30, 9, 59, tzinfo=UTC)),
        ("0001-01-01T00:00:00-22:28", datetime(1, 1, 1, 22, 28, tzinfo=UTC)),
    ],
)
def test_times_are_read_in_utc_whatever_their_offset(raw, utc):
    # PostgreSQL refuses offsets beyond 15:59 that Python accepts.
    value = params.timestamp(MultiDict({"created_from": raw}), "created_from")

    assert value == utc and value.utcoffset().total_seconds() == 0


@pytest.mark.parametrize(
    "raw", ["2026-11-29T10:00:00", "9999-12-31T23:59:59-00:01", "0001-01-01T00:00:00+00:01", "x"]
)
def test_times_without_an_offset_or_out_of_range_in_utc_are_refused(raw):
    with pytest.raises(errors.MalformedRequest):
        params.timestamp(MultiDict({"created_from": raw}), "created_from")


def test_a_forged_run_cursor_with_an_offset_postgresql_refuses_is_read_in_utc():
    run_id = uuid.uuid4()
    cursor = params.encode_cursor("runs", {"t": "2026-11-29T10:00:00+23:00", "r": str(run_id)})

    position = params.run_position(params.decode_cursor(MultiDict({"cursor": cursor}), "runs"))

    assert position == params.RunPosition(datetime(2026, 11, 28, 11, 0, tzinfo=UTC), run_id)


def test_a_plus_sent_unencoded_in_a_time_is_named_in_the_refusal():
    # `created_from=2026-11-29T10:00:00+00:00` typed into a URL: the query string decodes
    # the '+' to a space.
    args = MultiDict({"created_from": "2026-11-29T10:00:00 00:00"})

    with pytest.raises(errors.MalformedRequest) as refused:
        params.timestamp(args, "created_from")

    assert "a '+' in a query string must be sent as %2B" in str(refused.value)


def test_a_time_without_an_offset_is_refused_without_that_hint():
    with pytest.raises(errors.MalformedRequest) as refused:
        params.timestamp(MultiDict({"created_from": "2026-11-29T10:00:00"}), "created_from")

    assert "UTC offset" in str(refused.value) and "%2B" not in str(refused.value)
