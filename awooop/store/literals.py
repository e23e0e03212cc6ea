"""The package's own constants written into SQL text.

A status list (``states.UNFINISHED_STATUSES``, ``states.TERMINAL_STATUSES``, …) goes into a
statement as literals rather than as a bound parameter: the planner then sees the values
(a partial index whose predicate names them is usable, and each value's row estimate comes
from the column's statistics). Values from outside a statement are always bound parameters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def sql_list(values: Iterable[str]) -> str:
    """``'A', 'B'``: for ``column IN (…)`` or ``ARRAY[…]``. Only plain words are accepted
    (statuses, kinds): anything else is a programming error, refused with ValueError."""
    words = list(values)
    refused = [v for v in words if not _WORD.fullmatch(v)]
    if not words or refused:
        raise ValueError(f"not a list of plain words for SQL: {words!r}")
    return ", ".join(f"'{v}'" for v in words)


def status_of_named_row(statuses: Iterable[str], column: str = "status") -> str:
    """The status condition of a statement that names its row (a run, an approval, an
    outbox message) by its key: ``status || '' IN ('A', …)``.

    Compared as text, the status matches no index, so the row is read by its key. Compared
    plainly, a plan made from statistics that count few rows in those statuses (analyzed at
    a quiet moment, or a few hundred among a million finished ones) can read every row in
    them through an index on ``status`` (or one partial to them) and filter for this one: a
    cost that grows with the runs in flight, the approvals pending, the messages unsent."""
    return f"{column} || '' IN ({sql_list(statuses)})"
