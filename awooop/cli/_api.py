"""What the commands over the HTTP API share (``awooop runs``, ``approvals``, ``workers``):
the web's address and token, and the one-line failures and their exit status (the tables and
times they print are in :mod:`awooop.cli.output`).

These commands talk to a running web, not to the database: its address comes from
``--url`` or ``AWOOOP_API_URL`` (default http://127.0.0.1:8000), the API token from
``--token`` or ``AWOOOP_API_TOKEN``, so the token's role decides what they may do. Exit
status: 0 done; 1 the API refused the operation (the error code is printed) or could not be
reached; 2 bad usage or input, including input the API refused (:data:`INPUT_REFUSED`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import requests
from requests.exceptions import InvalidSchema, InvalidURL, MissingSchema

from awooop import client, config, errors
from awooop.channels import api as api_channel
from awooop.channels.base import RawRequest

Command = Callable[[argparse.Namespace], int]

# The API's answers that refuse the request's input (a bad value, body or key): exit status
# 2 like a bad argument. Others (401, 403, 404, 409, 412, 429, 5xx) refuse the operation: 1.
INPUT_REFUSED = (400, 413, 415, 422)
INPUT_REFUSED_TEXT = "HTTP 400, 413, 415 or 422"
EXIT_STATUS = (
    "Exit status: 0 done; 1 the API refused the operation (its error code is printed) or could "
    f"not be reached; 2 bad usage or input, including input the API refused ({INPUT_REFUSED_TEXT})."
)
CONNECTION = (
    "These commands call a running web's HTTP API (not the database): its address from "
    f"--url or {config.API_URL_VARIABLE} (default {config.DEFAULT_API_URL}), the API token "
    f"from --token or {config.API_TOKEN_VARIABLE}; the token's role decides what they may do."
)


class Usage(Exception):
    """Bad input on the command line."""


def add_common(parser: argparse.ArgumentParser) -> None:
    """``--url``, ``--token`` and ``--json``."""
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


def api_client(args: argparse.Namespace) -> client.Client:
    """The client of ``args.project_id`` at the address and with the token given."""
    token = args.token or os.environ.get(config.API_TOKEN_VARIABLE)
    if not token:
        raise Usage(f"give an API token with --token or {config.API_TOKEN_VARIABLE}")
    if not (token.isascii() and token.isprintable()):  # not shown: it is a secret
        raise Usage(
            f"the API token must be printable ASCII text (--token or {config.API_TOKEN_VARIABLE})"
        )
    url = args.url or os.environ.get(config.API_URL_VARIABLE) or config.DEFAULT_API_URL
    if not url.startswith(("http://", "https://")):
        raise Usage(f"the web's address must be an http:// or https:// URL, not {url!r}")
    return client.Client(url, token, args.project_id)


def idempotency_key(key: str, option: str = "--key") -> str:
    """``key`` if the API takes it as an ``Idempotency-Key`` (by the API's own rule), else a
    :class:`Usage` error naming ``option``."""
    try:
        return api_channel.idempotency_key(RawRequest({"Idempotency-Key": key}, b""))
    except errors.MissingIdempotencyKey:
        raise Usage(
            f"{option} must be 1 to {api_channel.MAX_KEY_LENGTH} visible ASCII characters, "
            "no space or comma"
        ) from None


def reporting(command: Command) -> Command:
    """``command`` with its failures as one line on stderr and the exit status for them."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except Usage as error:
            return fail(str(error), 2)
        except client.ApiError as error:
            status = 2 if error.status in INPUT_REFUSED else 1
            return fail(f"{error.code or 'error'} (HTTP {error.status}): {error.message}", status)
        except TimeoutError as error:
            return fail(str(error), 1)
        except (InvalidURL, MissingSchema, InvalidSchema) as error:
            return fail(f"the web's address is not valid: {' '.join(str(error).split())}", 2)
        except requests.exceptions.InvalidHeader:  # its message would show the value: a token?
            return fail("a header value is not valid (the API token or the key)", 2)
        except requests.exceptions.JSONDecodeError as error:  # an answer, not the request
            return fail(f"the API's answer is not JSON ({type(error).__name__})", 1)
        except requests.exceptions.InvalidJSONError:
            return fail("the request is not valid JSON (NaN and Infinity are not JSON)", 2)
        except requests.RequestException as error:
            url = getattr(error.request, "url", None) or "the API"
            return fail(f"cannot reach {url} ({type(error).__name__})", 1)

    return run


def fail(message: str, status: int) -> int:
    print(f"awooop: error: {message}", file=sys.stderr)
    return status
