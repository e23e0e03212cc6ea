"""Whole numbers typed by a person: only ASCII digits, an optional minus sign, at most 18."""

from __future__ import annotations

import pytest

from awooop.domain.numbers import whole_number, whole_value


@pytest.mark.parametrize(
    ("text", "number"), [("0", 0), ("7", 7), ("-5", -5), ("9" * 18, 10**18 - 1)]
)
def test_ascii_digits_are_read(text, number):
    assert whole_number(text) == number


@pytest.mark.parametrize(
    "text", ["", "-", "+5", " 5", "5 ", "5_000", "\u0665", "\uff15", "1.0", "0x1", "9" * 19]
)
def test_anything_int_would_stretch_to_is_refused(text):
    assert whole_number(text) is None


@pytest.mark.parametrize(
    ("value", "number"),
    [(5, 5), (5.0, 5), (" 5 ", 5), ("-1", -1), (True, None), (2.5, None), ([5], None)],
)
def test_json_values(value, number):
    assert whole_value(value) == number
