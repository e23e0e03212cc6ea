"""``awooop outbox``: the outbound messages (notifications, approval prompts), in the
database directly: list them, and send a PARKED one again."""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any

from awooop.cli import _db, arguments
from awooop.cli._db import UsageError

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


def cmd_outbox_list(args: argparse.Namespace) -> int:
    from awooop.store import outbox

    if not 1 <= args.limit <= MAX_LIMIT:
        raise UsageError(f"--limit must be from 1 to {MAX_LIMIT}")
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
    outbox_parser = sub.add_parser(
        "outbox",
        help="outbound messages: list, retry parked ones",
        description="The outbound messages (notifications, approval prompts, webhooks), read "
        "and changed in the database directly (AWOOOP_DATABASE_URL): list them, and send a "
        "PARKED one again. Exit status: 0 done; 1 the operation failed (e.g. the database is "
        "unreachable); 2 bad usage or input (e.g. no parked message with that id).",
    )
    outbox_sub = outbox_parser.add_subparsers(
        dest="outbox_command", required=True, metavar="ACTION"
    )
    listing = outbox_sub.add_parser(
        "list",
        help="recent messages, newest first (PARKED ones never send by themselves)",
        description="Lists the outbound messages, newest first, as JSON: id, project, run, "
        "channel, purpose, status, attempts, last error, and when each was created and sent; "
        "no payloads and no secrets. A PENDING message is waiting to be sent (or sent again "
        "after a failure); a PARKED one was given up and never sends by itself: fix "
        "its credential (`awooop project outbound …`) or its target, then `awooop outbox "
        "retry MESSAGE_ID`. Example: awooop outbox list --status PARKED",
    )
    listing.add_argument(
        "--status", choices=["PENDING", "SENT", "PARKED"], help="only messages in this status"
    )
    listing.add_argument("--run-id", type=uuid.UUID, help="only this run's messages")
    listing.add_argument(
        "--limit",
        type=arguments.whole,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"messages at most, 1-{MAX_LIMIT} (default: {DEFAULT_LIMIT})",
    )
    listing.set_defaults(func=cmd_outbox_list)
    retry = outbox_sub.add_parser(
        "retry",
        help="send a PARKED message again (after fixing its credential or target)",
        description="Sends a PARKED message again: it becomes PENDING with its attempts "
        "reset and due now, so the outbox sweep sends it on its next pass. Fix what parked it "
        "first (its last_error in `awooop outbox list --status PARKED`): the credential "
        "(`awooop project outbound …`) or the target. Prints the message id and its new "
        "status as JSON; a message that is not PARKED (or does not exist) is refused with "
        "exit status 2. Example: awooop outbox retry MESSAGE_ID",
    )
    retry.add_argument("message_id", type=uuid.UUID, metavar="MESSAGE_ID")
    retry.set_defaults(func=cmd_outbox_retry)
