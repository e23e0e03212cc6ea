"""A project's quotas and rate limits, as kept in ``awooop_project.limits`` (JSONB).

Every limit is optional; an absent one is no limit and costs nothing at run time.

- ``max_active_runs``: runs not yet COMPLETED / FAILED / CANCELLED (paused and waiting runs
  count). Admission over it is refused (429 ``E-QUOTA-001``) and writes nothing.
- ``ingress_per_minute``: admission requests (all channels together) per fixed one-minute
  window; over it, 429 ``E-RATE-001``.
- ``management_per_minute``: management operations (pause, resume, …) per minute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from awooop.domain.numbers import whole_value

LIMIT_KEYS = ("max_active_runs", "ingress_per_minute", "management_per_minute")
# Large enough for anything real, small enough for every integer column and Redis counter.
MAX_LIMIT = 10_000_000


class InvalidLimit(ValueError):
    """A limit value is not a whole number between 0 and MAX_LIMIT."""


def parse_limit(key: str, value: Any) -> int | None:
    """A validated limit value; None (no limit) for ``None``, ``""`` or ``"none"``."""
    if key not in LIMIT_KEYS:
        raise InvalidLimit(f"unknown limit {key!r}; limits: {', '.join(LIMIT_KEYS)}")
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    number = whole_value(value)
    if number is None:
        raise InvalidLimit(f"{key} must be a whole number, not {value!r}")
    if not 0 <= number <= MAX_LIMIT:
        raise InvalidLimit(f"{key} must be between 0 and {MAX_LIMIT}, not {number}")
    return number


@dataclass(frozen=True)
class ProjectLimits:
    max_active_runs: int | None = None
    ingress_per_minute: int | None = None
    management_per_minute: int | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> ProjectLimits:
        """The limits stored for a project. A value that is not valid (written by hand into
        the table) is treated as no limit rather than failing every request."""
        values: dict[str, int | None] = {}
        for key in LIMIT_KEYS:
            try:
                values[key] = parse_limit(key, (raw or {}).get(key))
            except InvalidLimit:
                values[key] = None
        return cls(**values)
