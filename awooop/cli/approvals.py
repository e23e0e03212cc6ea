"""``awooop approvals``: the runs waiting for an approval, and deciding one, over the HTTP API.

The API has no list of approvals: an approval's token exists only in the prompt sent to the
approvers (the database keeps its hash), so nothing could show it. ``approvals list`` lists
the runs waiting for one instead — the runs API filtered by ``WAITING_APPROVAL`` — with the
step each waits at; ``approvals decide`` takes the token from the prompt to
``POST …/approvals/{token}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from awooop import client
from awooop.cli import _api, output, runs
from awooop.cli._api import Usage
from awooop.domain import states


def add_parser(sub: Any) -> None:
    """The ``approvals`` command and its actions, under the ``awooop`` parser's sub-commands."""
    approvals = sub.add_parser(
        "approvals",
        help="list the runs waiting for an approval; approve or reject one",
        description=f"{_api.CONNECTION} {_api.EXIT_STATUS}",
    )
    actions = approvals.add_subparsers(dest="approvals_command", required=True, metavar="ACTION")

    listing = actions.add_parser(
        "list",
        help="the runs waiting for an approval (the API lists no approvals as such)",
        description="Lists the project's runs waiting for an approval, newest first: run "
        "id, workflow and version, the step that waits, and how long it has waited (since "
        "the run last changed). The API has no list of approvals: the token to decide with "
        "is only in the prompt the approvers were sent (AwoooP keeps its hash), so this "
        f"lists the runs API filtered by status {states.WAITING_APPROVAL}. Runs waiting for "
        "an operator instead (saga MANUAL_INTERVENTION) are listed by `awooop runs list "
        "PROJECT --saga-status MANUAL_INTERVENTION` and moved on with `awooop runs "
        "retry-resolution` or `retry-compensation`. Role viewer or above.",
    )
    listing.add_argument("project_id", metavar="PROJECT")
    listing.add_argument("--workflow", help="only runs of this workflow")
    listing.add_argument("--all", action="store_true", help="every waiting run, not only 50")
    _api.add_common(listing)
    listing.set_defaults(func=_api.reporting(cmd_list))

    decide = actions.add_parser(
        "decide",
        help="approve or reject an approval with the token from its prompt",
        description="Approves or rejects the approval whose token the prompt carried "
        "(POST …/approvals/{token}); the run moves on at once. TOKEN - reads the token from "
        "stdin (an argument shows in the process list). --actor names the person in the "
        "run's history (default: api-token:ROLE, the API token's role). The approval step "
        "says which roles may decide (operator and admin by default; E-APPROVAL-004 "
        "otherwise); an expired token is refused with E-APPROVAL-002, one already used or "
        "whose run moved on with E-APPROVAL-003. Example: awooop approvals decide ops TOKEN "
        "approve --actor alice --comment 'checked the disk'",
    )
    decide.add_argument("project_id", metavar="PROJECT")
    # Not "token": --token is the API token.
    decide.add_argument("approval_token", metavar="TOKEN", help="the token from the prompt, or -")
    decide.add_argument("decision", choices=("approve", "reject"))
    decide.add_argument(
        "--actor",
        metavar="NAME",
        help="who decides, for the run's history (default: api-token:ROLE, the API token's role)",
    )
    decide.add_argument("--comment", metavar="TEXT", help="why, for the run's history")
    decide.add_argument(
        "--run-id", help="the run the token must be bound to (refused with a 404 otherwise)"
    )
    _api.add_common(decide)
    decide.set_defaults(func=_api.reporting(cmd_decide))


def cmd_list(args: argparse.Namespace) -> int:
    filters = client.RunFilters(status=(states.WAITING_APPROVAL,), workflow=args.workflow)
    page = runs.listed(args, filters)
    if args.json:
        print(runs.page_json(page))
    elif not page.runs:
        print("no run is waiting for an approval")
    else:
        print(waiting_table(page.runs))
    if page.next_cursor is not None:
        output.note("more runs wait: add --all")
    return 0


def waiting_table(runs: list[client.Run]) -> str:
    rows = [
        (
            run.run_id,
            f"{run.workflow_name} v{run.workflow_version}",
            run.current_step or "-",
            output.age(run.raw.get("updated_at")),
        )
        for run in runs
    ]
    return output.table(("RUN ID", "WORKFLOW", "STEP", "WAITING"), rows)


def cmd_decide(args: argparse.Namespace) -> int:
    token = args.approval_token
    if token == "-":  # noqa: S105 - "read it from stdin", not a password
        token = sys.stdin.readline().strip()
    if not token:
        raise Usage("give the approval's token (from its prompt), or - to read it from stdin")
    answer = _api.api_client(args).decide_approval(
        token, args.decision, actor=args.actor, comment=args.comment, run_id=args.run_id
    )
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        by = f" by {args.actor}" if args.actor else ""
        print(f"{answer['status']}{by}: run {answer['run_id']} moves on")
    return 0
