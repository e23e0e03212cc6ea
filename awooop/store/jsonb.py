"""JSONB values as this process writes and reads them.

Writing: a run's journal entries go to the database as one JSON array
(:func:`dumps_entries`). A step's return value is encoded once, when the runner checks that
jsonb can hold it (:class:`JournalEntry`); that text is written as it is, not encoded again
for the step record and for the run's output.

Reading: PostgreSQL stores JSON nested far deeper than Python's decoder (recursive, bounded
by the interpreter's recursion limit) can load. The ingress refuses such events at the door,
but a run that got in anyway — admitted by an older version, or written by hand — must not
crash the code that reads it: the worker fails the run with a clear code (:func:`loads`), and
the read paths show a placeholder (:func:`loads_for_display`). Statements that may read such
a value select it as text and decode it here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
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


class JournalEntry(dict[str, Any]):
    """A journal entry whose ``output`` may already be encoded as JSON text."""

    output_text: tuple[Any, str] | None = None  # (the output, its JSON text)

    def set_output(self, output: Any, text: str) -> None:
        """``output``, with ``text``: its JSON encoding, made when it was checked."""
        self["output"] = output
        self.output_text = (output, text)

    def encoded_output(self, output: Any) -> str | None:
        """The text of ``output`` if it is this entry's output and was encoded, else None."""
        if self.output_text is None or "output" not in self:
            return None
        value, text = self.output_text
        return text if value is output and self["output"] is output else None


def dumps_entries(entries: Iterable[Mapping[str, Any]]) -> str:
    """``entries`` as one JSON array; an output encoded already goes in as its text."""
    return "[" + ", ".join(_entry_text(entry) for entry in entries) + "]"


def dumps_output(output: Any, entries: Iterable[Mapping[str, Any]]) -> str:
    """A run's ``output`` as JSON: the text of the entry it came from, when encoded already."""
    for entry in entries:
        if isinstance(entry, JournalEntry):
            text = entry.encoded_output(output)
            if text is not None:
                return text
    return json.dumps(output)


def _entry_text(entry: Mapping[str, Any]) -> str:
    text = entry.encoded_output(entry.get("output")) if isinstance(entry, JournalEntry) else None
    if text is None:
        return json.dumps(entry)
    # json.dumps cannot take a value's text as it is: the other keys are encoded, and the
    # output's text goes in before the object's closing brace.
    others = json.dumps({key: value for key, value in entry.items() if key != "output"})
    separator = ", " if len(others) > 2 else ""
    return f'{others[:-1]}{separator}"output": {text}}}'
