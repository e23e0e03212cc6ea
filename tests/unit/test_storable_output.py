"""What a step may hand the journal: JSON that PostgreSQL's jsonb can hold (the runner's
check before a write, so that the database never refuses a step's outcome)."""

from __future__ import annotations

import json

import pytest

from awooop.engine import runner


@pytest.mark.parametrize(
    "output",
    [
        {"text": "a\u0000b"},
        {"key\u0000": 1},
        ["\u0000"],
        {"text": "\\\u0000"},  # an escaped backslash, then the character itself
        {"text": "\ud800"},  # a lone surrogate
    ],
)
def test_text_jsonb_refuses_is_refused_at_the_step(output):
    with pytest.raises(runner._NotStorable):
        runner._json_text(output)


@pytest.mark.parametrize(
    "output",
    [
        {"text": "\\u0000"},  # a backslash and five characters, not the character U+0000
        {"text": "\\\\u0000"},
        {"text": "caf\u00e9 \U0001f600"},
        None,
    ],
)
def test_text_that_merely_looks_like_an_escape_is_stored(output):
    assert json.loads(runner._json_text(output)) == output


def test_an_error_text_spells_out_what_postgresql_cannot_store():
    assert runner._storable("a\u0000b\ud800c") == "a\\u0000b\\ud800c"
    assert runner._storable("caf\u00e9") == "caf\u00e9"
