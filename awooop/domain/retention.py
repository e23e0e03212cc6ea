"""How long finished runs are kept: the per-project override of ``AWOOOP_RUN_RETENTION_DAYS``.

A project may keep its finished runs (COMPLETED / FAILED / CANCELLED) longer or shorter than
the deployment's default, in whole days, stored in ``awooop_project.run_retention_days``
(NULL: the default). The retention sweep never deletes a run before its dedupe row has
expired (``AWOOOP_DEDUPE_TTL_SECONDS``), whatever the retention says: a late duplicate of its
event must still find it.
"""

from __future__ import annotations

from typing import Any

from awooop.domain.numbers import whole_value

# Ten years: long enough for any audit requirement, small enough for every interval type.
MAX_RETENTION_DAYS = 3650


class InvalidRetention(ValueError):
    """A retention is not a whole number of days between 1 and MAX_RETENTION_DAYS."""


def parse_retention_days(value: Any) -> int | None:
    """A validated per-project retention in days; None (the default) for ``None``, ``""``,
    ``"default"`` or ``"none"``."""
    if value is None or (
        isinstance(value, str) and value.strip().lower() in ("", "default", "none")
    ):
        return None
    days = whole_value(value)
    if days is None:
        or_default = " or 'default'" if isinstance(value, str) else ""
        raise InvalidRetention(
            f"retention must be a whole number of days{or_default}, not {value!r}"
        )
    if not 1 <= days <= MAX_RETENTION_DAYS:
        raise InvalidRetention(
            f"retention must be between 1 and {MAX_RETENTION_DAYS} days, not {days}"
        )
    return days
