"""The lease, heartbeat, worker-liveness and reaper settings at production's ratios, scaled
down together, for the suites that run real processes (``tests/chaos``, ``tests/cluster``).

:func:`production_ratios` multiplies every production default by one factor, so what
production relies on between them still holds: the heartbeat renews a lease ten times per
TTL, the reaper passes within a lease, and a worker stops being live (``dead_after``) long
before its leases expire — the dead-worker takeover, not the lease's expiry, is what hands a
stalled or cut-off worker's runs to another, as it does in production.

The defaults are read from :class:`awooop.config.Settings`, the one place they are set.
"""

from __future__ import annotations

from awooop.config import Settings, variable

# The settings scaled together, by field name.
SCALED = (
    "lease_ttl_seconds",
    "heartbeat_interval_seconds",
    "reaper_interval_seconds",
    "worker_liveness_interval_seconds",
    "worker_dead_after_seconds",
    "worker_belief_margin_seconds",
    "worker_watch_interval_seconds",
    # how long a worker's write waits on a row lock (an operator's session) before it retries
    # or gives up: a timing like the others, so a blocked worker frees itself as in production
    "db_lock_timeout_worker_seconds",
    "write_retry_base_seconds",
    "write_retry_max_seconds",
)


def production_defaults() -> dict[str, float]:
    """Each setting of :data:`SCALED` → its production default (seconds)."""
    defaults = Settings()
    return {name: float(getattr(defaults, name)) for name in SCALED}


def production_ratios(scale: float) -> dict[str, str]:
    """The ``AWOOOP_*`` environment of :data:`SCALED`: every production default times
    ``scale`` (0.1: a 30 s lease renewed every 3 s, liveness every 0.5 s, dead after 2 s, the
    reaper every 6 s)."""
    if scale <= 0:
        raise ValueError(f"scale must be positive, not {scale!r}")
    return {
        variable(name): f"{seconds * scale:g}" for name, seconds in production_defaults().items()
    }


def seconds(env: dict[str, str], name: str) -> float:
    """The value of the setting ``name`` (e.g. ``lease_ttl_seconds``) in ``env``."""
    return float(env[variable(name)])
