"""The one way a status list of the package becomes SQL text."""

from __future__ import annotations

import pytest

from awooop.domain import states
from awooop.store.literals import sql_list


def test_a_status_list_becomes_quoted_literals_in_its_order():
    assert sql_list(states.TERMINAL_STATUSES) == "'COMPLETED', 'FAILED', 'CANCELLED'"
    assert sql_list(["PENDING"]) == "'PENDING'"


@pytest.mark.parametrize("values", [[], ["PENDING", "x'); DROP TABLE t; --"], ["two words"]])
def test_anything_but_a_list_of_plain_words_is_refused(values):
    with pytest.raises(ValueError, match="not a list of plain words"):
        sql_list(values)
