"""The JSON API channel: ``POST /v1/projects/{project_id}/runs``.

Authentication: ``Authorization: Bearer <project API token>`` with a role that may admit
events (ingest, operator, admin). Event id: the required ``Idempotency-Key`` header
(1 to 255 visible ASCII characters).
"""

from __future__ import annotations

from awooop import errors
from awooop import secrets as crypto
from awooop.channels.base import ChannelSecrets, InboundEvent, RawRequest, digest, json_object

CHANNEL = "api"
MAX_KEY_LENGTH = 255


def bearer_token(request: RawRequest) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def authenticate(request: RawRequest, secrets: ChannelSecrets) -> bool:
    token = bearer_token(request)
    return token is not None and crypto.matches_any_hash(token, secrets.hashes)


def idempotency_key(request: RawRequest) -> str:
    key = request.headers.get("Idempotency-Key", "")
    if not (0 < len(key) <= MAX_KEY_LENGTH and key.isascii() and key.isprintable()):
        raise errors.MissingIdempotencyKey()
    return key


def parse(request: RawRequest) -> list[InboundEvent]:
    key = idempotency_key(request)
    payload = json_object(request.body)
    return [InboundEvent(key, payload, digest(payload))]
