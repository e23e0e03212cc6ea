"""What the database says about its replication: whether it is a standby, the standbys
streaming from it and which of them commits wait for, and how its commits wait.

Read once when a process starts (:mod:`awooop.failover`); nothing here writes. Every column
of ``pg_stat_replication`` but the process id is NULL for a role that is neither a superuser
nor a member of ``pg_read_all_stats`` (``pg_monitor`` includes it): :attr:`Standby.sync_state`
is None then, and the caller says it could not tell.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

_SERVER = text(
    "SELECT pg_is_in_recovery() AS in_recovery,"
    " current_setting('synchronous_standby_names') AS standby_names,"
    " current_setting('synchronous_commit') AS synchronous_commit"
)

# Physical standbys only: a logical replication sender (a subscription, a change-data-capture
# connector) is never promoted, so it cannot take committed transactions away with it.
_STANDBYS = text(
    """
SELECT r.application_name, r.sync_state
FROM pg_stat_replication r
WHERE NOT EXISTS (
    SELECT 1 FROM pg_replication_slots s WHERE s.active_pid = r.pid AND s.slot_type = 'logical'
)
ORDER BY r.application_name
"""
)


@dataclass(frozen=True)
class Standby:
    """A standby streaming from the database: its ``application_name`` and its
    ``sync_state`` (``async``, ``potential``, ``sync`` or ``quorum``; None when the role may
    not read it)."""

    name: str | None
    sync_state: str | None


@dataclass(frozen=True)
class Replication:
    """The database's side of replication, as one session sees it."""

    in_recovery: bool
    synchronous_standby_names: str
    synchronous_commit: str
    standbys: tuple[Standby, ...]


def read(conn: Connection) -> Replication:
    """Whether the database is a standby, its ``synchronous_standby_names``, this session's
    ``synchronous_commit`` (the role's and database's settings included), and the physical
    standbys streaming from it."""
    server = conn.execute(_SERVER).one()
    standbys = tuple(
        Standby(row.application_name, row.sync_state) for row in conn.execute(_STANDBYS)
    )
    return Replication(
        in_recovery=bool(server.in_recovery),
        synchronous_standby_names=str(server.standby_names),
        synchronous_commit=str(server.synchronous_commit),
        standbys=standbys,
    )
