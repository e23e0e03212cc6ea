"""Run tags: ``key=value`` pairs a step sets with ``ctx.tag(...)`` so that people can find
the run later (``awooop runs list --tag service:db-1``).

A run has at most :data:`MAX_TAGS` tags; a key is an identifier of at most
:data:`MAX_KEY_LENGTH` characters (:data:`KEY_PATTERN`), a value a string of at most
:data:`MAX_VALUE_LENGTH` printable characters. Setting a key again replaces its value. The
tags live in the step's journal entry (so they are written with the step's record, under
its lease) and are gathered on the run for the list's filter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MAX_TAGS = 16
MAX_KEY_LENGTH = 64
MAX_VALUE_LENGTH = 256
KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
_KEY = re.compile(KEY_PATTERN)


class TagError(ValueError):
    """A tag the run cannot have: a key that is not an identifier of 1 to 64 characters, a
    value that is not a string of at most 256 printable characters, or more than 16 tags on
    the run. Raised by ``ctx.tag`` in the step; not retried (the same call would fail the
    same way)."""


def key_problem(key: Any) -> str | None:
    """Why ``key`` cannot be a tag key, or None."""
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_LENGTH or not _KEY.match(key):
        return (
            f"tag key {str(key)[:80]!r} must be 1 to {MAX_KEY_LENGTH} characters: a letter "
            "or _, then letters, digits, _, . or -"
        )
    return None


def value_problem(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be the value of tag ``key``, or None. Printable excludes what
    PostgreSQL cannot store (U+0000, a lone surrogate) and line breaks."""
    if not isinstance(value, str) or len(value) > MAX_VALUE_LENGTH or not value.isprintable():
        return (
            f"tag {key}: the value must be a string of at most {MAX_VALUE_LENGTH} "
            "printable characters"
        )
    return None


def checked(new: Mapping[str, Any], existing: Mapping[str, str]) -> dict[str, str]:
    """``new`` validated against the run's ``existing`` tags; :class:`TagError` if a key or
    value is refused or the run would have more than :data:`MAX_TAGS`."""
    for key, value in new.items():
        problem = key_problem(key) or value_problem(key, value)
        if problem:
            raise TagError(problem)
    total = len({*existing, *new})
    if total > MAX_TAGS:
        raise TagError(f"a run has at most {MAX_TAGS} tags; this would make {total}")
    return dict(new)


def of_journal(journal: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The run's tags: every journal entry's ``tags`` in order, a later value replacing an
    earlier one (what the run row's ``tags`` column holds)."""
    tags: dict[str, str] = {}
    for entry in journal:
        given = entry.get("tags")
        if isinstance(given, dict):
            tags.update(given)
    return tags
