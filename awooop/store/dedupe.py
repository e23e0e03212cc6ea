"""Statements on ``awooop_channel_event_dedupe`` besides admission."""

from __future__ import annotations

from sqlalchemy import Connection, text

# Oldest first via the created_at index; SKIP LOCKED lets two pruners share the work.
_PRUNE_BATCH = text(
    """
DELETE FROM awooop_channel_event_dedupe
WHERE dedupe_id IN (
    SELECT dedupe_id
    FROM awooop_channel_event_dedupe
    WHERE created_at < now() - make_interval(secs => :ttl)
    ORDER BY created_at
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
)
"""
)


def prune_batch(conn: Connection, ttl_seconds: float, batch_size: int) -> int:
    """Delete up to ``batch_size`` dedupe rows older than the TTL; returns how many."""
    return conn.execute(_PRUNE_BATCH, {"ttl": ttl_seconds, "batch_size": batch_size}).rowcount
