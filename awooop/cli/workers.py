"""``awooop workers``: the worker processes the system knows, over the HTTP API
(``GET /v1/projects/{project}/workers``).

Workers serve every project, so every worker is listed; the runs each holds are counted for
the project asked about only (its API token sees no other project's runs).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from awooop.cli import _api, output

COLUMNS = ("WORKER", "HOST", "PID", "LAST BEAT", "RUNS HELD", "STARTED")


def add_parser(sub: Any) -> None:
    """The ``workers`` command, under the ``awooop`` parser's sub-commands."""
    workers = sub.add_parser(
        "workers",
        help="the worker processes, their last beat and the runs they hold",
        description="Lists the worker processes the system knows — each that has held a "
        "lease, until the reaper prunes it — with its host and pid, how long ago it last "
        "beat (a live worker beats every few seconds), whether the reaper judged it dead, "
        "and how many of PROJECT's running runs it holds. Workers serve every project, so "
        f"all are listed; only PROJECT's runs are counted. Role viewer or above. "
        f"{_api.CONNECTION} {_api.EXIT_STATUS}",
    )
    workers.add_argument("project_id", metavar="PROJECT")
    _api.add_common(workers)
    workers.set_defaults(func=_api.reporting(cmd_workers))


def cmd_workers(args: argparse.Namespace) -> int:
    found = _api.api_client(args).workers()
    if args.json:
        print(json.dumps({"workers": [vars(worker) for worker in found]}, indent=2))
        return 0
    if not found:
        print("no worker has held a lease yet")
        return 0
    rows = [
        (
            worker.worker_id,
            worker.host,
            str(worker.pid),
            f"{output.duration(worker.seen_seconds_ago)} ago"
            + (", judged dead" if worker.judged_dead_at else ""),
            str(worker.runs_held),
            output.when(worker.started_at),
        )
        for worker in found
    ]
    print(output.table(COLUMNS, rows))
    return 0
