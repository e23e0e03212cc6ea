"""``awooop runs``: start a workflow and read runs over the HTTP API (:mod:`awooop.client`).

These commands talk to a running web, not to the database: its address comes from
``--url`` or ``AWOOOP_API_URL`` (default http://127.0.0.1:8000), the API token from
``--token`` or ``AWOOOP_API_TOKEN``. A readable line for people, ``--json`` for scripts.
Exit status: 0 done; 1 the API refused (the error code is printed) or could not be
reached, or a waited-for run did not complete; 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from awooop import client, config
from awooop.domain import states

Command = Callable[[argparse.Namespace], int]


class _Usage(Exception):
    """Bad input on the command line."""


def add_parser(sub: Any) -> None:
    """The ``runs`` command and its actions, under the ``awooop`` parser's sub-commands."""
    runs = sub.add_parser(
        "runs",
        help="start a workflow and read runs over the HTTP API",
        description="These commands call a running web's HTTP API (not the database): its "
        f"address from --url or {config.API_URL_VARIABLE} (default {config.DEFAULT_API_URL}), "
        f"the API token from --token or {config.API_TOKEN_VARIABLE}. Exit status: 0 done; 1 "
        "the API refused (its error code is printed), could not be reached, or a waited-for "
        "run did not complete; 2 bad usage.",
    )
    actions = runs.add_subparsers(dest="runs_command", required=True, metavar="ACTION")

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
    start.add_argument("--key", required=True, help="the idempotency key (1-255 characters)")
    start.add_argument("--version", type=int, help="a registered version (default: the latest)")
    start.add_argument(
        "--wait",
        action="store_true",
        help="wait until the run finishes, print it, and exit 1 unless it COMPLETED",
    )
    start.add_argument(
        "--timeout", type=float, default=300.0, help="seconds --wait waits (default: 300)"
    )
    _common(start)
    start.set_defaults(func=_reporting(cmd_start))

    get = actions.add_parser("get", help="show one run", description="Shows one run.")
    get.add_argument("project_id", metavar="PROJECT")
    get.add_argument("run_id", metavar="RUN_ID")
    _common(get)
    get.set_defaults(func=_reporting(cmd_get))


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help=f"the web's address (default: ${config.API_URL_VARIABLE}, else "
        f"{config.DEFAULT_API_URL})",
    )
    parser.add_argument(
        "--token",
        help=f"an API token of the project (default: ${config.API_TOKEN_VARIABLE}; "
        "prefer the variable: an argument shows in the process list)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (for scripts)")


def _client(args: argparse.Namespace) -> client.Client:
    token = args.token or os.environ.get(config.API_TOKEN_VARIABLE)
    if not token:
        raise _Usage(f"give an API token with --token or {config.API_TOKEN_VARIABLE}")
    url = args.url or os.environ.get(config.API_URL_VARIABLE) or config.DEFAULT_API_URL
    if not url.startswith(("http://", "https://")):
        raise _Usage(f"the web's address must be an http:// or https:// URL, not {url!r}")
    return client.Client(url, token, args.project_id)


def parse_input(text: str) -> dict[str, Any]:
    """``--input``: a JSON object, or ``@FILE`` holding one."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise _Usage(f"--input {text}: {exc.strerror}") from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise _Usage(f"--input is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise _Usage('--input must be a JSON object, e.g. \'{"host": "db-1"}\'')
    return value


def cmd_start(args: argparse.Namespace) -> int:
    event = parse_input(args.input)
    if args.version is not None and args.version < 1:
        raise _Usage("--version must be a positive integer")
    api = _client(args)
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
    run = _client(args).get(args.run_id)
    print(json.dumps(run.raw, indent=2) if args.json else describe(run))
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


def _reporting(command: Command) -> Command:
    """``command`` with its failures as one line on stderr and the exit status for them."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except _Usage as error:
            return _fail(str(error), 2)
        except client.ApiError as error:
            return _fail(f"{error.code or 'error'} (HTTP {error.status}): {error.message}", 1)
        except TimeoutError as error:
            return _fail(str(error), 1)
        except requests.RequestException as error:
            url = getattr(error.request, "url", None) or "the API"
            return _fail(f"cannot reach {url} ({type(error).__name__})", 1)

    return run


def _fail(message: str, status: int) -> int:
    print(f"awooop: error: {message}", file=sys.stderr)
    return status
