"""LINE Messaging API webhooks.

Authentication: ``X-Line-Signature`` is the base64 HMAC-SHA256 of the raw body with the
channel secret. One request can carry several events: each becomes its own run, keyed by
its ``webhookEventId`` (redeliveries keep the id). A request with no events is LINE's
webhook verification and creates nothing.
"""

from __future__ import annotations

from awooop import errors
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

CHANNEL = "line"


def authenticate(request: RawRequest, secrets: ChannelSecrets) -> bool:
    presented = request.headers.get("X-Line-Signature", "").strip()
    return crypto.any_hmac_matches(presented, request.body, secrets.hmac_keys(), crypto.b64)


def parse(request: RawRequest) -> list[InboundEvent]:
    body = json_object(request.body)
    events = body.get("events")
    if not isinstance(events, list):
        raise errors.MalformedRequest("events must be a list")
    parsed = []
    seen: set[str] = set()
    for event in events:
        require(isinstance(event, dict), "each event must be an object")
        webhook_event_id = event.get("webhookEventId")
        require(isinstance(webhook_event_id, str), "each event needs a webhookEventId string")
        require(webhook_event_id not in seen, "webhookEventId repeated within one request")
        seen.add(webhook_event_id)
        parsed.append(
            InboundEvent(
                event_id(webhook_event_id),
                event,
                digest(event),
                meta={"destination": body.get("destination")},
            )
        )
    return parsed
