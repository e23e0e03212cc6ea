"""``awooop outbox``: the outbound messages (notifications, approval prompts), in the
database directly: list them, and send a PARKED one again."""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any

from awooop.cli import _db
from awooop.cli._db import UsageError


def cmd_outbox_list(args: argparse.Namespace) -> int:
    from awooop.store import outbox

    with _db.engine(_db.settings("database_url")).connect() as conn:
        rows = outbox.list_messages(conn, args.status, args.run_id, args.limit)
    print(json.dumps(rows, indent=2, default=str))
    return 0


def cmd_outbox_retry(args: argparse.Namespace) -> int:
    from awooop.store import outbox

    with _db.engine(_db.settings("database_url")).connect() as conn:
        if not outbox.retry_parked(conn, args.message_id):
            raise UsageError(f"no parked message {args.message_id}")
    print(json.dumps({"message_id": str(args.message_id), "status": "PENDING"}))
    return 0


def add_parser(sub: Any) -> None:
    """The ``outbox`` command and its actions, under the ``awooop`` parser's sub-commands."""
    outbox_parser = sub.add_parser("outbox", help="outbound messages: list, retry parked ones")
    outbox_sub = outbox_parser.add_subparsers(
        dest="outbox_command", required=True, metavar="ACTION"
    )
    listing = outbox_sub.add_parser(
        "list", help="recent messages, newest first (PARKED ones never send by themselves)"
    )
    listing.add_argument("--status", choices=["PENDING", "SENT", "PARKED"])
    listing.add_argument("--run-id", type=uuid.UUID, help="only this run's messages")
    listing.add_argument("--limit", type=int, default=100)
    listing.set_defaults(func=cmd_outbox_list)
    retry = outbox_sub.add_parser(
        "retry", help="send a PARKED message again (after fixing its credential or target)"
    )
    retry.add_argument("message_id", type=uuid.UUID)
    retry.set_defaults(func=cmd_outbox_retry)
