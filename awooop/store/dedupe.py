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


_SEEN = text(
    """
SELECT run_id FROM awooop_channel_event_dedupe
WHERE project_id = :project_id AND channel_type = :channel_type
  AND provider_event_id = :provider_event_id
"""
)

_RECORD = text(
    """
INSERT INTO awooop_channel_event_dedupe
    (project_id, channel_type, provider_event_id, run_id, request_digest)
VALUES (:project_id, :channel_type, :provider_event_id, :run_id, :request_digest)
ON CONFLICT (project_id, channel_type, provider_event_id) DO NOTHING
"""
)


def seen(conn: Connection, project_id: str, channel_type: str, provider_event_id: str) -> bool:
    """Whether this provider event was already taken in (a run or a decision)."""
    params = {
        "project_id": project_id,
        "channel_type": channel_type,
        "provider_event_id": provider_event_id,
    }
    return conn.execute(_SEEN, params).first() is not None


def record(
    conn: Connection,
    project_id: str,
    channel_type: str,
    provider_event_id: str,
    run_id: object,
    request_digest: str,
) -> None:
    """Remember an event that decided an approval (of ``run_id``) rather than start a run."""
    conn.execute(
        _RECORD,
        {
            "project_id": project_id,
            "channel_type": channel_type,
            "provider_event_id": provider_event_id,
            "run_id": run_id,
            "request_digest": request_digest,
        },
    )
