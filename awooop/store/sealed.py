"""Statements on the values stored encrypted under ``AWOOOP_SECRET_KEY``.

Two columns hold them: ``awooop_credential.secret_encrypted`` (channel HMAC keys and
outbound provider credentials, revoked ones included) and ``awooop_outbox.sealed`` (an
approval token waiting to be sent; wiped when its message is sent). Re-encryption reads
them in primary-key order, a batch at a time (:func:`read`), and writes each batch back with
one compare-and-set statement (:func:`rewrite`): a value that changed since it was read (a
message sent meanwhile) is left alone, and the statement says which rows it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, TextClause, text

FIRST = "00000000-0000-0000-0000-000000000000"  # before every id (keyset start)


@dataclass(frozen=True)
class Place:
    """A table column that holds encrypted values; ``about`` names what a row is for."""

    name: str
    read: TextClause
    rewrite: TextClause


def _place(name: str, table: str, id_column: str, column: str, about: str) -> Place:
    """The two statements over one table's encrypted column (every name is fixed here)."""
    read = f"""
SELECT {id_column} AS id, project_id, {about} AS about, {column} AS sealed
FROM {table}
WHERE {column} IS NOT NULL AND {id_column} > CAST(:after AS uuid)
ORDER BY {id_column}
LIMIT :limit
"""  # noqa: S608 - names of this module's constants, values bound
    rewrite = f"""
UPDATE {table} AS t SET {column} = v.fresh
FROM unnest(CAST(:ids AS uuid[]), CAST(:olds AS text[]), CAST(:news AS text[]))
     AS v(id, stale, fresh)
WHERE t.{id_column} = v.id AND t.{column} = v.stale
RETURNING t.{id_column}
"""  # noqa: S608 - names of this module's constants, values bound
    return Place(name, text(read), text(rewrite))


CREDENTIALS = _place(
    "credential",
    "awooop_credential",
    "credential_id",
    "secret_encrypted",
    about="coalesce(channel_type, kind)",
)
OUTBOX = _place("outbox message", "awooop_outbox", "message_id", "sealed", about="channel")
PLACES = (CREDENTIALS, OUTBOX)


@dataclass(frozen=True)
class Stored:
    """One encrypted value as read: its row's id, project, what it is for, the token."""

    id: str
    project_id: str
    about: str
    sealed: str


def read(conn: Connection, place: Place, after: str, limit: int) -> list[Stored]:
    """Up to ``limit`` encrypted values of ``place`` whose id follows ``after``, by id."""
    rows = conn.execute(place.read, {"after": after, "limit": limit})
    return [Stored(str(r.id), r.project_id, r.about, r.sealed) for r in rows]


def rewrite(conn: Connection, place: Place, changes: list[tuple[Stored, str]]) -> set[str]:
    """Replace each ``(stored, new)`` value that is still ``stored.sealed``; the ids written."""
    if not changes:
        return set()
    params = {
        "ids": [stored.id for stored, _ in changes],
        "olds": [stored.sealed for stored, _ in changes],
        "news": [new for _, new in changes],
    }
    return {str(r[0]) for r in conn.execute(place.rewrite, params)}
