"""Gitea webhooks.

Authentication: ``X-Gitea-Signature`` is the hex HMAC-SHA256 of the raw body with the
webhook secret (any active secret of the project, to allow rotation). Event id: the
``X-Gitea-Delivery`` header.
"""

from __future__ import annotations

from awooop import secrets as crypto
from awooop.channels.base import (
    ChannelSecrets,
    InboundEvent,
    RawRequest,
    digest,
    event_id,
    json_object,
    require,
)

CHANNEL = "gitea"


def authenticate(request: RawRequest, secrets: ChannelSecrets) -> bool:
    presented = request.headers.get("X-Gitea-Signature", "").strip().lower()
    return crypto.any_hmac_matches(presented, request.body, secrets.hmac_keys(), bytes.hex)


def parse(request: RawRequest) -> list[InboundEvent]:
    payload = json_object(request.body)
    delivery = request.headers.get("X-Gitea-Delivery", "").strip()
    require(bool(delivery), "the X-Gitea-Delivery header is required")
    event_type = request.headers.get("X-Gitea-Event", "").strip() or "unknown"
    return [
        InboundEvent(
            event_id(delivery), payload, digest(payload), meta={"event_type": event_type[:64]}
        )
    ]
