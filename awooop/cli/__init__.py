"""The ``awooop`` command, a module per audience: :mod:`~awooop.cli.projects` (projects and
what they hold), :mod:`~awooop.cli.runs`, :mod:`~awooop.cli.approvals` and
:mod:`~awooop.cli.workers` (over the HTTP API), :mod:`~awooop.cli.outbox`,
:mod:`~awooop.cli.secrets` (key rotation) and :mod:`~awooop.cli.dev` (configuration,
migrations, metrics, the registered workflows, the development stack).

Every sub-command has ``--help``. Errors go to stderr on one line with exit status 2 (bad
usage, input or configuration) or 1 (the operation failed); nothing is written when the
input is invalid.

Settings come from ``AWOOOP_*`` environment variables; with none set, from the checkout's
``.awooop/env`` (:func:`awooop.config.discover`), which the command names on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys

from sqlalchemy import exc as sa_exc

from awooop import __version__
from awooop.cli import approvals, dev, outbox, projects, runs, secrets, workers
from awooop.cli._db import UsageError
from awooop.config import ConfigError

# Tests, benchmarks and the chaos stack make their projects with it.
create_project = projects.create_project


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="awooop",
        description="AwoooP: operations events admitted exactly once and run as durable "
        "workflows. Settings come from AWOOOP_* environment variables; when none is set, "
        "from the checkout's .awooop/env (written by `awooop dev up` / `make run`, found in "
        "the current directory or a parent), and the command says so on stderr. "
        "`awooop config` shows what is in effect.",
        epilog="Exit status: 0 done; 1 the operation failed (e.g. the database is "
        "unreachable, or the API refused it); 2 bad usage, input or configuration, including "
        "input the API refused (HTTP 400, 413, 415 or 422). Errors are one line on stderr.",
    )
    parser.add_argument("--version", action="version", version=f"awooop {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    projects.add_parser(sub)
    runs.add_parser(sub)
    secrets.add_parser(sub)
    approvals.add_parser(sub)
    workers.add_parser(sub)
    outbox.add_parser(sub)
    dev.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    not_text = _not_text(argv)
    if not_text is not None:  # bytes the shell passed that are not UTF-8: nothing runs
        print(
            f"awooop: error: arguments must be UTF-8 text (argument {not_text} is not)",
            file=sys.stderr,
        )
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe fails here, inside the try
        return code
    except (UsageError, ConfigError) as error:
        print(f"awooop: error: {error}", file=sys.stderr)
        return 2
    except sa_exc.DBAPIError as error:
        print(f"awooop: error: {_database_error(error)}", file=sys.stderr)
        return 1
    except UnicodeError as error:  # input the command could not read as text, or send as such
        print(f"awooop: error: not valid text: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `awooop config | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _not_text(argv: list[str]) -> int | None:
    """The position (from 1) of the first argument that is not text: Python hands bytes that
    are not UTF-8 over as lone surrogates, which nothing can encode again."""
    for position, argument in enumerate(argv, start=1):
        try:
            argument.encode("utf-8")
        except UnicodeEncodeError:
            return position
    return None


def _database_error(error: sa_exc.DBAPIError) -> str:
    """One line for a database error: the server's message (it names no password)."""
    if getattr(error.orig, "pgcode", None) == "42P01":  # undefined_table
        return "the database has no AwoooP tables: run `awooop migrate` first"
    message = " ".join(str(error.orig).split())
    if isinstance(error, sa_exc.OperationalError):
        return f"cannot use the database (AWOOOP_DATABASE_URL): {message}"
    return f"the database refused the operation: {message}"
