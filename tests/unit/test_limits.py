"""Project limits as stored in JSONB and as typed on the command line."""

from __future__ import annotations

import pytest

from awooop.domain.limits import InvalidLimit, ProjectLimits, parse_limit


@pytest.mark.parametrize(
    ("value", "expected"),
    [(5, 5), ("5", 5), (0, 0), ("none", None), ("", None), (None, None), (3.0, 3)],
)
def test_valid_limit_values(value, expected):
    assert parse_limit("max_active_runs", value) == expected


@pytest.mark.parametrize(
    "value",
    # int() alone would read the last three as 5, 5000 and 5
    [-1, "-1", "five", 2.5, True, [1], 10**9, "\u0665", "5_000", "+5"],
)
def test_invalid_limit_values_are_refused(value):
    with pytest.raises(InvalidLimit):
        parse_limit("ingress_per_minute", value)


def test_an_unknown_limit_is_refused():
    with pytest.raises(InvalidLimit, match="unknown limit"):
        parse_limit("max_runs", 5)


def test_stored_limits_are_read_and_bad_values_mean_no_limit():
    limits = ProjectLimits.from_json(
        {"max_active_runs": 10, "ingress_per_minute": "lots", "unrelated": 1}
    )

    assert limits == ProjectLimits(max_active_runs=10)
    assert ProjectLimits.from_json({}) == ProjectLimits.from_json(None) == ProjectLimits()
