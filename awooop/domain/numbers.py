"""Numbers typed by a person (CLI arguments, settings, query parameters, headers, form fields),
read as ASCII decimal only."""

from __future__ import annotations

import re
from typing import Any

_WHOLE_NUMBER = re.compile(r"-?([0-9]+)")


def whole_number(text: str, max_digits: int = 18) -> int | None:
    """The whole number ``text`` spells in ASCII digits, with an optional minus sign; None for
    anything else. ``int()`` alone also reads other scripts' digits (``"\\u0665"`` is 5), a
    plus sign, underscores between digits and surrounding whitespace. At most 18 digits by
    default: every such number fits PostgreSQL's bigint."""
    match = _WHOLE_NUMBER.fullmatch(text)
    return int(text) if match and len(match.group(1)) <= max_digits else None


def decimal_number(text: str) -> float | None:
    """The number ``text`` spells in ASCII (``1.5``, ``-2``, ``1e3``, ``inf``); None for
    anything else. ``float()`` alone also reads other scripts' digits and underscores."""
    if not text.isascii() or "_" in text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def whole_value(value: Any) -> int | None:
    """A whole number given as JSON (a number, not a boolean, with no fraction) or as text
    that spells one (surrounding whitespace ignored); None for anything else."""
    if isinstance(value, str):
        return whole_number(value.strip())
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
