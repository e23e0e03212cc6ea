"""W3C traceparent parsing: a valid header is kept, anything else is ignored."""

from __future__ import annotations

import pytest

from awooop.tracing import parse_traceparent

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_valid_version_00_header_is_kept_as_it_is():
    assert parse_traceparent(VALID) == VALID


def test_surrounding_spaces_and_tabs_are_allowed():
    assert parse_traceparent(f" \t{VALID} ") == VALID


def test_a_future_version_is_read_as_version_00_and_its_extra_fields_dropped():
    header = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-the-future-holds"

    assert parse_traceparent(header) == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09"


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "garbage",
        VALID.upper(),  # hex must be lowercase
        VALID + "-extra",  # version 00 has exactly four fields
        "ff" + VALID[2:],  # version ff is invalid
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # trace id too short
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",  # flags too short
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + "-x" * 300,  # too long
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n",
    ],
)
def test_invalid_header_is_ignored(header):
    assert parse_traceparent(header) is None
