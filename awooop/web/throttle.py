"""Per-project rate limits for web requests (429 ``E-RATE-001`` with ``Retry-After``)."""

from __future__ import annotations

from awooop import errors
from awooop.web import context

INGRESS = "ingress"
MANAGEMENT = "management"


def check(project_id: str, kind: str, per_minute: int | None) -> None:
    """Count this request against the project's ``kind`` limit; raise when it is used up."""
    decision = context.rate_limiter().hit(project_id, kind, per_minute)
    if not decision.allowed:
        raise errors.RateLimited(
            decision.retry_after,
            f"this project allows {per_minute} {kind} requests a minute; retry later",
        )
