"""The JSON API channel: ``POST /v1/projects/{project_id}/runs``.

Authentication: ``Authorization: Bearer <project API token>`` with a role that may admit
events (ingest, operator, admin). Event id: the required ``Idempotency-Key`` header
(1 to 255 visible ASCII characters, no comma).

A body with a ``"workflow"`` key is a start request, ``{"workflow": name, "version": n,
"input": {...}}`` (``version`` and ``input`` optional): the event is its ``input`` and the
event's meta names the workflow (and the version, when given) for ingress to check against
the project. Any other JSON object is the event itself, for the workflow routed for ``api``.
Either way the request digest covers the whole body.
"""

from __future__ import annotations

import re
from typing import Any

from awooop import bodies, errors
from awooop import secrets as crypto
from awooop.channels.base import (
    ChannelSecrets,
    InboundEvent,
    RawRequest,
    digest,
    json_object,
)

CHANNEL = "api"
MAX_KEY_LENGTH = 255
# An Idempotency-Key: visible ASCII but the comma (see idempotency_key).
KEY_PATTERN = f"[\\x21-\\x2b\\x2d-\\x7e]{{1,{MAX_KEY_LENGTH}}}"
_KEY = re.compile(KEY_PATTERN)
# awooop_run_state.workflow_name is a varchar(128).
MAX_WORKFLOW_NAME_LENGTH = 128
START_REQUEST = bodies.Body(
    description="Start the named workflow: it must be routed for one of the project's "
    "channels or allowed by name (`awooop project workflows`). The run's "
    "`input.event` is `input`; `input.meta.workflow` names the workflow.",
    unknown_keys="unknown keys in a start request: {keys}",
    fields=(
        bodies.Field(
            "workflow",
            "string",
            f"workflow must be a name of 1 to {MAX_WORKFLOW_NAME_LENGTH} characters",
            required=True,
            min_length=1,
            max_length=MAX_WORKFLOW_NAME_LENGTH,
        ),
        bodies.Field(
            "version",
            "integer",
            "version must be a positive integer (leave it out for the latest)",
            minimum=1,
            description="A registered version; the latest when left out.",
        ),
        bodies.Field(
            "input",
            "object",
            "input must be a JSON object",
            default=dict,
            description="The event the steps read (default {}).",
        ),
    ),
)


def bearer_token(request: RawRequest) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def authenticate(request: RawRequest, secrets: ChannelSecrets) -> bool:
    token = bearer_token(request)
    return token is not None and crypto.matches_any_hash(token, secrets.hashes)


def idempotency_key(request: RawRequest) -> str:
    """The one ``Idempotency-Key`` header: 1 to 255 visible ASCII characters (0x21-0x7E) but
    the comma. HTTP joins repeated header fields with commas (the server hands on ``k1,k2``
    for two headers), so a key with one could be two keys: it is refused."""
    key = request.headers.get("Idempotency-Key", "")
    if _KEY.fullmatch(key) is None:
        raise errors.MissingIdempotencyKey()
    return key


def parse(request: RawRequest) -> list[InboundEvent]:
    key = idempotency_key(request)
    body = json_object(request.body)
    if "workflow" not in body:
        return [InboundEvent(key, body, digest(body))]
    payload, meta = _start_request(body)
    return [InboundEvent(key, payload, digest(body), meta)]


def _start_request(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A start request's (input, meta); a 400 naming what is wrong with it."""
    start = START_REQUEST.parse(body)
    payload = start.pop("input")
    return payload, start
