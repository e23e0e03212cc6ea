"""``awooop secrets``: the stored secrets and ``AWOOOP_SECRET_KEY``'s keys (key rotation).

``check`` says, without writing, how many stored secrets each place holds under the newest
key and under an older one, and refuses (exit 1) when one opens with none of the keys:
run it with the key list you are about to deploy. ``reencrypt`` re-encrypts every stored
secret an older key opens with the newest one (:mod:`awooop.engine.rekey`), in batches, and
can be run again at any time. Exit status: 0 done; 1 a stored secret opens with none of the
configured keys (each is named; nothing is written for it) or the database failed; 2 bad
usage or configuration.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from awooop.cli import _db, arguments
from awooop.engine import rekey
from awooop.secrets import SecretBox


def add_parser(sub: Any) -> None:
    """The ``secrets`` command and its actions, under the ``awooop`` parser's sub-commands."""
    parser = sub.add_parser(
        "secrets",
        help="stored secrets and AWOOOP_SECRET_KEY's keys: check, reencrypt (key rotation)",
        description="AWOOOP_SECRET_KEY holds comma-separated keys, newest first: the newest "
        "encrypts, every key decrypts. After putting a new key in front and restarting, "
        "`reencrypt` moves every stored secret to it; `check` with the list you mean to "
        "deploy tells whether an older key can be dropped.",
    )
    actions = parser.add_subparsers(dest="secrets_command", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check",
        help="count stored secrets by key, writing nothing; exit 1 if a key no longer opens one",
    )
    check.set_defaults(func=cmd_check)
    reencrypt = actions.add_parser(
        "reencrypt",
        help="re-encrypt every stored secret with the newest key (safe to run again)",
        description="Reads the encrypted channel secrets, provider credentials and unsent "
        "approval tokens a batch at a time (one transaction each) and writes back, with the "
        "newest key, each one an older key opens. Prints counts. A stored secret no key "
        "opens is named and left unchanged, and the command exits 1.",
    )
    reencrypt.add_argument(
        "--batch-size",
        type=arguments.positive_whole,
        default=rekey.DEFAULT_BATCH_SIZE,
        help=f"rows per transaction (default {rekey.DEFAULT_BATCH_SIZE})",
    )
    reencrypt.set_defaults(func=cmd_reencrypt)


def cmd_check(args: argparse.Namespace) -> int:
    return _pass(rekey.DEFAULT_BATCH_SIZE, write=False)


def cmd_reencrypt(args: argparse.Namespace) -> int:
    return _pass(args.batch_size, write=True)


def _pass(batch_size: int, *, write: bool) -> int:
    settings = _db.settings("database_url", "secret_key")
    box = SecretBox(settings.secret_keys)
    engine = _db.engine(settings)
    try:
        found = rekey.run(engine, box, batch_size, write=write)
    finally:
        engine.dispose()
    for counts in found:
        print(_line(counts, write))
    unreadable = [(counts.place, stored) for counts in found for stored in counts.unreadable]
    if not unreadable:
        return 0
    named = "; ".join(
        f"{place} {stored.id} (project {stored.project_id}, {stored.about})"
        for place, stored in unreadable
    )
    keys = len(settings.secret_keys)
    print(
        f"awooop: error: {len(unreadable)} stored secret(s) open with none of the {keys} "
        f"key(s) in AWOOOP_SECRET_KEY and were left unchanged: {named}. Put the key they "
        "were encrypted with back in the list (after the newest) and run again, or revoke "
        "and replace those credentials.",
        file=sys.stderr,
    )
    return 1


def _line(counts: rekey.Counts, write: bool) -> str:
    what = f"{counts.place}s"
    if write:
        line = (
            f"{what}: {counts.resealed} re-encrypted with the newest key, "
            f"{counts.current} already were, {len(counts.unreadable)} open with no key"
        )
        if counts.changed_meanwhile:
            line += f", {counts.changed_meanwhile} changed meanwhile (left as they were)"
        return line
    return (
        f"{what}: {counts.current} under the newest key, {counts.resealed} under an older "
        f"key, {len(counts.unreadable)} open with no key"
    )
