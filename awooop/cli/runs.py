"""``awooop runs``: start a workflow, list, find and read runs, operate on them (cancel, pause,
resume, the retries) and rerun them over the HTTP API (:mod:`awooop.client`,
:mod:`awooop.cli._api`).

A readable line or table for people, ``--json`` for scripts. Exit status: 0 done; 1 the API
refused the operation (the error code is printed) or could not be reached, or a waited-for
run did not complete; 2 bad usage or input, including input the API refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import uuid
from pathlib import Path
from typing import Any

from awooop import client
from awooop.cli import _api, arguments, output
from awooop.cli._api import Usage
from awooop.domain import states
from awooop.engine.reruns import MAX_LIMIT, MIN_RATE

# The management operations a person runs from here (manual-close stays with the console).
OPERATION_HELP = {
    "cancel": "cancel a run: it stops at the next step boundary and compensates what it did",
    "pause": "pause a run: it stops at the next step boundary until resumed",
    "resume": "resume a paused run",
    "retry-compensation": "retry the compensation of a run in MANUAL_INTERVENTION (BACKWARD)",
    "retry-resolution": "retry resolving a run in MANUAL_INTERVENTION (FORWARD)",
}
LIST_COLUMNS = ("RUN ID", "STATUS", "SAGA", "WORKFLOW", "STEP", "AGE")


def add_parser(sub: Any) -> None:
    """The ``runs`` command and its actions, under the ``awooop`` parser's sub-commands."""
    runs = sub.add_parser(
        "runs",
        help="start, list, show and operate on runs over the HTTP API",
        description=f"{_api.CONNECTION} Exit status: 0 done; 1 the API refused the operation "
        "(its error code is printed), could not be reached, or a waited-for run did not "
        f"complete; 2 bad usage or input, including input the API refused "
        f"({_api.INPUT_REFUSED_TEXT}).",
    )
    actions = runs.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    _add_start(actions)
    _add_list(actions)

    get = actions.add_parser(
        "get",
        help="show one run on one line",
        description="Shows one run on one line: status, saga status, workflow and step "
        "(runs show adds the details and the step journal). Role viewer or above.",
    )
    _run_arguments(get)
    get.set_defaults(func=_api.reporting(cmd_get))

    show = actions.add_parser(
        "show",
        help="show one run with its step journal (--events: and its history)",
        description="Shows one run: its state, where it is, its failure or output, and its "
        "step journal, one line per recorded step attempt. --events adds the run's history "
        "(GET …/runs/{id}/events: transitions, leases, steps, operations and who did them). "
        '--json prints the API\'s run, with the history under "events". Role viewer or above.',
    )
    _run_arguments(show)
    show.add_argument("--events", action="store_true", help="add the run's history")
    show.set_defaults(func=_api.reporting(cmd_show))

    for operation, what in OPERATION_HELP.items():
        _add_operation(actions, operation, what)
    _add_rerun(actions)


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("project_id", metavar="PROJECT")
    parser.add_argument("run_id", metavar="RUN_ID")
    _api.add_common(parser)


def _add_start(actions: Any) -> None:
    start = actions.add_parser(
        "start",
        help="start a workflow the project routes or allows, with an input",
        description="Starts WORKFLOW in PROJECT with --input as its event (the run's "
        'input["event"]). --key is the idempotency key: the same key and input again '
        "answer with the run the first call made, another input with the same key is "
        "refused (E-IDEMPOTENT-002). The workflow must be routed for one of the project's "
        "channels or allowed by name (`awooop project workflows`). Needs an API token of "
        "role ingest, operator or admin (and viewer or above to --wait). Example: "
        'awooop runs start ops alert-triage --input \'{"host": "db-1"}\' --key '
        "ticket-4711 --wait",
    )
    start.add_argument("project_id", metavar="PROJECT")
    start.add_argument("workflow", metavar="WORKFLOW")
    start.add_argument(
        "--input",
        default="{}",
        metavar="JSON",
        help="the event: a JSON object, or @FILE to read it from a file (default: {})",
    )
    start.add_argument(
        "--key",
        required=True,
        help="the idempotency key: 1-255 visible ASCII characters, no space or comma",
    )
    start.add_argument(
        "--version", type=arguments.whole, help="a registered version (default: the latest)"
    )
    start.add_argument(
        "--wait",
        action="store_true",
        help="wait until the run finishes, print it, and exit 1 unless it COMPLETED",
    )
    start.add_argument(
        "--timeout",
        type=arguments.decimal,
        default=300.0,
        help="seconds --wait waits, a number above 0 (default: 300)",
    )
    _api.add_common(start)
    start.set_defaults(func=_api.reporting(cmd_start))


def _add_list(actions: Any) -> None:
    listing = actions.add_parser(
        "list",
        help="list the project's runs, newest first, with the runs API's filters",
        description="Lists the project's runs, newest first: run id, status, saga status, "
        "workflow and version, current step, and age (since it was created). The filters "
        "are the runs API's (GET …/runs); --status and --saga-status take several values, "
        "comma-separated or repeated. One page at a time (--limit runs, 50 by default): the "
        "command names the --cursor of the next page on stderr; --all follows the pages to "
        'the end. --json prints {"runs": [...], "next_cursor": ...}. Role viewer or above. '
        "Example: awooop runs list ops --status RUNNING,WAITING_APPROVAL --workflow "
        "alert-triage",
    )
    listing.add_argument("project_id", metavar="PROJECT")
    add_filters(listing)
    listing.add_argument("--limit", type=arguments.whole, help="runs per page, 1-200 (default: 50)")
    pages = listing.add_mutually_exclusive_group()
    pages.add_argument("--cursor", help="the page after the one that named this cursor")
    pages.add_argument("--all", action="store_true", help="every matching run, page after page")
    _api.add_common(listing)
    listing.set_defaults(func=_api.reporting(cmd_list))


def add_filters(parser: argparse.ArgumentParser) -> None:
    """The runs API's filters as options (see :class:`awooop.client.RunFilters`)."""
    several = "; several comma-separated or repeated"
    parser.add_argument(
        "--status",
        action="append",
        default=[],
        help=f"run status: {', '.join(states.RUN_STATUSES)}{several}",
    )
    parser.add_argument(
        "--saga-status",
        action="append",
        default=[],
        help=f"saga status: {', '.join(states.SAGA_STATUSES)}{several}",
    )
    parser.add_argument("--workflow", help="the workflow's name")
    parser.add_argument("--channel", help="the channel the run came from (api, telegram, …)")
    for event in ("created", "finished"):
        parser.add_argument(
            f"--{event}-from",
            metavar="TIME",
            help=f"{event} at or after TIME (ISO 8601 with an offset, e.g. 2026-11-29T10:00Z)",
        )
        parser.add_argument(f"--{event}-until", metavar="TIME", help=f"{event} before TIME")
    parser.add_argument("--failure-code", help="failed with this code, e.g. E-STEP-001")
    parser.add_argument(
        "--outbox",
        choices=("PENDING", "PARKED"),
        help="with an outbox message waiting to be sent (PENDING) or given up (PARKED)",
    )
    parser.add_argument(
        "--provider-event-id",
        metavar="ID",
        help="started by this provider event (any channel), or a rerun of such a run",
    )
    parser.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="started with this Idempotency-Key (an API start request's or a rerun's)",
    )
    parser.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="KEY:VALUE",
        help="tagged so by a step (ctx.tag); repeat for several: all must match",
    )


def filters_of(args: argparse.Namespace) -> client.RunFilters:
    """The filters :func:`add_filters` read; the lists split at commas."""
    given = {name: getattr(args, name) for name in client.RunFilters.__dataclass_fields__}
    for name in ("status", "saga_status"):
        given[name] = tuple(
            v.strip() for value in given[name] for v in value.split(",") if v.strip()
        )
    given["tag"] = tuple(given["tag"])
    for tag in given["tag"]:
        if ":" not in tag:
            raise Usage(f"--tag {tag!r} must be KEY:VALUE, e.g. service:db-1")
    return client.RunFilters(**given)


def _add_operation(actions: Any, operation: str, what: str) -> None:
    parser = actions.add_parser(
        operation,
        help=what,
        description=f"{what[0].upper()}{what[1:]} (POST …/runs/{{id}}/{operation}). "
        "--reason goes into the run's history with the API token that acted. The operation "
        "is idempotent by its --operation-id: without one the command makes one and prints "
        "it on stderr before it calls, so that a retry after a lost answer can pass it again "
        "and is answered as a replay, changing nothing. --if-version N acts only if the "
        "run's version is still N (runs show prints it; E-OPERATION-002 otherwise). A run "
        "not in a state for the operation is refused with E-OPERATION-001. Role operator or "
        f"admin. Example: awooop runs {operation} ops RUN_ID --reason 'wrong host'",
    )
    _run_arguments(parser)
    parser.add_argument("--reason", required=True, help="why, for the run's history")
    parser.add_argument(
        "--operation-id",
        metavar="ID",
        help="the operation's id, 1-128 characters (default: a new one, printed)",
    )
    parser.add_argument(
        "--if-version", type=arguments.whole, metavar="N", help="act only if the run's version is N"
    )
    parser.set_defaults(func=_api.reporting(cmd_operate), operation=operation)


def _add_rerun(actions: Any) -> None:
    rerun = actions.add_parser(
        "rerun",
        help="start finished runs again with their input: one run, or every run the filters match",
        description="With RUN_ID: starts that finished run (COMPLETED, FAILED or CANCELLED) "
        "again as a new run of the same workflow and version with the same input, linked to "
        "it (runs show lists a run's reruns); role operator or admin (POST "
        "…/runs/{id}/rerun). Without RUN_ID: every finished run the filters (those of runs "
        "list, at least one) match, newest first, at most --limit, the new runs becoming "
        "claimable at most --rate per second; --dry-run prints how many (and which) would "
        "be rerun and changes nothing; role admin (POST …/runs/rerun). A rerun is not a new "
        "delivery of the event: its dedupe key is untouched. Idempotent by --key: without "
        "one the command makes one and prints it on stderr before it calls, so that a retry "
        "after a lost answer can pass it again and gets the same runs. Example: awooop runs "
        "rerun ops --workflow alert-triage --failure-code E-STEP-001 --dry-run",
    )
    rerun.add_argument("project_id", metavar="PROJECT")
    rerun.add_argument("run_id", metavar="RUN_ID", nargs="?", help="the run (else: filters)")
    add_filters(rerun)
    rerun.add_argument("--dry-run", action="store_true", help="count the matching runs only")
    rerun.add_argument(
        "--rate",
        type=arguments.decimal,
        metavar="N",
        help=f"new runs claimable per second at most, from {MIN_RATE:g} to the deployment's "
        "AWOOOP_RERUN_MAX_RATE_PER_SECOND (default: the deployment's, 5)",
    )
    rerun.add_argument(
        "--limit", type=arguments.whole, help="runs at most, newest first, 1-1000 (default: 100)"
    )
    rerun.add_argument("--cursor", help="go on after the runs an earlier call named")
    rerun.add_argument("--reason", help="why, for the runs' history")
    rerun.add_argument("--key", help="the request's idempotency key (default: a new one)")
    _api.add_common(rerun)
    rerun.set_defaults(func=_api.reporting(cmd_rerun))


_BULK_ONLY = ("dry_run", "rate", "limit", "cursor")
RERUN_COLUMNS = ("RUN ID", "RERUN OF", "STATUS", "CLAIMABLE AT")


def cmd_rerun(args: argparse.Namespace) -> int:
    filters = filters_of(args)
    if args.key is not None:
        _api.idempotency_key(args.key)
    if args.run_id is not None:
        given = [
            f"--{n.replace('_', '-')}" for n in _BULK_ONLY if getattr(args, n) not in (None, False)
        ]
        if filters.query() or given:
            raise Usage(f"give RUN_ID or filters, not both ({', '.join(given) or 'a filter'})")
        return _rerun_one(args)
    if not filters.query():
        raise Usage("give RUN_ID, or at least one filter (see runs list) to rerun many")
    if args.limit is not None and not 1 <= args.limit <= MAX_LIMIT:
        raise Usage(f"--limit must be from 1 to {MAX_LIMIT}")
    if args.rate is not None and not (math.isfinite(args.rate) and args.rate >= MIN_RATE):
        raise Usage(f"--rate must be a finite number of at least {MIN_RATE:g}")
    key = None if args.dry_run else _key(args)
    done = _api.api_client(args).rerun_matching(
        filters,
        key=key,
        dry_run=args.dry_run,
        limit=args.limit,
        rate=args.rate,
        cursor=args.cursor,
        reason=args.reason,
    )
    if args.json:
        print(json.dumps(done.raw, indent=2))
    elif done.dry_run:
        print(f"{_runs(done.count, 'finished run')} would be rerun, at most {done.rate:g} a second")
        if done.run_ids:
            print(output.table(("RUN ID",), [(run_id,) for run_id in done.run_ids]))
    else:
        made = "rerun" if done.created else "already rerun with this key:"
        print(f"{made} {_runs(len(done.runs), 'run')}, at most {done.rate:g} a second")
        if done.runs:
            print(_rerun_table(done.runs))
    if done.more and done.next_cursor is not None:
        output.note(f"more runs match: add --cursor {done.next_cursor}")
    return 0


def _runs(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _key(args: argparse.Namespace) -> str:
    if args.key is not None:
        return str(args.key)
    key = str(uuid.uuid4())
    output.note(f"rerun key {key} (to retry: --key {key})")
    return key


def _rerun_one(args: argparse.Namespace) -> int:
    done = _api.api_client(args).rerun(args.run_id, key=_key(args), reason=args.reason)
    if args.json:
        print(json.dumps(dataclasses.asdict(done), indent=2))
        return 0
    made = "rerun as" if done.created else "already rerun with this key as"
    print(f"run {done.rerun_of} {made} run {done.run_id} ({done.status})")
    return 0


def _rerun_table(runs: list[client.Rerun]) -> str:
    rows = [(r.run_id, r.rerun_of, r.status, output.when(r.available_at)) for r in runs]
    return output.table(RERUN_COLUMNS, rows)


def parse_input(text: str) -> dict[str, Any]:
    """``--input``: a JSON object, or ``@FILE`` holding one."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise Usage(f"--input {text}: {exc.strerror}") from None
    try:
        value = json.loads(text, parse_constant=_not_json, parse_float=_finite)
    except ValueError as exc:
        raise Usage(f"--input is not JSON: {' '.join(str(exc).split())}") from None
    if not isinstance(value, dict):
        raise Usage('--input must be a JSON object, e.g. \'{"host": "db-1"}\'')
    return value


def _not_json(constant: str) -> Any:
    """Python's json reads NaN and Infinity, which are not JSON: the API would refuse them."""
    raise ValueError(f"{constant} is not a JSON number")


def _finite(number: str) -> float:
    """A JSON number too large for a float (1e999) reads as infinity: refused like Infinity."""
    value = float(number)
    if not math.isfinite(value):
        raise ValueError(f"{number} is too large a number")
    return value


def cmd_start(args: argparse.Namespace) -> int:
    _api.idempotency_key(args.key)
    if args.wait and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise Usage("--timeout must be a number of seconds greater than 0")
    event = parse_input(args.input)
    if args.version is not None and args.version < 1:
        raise Usage("--version must be a positive integer")
    api = _api.api_client(args)
    started = api.start(args.workflow, event, key=args.key, version=args.version)
    answer: dict[str, Any] = {
        "run_id": started.run_id,
        "status": started.status,
        "created": started.created,
    }
    run = api.wait(started.run_id, timeout=args.timeout) if args.wait else None
    if args.json:
        print(json.dumps({**answer, "run": run.raw} if run else answer, indent=2))
    else:
        made = "started" if started.created else "already started with this key:"
        print(f"{made} run {started.run_id} ({started.status})")
        if run is not None:
            print(describe(run))
    return 0 if run is None or run.status == states.COMPLETED else 1


def cmd_get(args: argparse.Namespace) -> int:
    run = _api.api_client(args).get(args.run_id)
    print(json.dumps(run.raw, indent=2) if args.json else describe(run))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    if args.limit is not None and not 1 <= args.limit <= 200:
        raise Usage("--limit must be from 1 to 200")
    page = listed(args, filters_of(args), limit=args.limit, cursor=args.cursor)
    if args.json:
        print(page_json(page))
    else:
        print(run_table(page.runs) if page.runs else "no runs match")
    if page.next_cursor is not None:
        output.note(f"more runs: add --cursor {page.next_cursor} (or --all)")
    return 0


def listed(
    args: argparse.Namespace,
    filters: client.RunFilters,
    *,
    limit: int | None = None,
    cursor: str | None = None,
) -> client.RunPage:
    """The page of runs asked for, or with ``--all`` every page as one."""
    api = _api.api_client(args)
    if args.all:
        return client.RunPage(list(api.iter_runs(filters, limit=limit)), None)
    return api.list_runs(filters, limit=limit, cursor=cursor)


def page_json(page: client.RunPage) -> str:
    """A page as the API answers it: every field of each run, and the next cursor."""
    runs = [run.raw for run in page.runs]
    return json.dumps({"runs": runs, "next_cursor": page.next_cursor}, indent=2)


def run_table(runs: list[client.Run]) -> str:
    """Runs as a table for people (:data:`LIST_COLUMNS`)."""
    return output.table(
        LIST_COLUMNS,
        [
            (
                run.run_id,
                run.status,
                run.saga_status,
                f"{run.workflow_name} v{run.workflow_version}",
                run.current_step or "-",
                output.age(run.created_at),
            )
            for run in runs
        ],
    )


def cmd_show(args: argparse.Namespace) -> int:
    api = _api.api_client(args)
    run = api.get(args.run_id)
    events = api.events(args.run_id) if args.events else None
    if args.json:
        shown = run.raw if events is None else {**run.raw, "events": events}
        print(json.dumps(shown, indent=2))
        return 0
    print(details(run))
    if events is not None:
        print(history(events))
    return 0


def cmd_operate(args: argparse.Namespace) -> int:
    if args.operation_id is not None and not 0 < len(args.operation_id) <= 128:
        raise Usage("--operation-id must be 1 to 128 characters")
    api = _api.api_client(args)
    operation_id = args.operation_id or str(uuid.uuid4())
    if args.operation_id is None:
        output.note(f"operation id {operation_id} (to retry: --operation-id {operation_id})")
    done = api.operate(
        args.run_id,
        args.operation,
        args.reason,
        operation_id=operation_id,
        if_version=args.if_version,
    )
    if args.json:
        print(json.dumps(done.raw, indent=2))
        return 0
    outcome = "done" if done.applied else "already done by this operation id (replayed)"
    print(
        f"{args.operation} {outcome}: run {done.run_id} {done.status} (saga {done.saga_status}, "
        f"{done.control_state}), version {done.version}"
    )
    return 0


def describe(run: client.Run) -> str:
    """A run for people: status and where it is, then its failure or output."""
    line = (
        f"run {run.run_id} {run.status} (saga {run.saga_status}) "
        f"{run.workflow_name} v{run.workflow_version}"
    )
    if run.current_step and not run.finished:
        line += f" at step {run.current_step}"
    if run.failure_code or run.failure_reason:
        line += f"\n  failure {run.failure_code or ''}: {run.failure_reason or ''}"
    if run.output is not None:
        line += f"\n  output {json.dumps(run.output)}"
    return line


def details(run: client.Run) -> str:
    """:func:`describe`, then the run's facts and its step journal, a line per entry."""
    raw = run.raw
    attempts = f"attempt {raw.get('attempt_count')} of {raw.get('max_attempts')}"
    lines = [
        describe(run),
        f"  channel {raw.get('channel_type')}, {raw.get('direction')}, "
        f"{raw.get('control_state')}, {attempts}, version {run.version}",
        f"  created {output.when(run.created_at)}, updated {output.when(raw.get('updated_at'))}"
        f", finished {output.when(run.finished_at)}",
    ]
    if raw.get("tags"):
        lines.append("  tags " + ", ".join(f"{k}={v}" for k, v in sorted(raw["tags"].items())))
    if raw.get("rerun_of"):
        lines.append(f"  rerun of {raw['rerun_of']} (key {raw.get('rerun_key')})")
    reruns = raw.get("reruns") or []
    if reruns:
        lines.append(f"  reruns ({len(reruns)}):")
        lines += [
            f"    {r['run_id']} {r['status']} created {output.when(r['created_at'])}"
            for r in reruns
        ]
    if raw.get("worker_id") and raw.get("lease_until"):
        lines.append(
            f"  held by {raw['worker_id']} (lease until {output.when(raw['lease_until'])})"
        )
    elif raw.get("worker_id"):  # the lease was let go (a finished run): who held it last
        lines.append(f"  last held by {raw['worker_id']}")
    journal = raw.get("saga_steps") or []
    lines.append(f"steps ({len(journal)}):" if journal else "steps: none recorded yet")
    rows = [
        (
            output.when(entry.get("recorded_at")),
            str(entry.get("phase", "")),
            str(entry.get("step", "")),
            str(entry.get("status") or entry.get("decision") or ""),
            f"attempt {entry['attempt']}" if "attempt" in entry else "",
            str(entry.get("error") or ""),
        )
        for entry in journal
    ]
    if rows:
        lines += _indented(
            output.table(("AT", "PHASE", "STEP", "OUTCOME", "ATTEMPT", "ERROR"), rows)
        )
    return "\n".join(lines)


def history(events: list[dict[str, Any]]) -> str:
    """The run's audit trail, a line per event."""
    if not events:
        return "events: none"
    rows = [
        (
            str(event["seq"]),
            output.when(event.get("at")),
            str(event.get("kind", "")),
            _move(event.get("from_status"), event.get("to_status")),
            str(event.get("trigger", "")),
            str(event.get("actor") or ""),
            json.dumps(event["detail"]) if event.get("detail") else "",
        )
        for event in events
    ]
    headers = ("SEQ", "AT", "KIND", "STATUS", "TRIGGER", "ACTOR", "DETAIL")
    return "\n".join([f"events ({len(events)}):", *_indented(output.table(headers, rows))])


def _move(before: str | None, after: str | None) -> str:
    if before and after and before != after:
        return f"{before} -> {after}"
    return after or before or ""


def _indented(text: str) -> list[str]:
    return [f"  {line}" for line in text.splitlines()]
