"""Decoding JSONB values this process reads, when PostgreSQL can hold more than Python can.

PostgreSQL stores JSON nested far deeper than Python's decoder (recursive, bounded by the
interpreter's recursion limit) can load. The ingress refuses such events at the door, but a
run that got in anyway — admitted by an older version, or written by hand — must not crash
the code that reads it: the worker fails the run with a clear code (:func:`loads`), and the
read paths show a placeholder (:func:`loads_for_display`). Statements that may read such a
value select it as text and decode it here.
"""

from __future__ import annotations

import json
from typing import Any

PLACEHOLDER = {"undecodable": "this value is nested too deeply to be shown"}


class Undecodable(ValueError):
    """A stored JSON value this process cannot decode."""


def loads(text: str | None) -> Any:
    """Decode ``text`` (a JSONB value cast to text); :class:`Undecodable` when Python cannot."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise Undecodable("the stored JSON is nested too deeply to decode") from exc


def loads_for_display(text: str | None) -> Any:
    """Decode ``text``, or a placeholder that says why it cannot be shown."""
    try:
        return loads(text)
    except Undecodable:
        return PLACEHOLDER
