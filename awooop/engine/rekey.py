"""Re-encrypting stored secrets under the newest of ``AWOOOP_SECRET_KEY``'s keys.

:func:`run` walks every encrypted value (:mod:`awooop.store.sealed`) a batch at a time, one
transaction per batch, and writes back each value an older key opened, re-encrypted with
the newest (:meth:`awooop.secrets.SecretBox.reseal`). A value already under the newest key
is not written, so a second run changes nothing; a value no configured key opens is never
written and is reported by row id. With ``write=False`` it only counts (``awooop secrets
check``): what an older key still opens is what would break if that key were dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy import Engine

from awooop import db
from awooop.secrets import SecretBox
from awooop.store import sealed

log = logging.getLogger("awooop.engine.rekey")

DEFAULT_BATCH_SIZE = 500


@dataclass
class Counts:
    """What one pass found in one place (credentials, outbox messages)."""

    place: str
    resealed: int = 0  # under an older key: re-encrypted (or, in a check, would be)
    current: int = 0  # already under the newest key
    changed_meanwhile: int = 0  # rewritten or removed by someone else since it was read
    unreadable: list[sealed.Stored] = field(default_factory=list)  # no key opens it


def run(
    engine: Engine, box: SecretBox, batch_size: int = DEFAULT_BATCH_SIZE, *, write: bool = True
) -> list[Counts]:
    """Every place's counts, in :data:`awooop.store.sealed.PLACES` order."""
    return [_pass(engine, box, place, batch_size, write) for place in sealed.PLACES]


def _pass(engine: Engine, box: SecretBox, place: sealed.Place, size: int, write: bool) -> Counts:
    counts = Counts(place.name)
    after = sealed.FIRST
    while True:
        with db.transaction(engine) as conn:
            batch = sealed.read(conn, place, after, size)
            changes = []
            for stored in batch:
                resealed = box.reseal(stored.sealed)
                if resealed.token is None:
                    counts.unreadable.append(stored)
                elif resealed.changed:
                    changes.append((stored, resealed.token))
                else:
                    counts.current += 1
            written = sealed.rewrite(conn, place, changes) if write else set()
        counts.resealed += len(written) if write else len(changes)
        counts.changed_meanwhile += len(changes) - len(written) if write else 0
        if write and written:
            log.info(
                "stored secrets re-encrypted under the newest key",
                extra={"action": "secrets_reencrypted", "place": place.name, "count": len(written)},
            )
        if len(batch) < size:
            return counts
        after = batch[-1].id
