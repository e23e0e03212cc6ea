"""Prometheus Alertmanager webhook notifications.

Authentication: ``Authorization: Bearer <secret>`` or HTTP basic auth whose password is the
secret (Alertmanager does not sign its requests). Event id: SHA-256 over the receiver, the
``groupKey``, the group ``status`` and each alert's (fingerprint, status, startsAt, endsAt),
sorted — a retry of a notification is the same event; the resolved notification is a new one.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from awooop import errors
from awooop import secrets as crypto
from awooop.channels.base import (
    ChannelSecrets,
    InboundEvent,
    RawRequest,
    digest,
    json_object,
    require,
)
from awooop.domain.workflow import Correlation

CHANNEL = "alertmanager"


def _presented_secret(authorization: str) -> str | None:
    scheme, _, value = authorization.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return value.strip() or None
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        _, sep, password = decoded.partition(":")
        return password if sep and password else None
    return None


def authenticate(request: RawRequest, secrets: ChannelSecrets) -> bool:
    presented = _presented_secret(request.headers.get("Authorization", ""))
    return presented is not None and crypto.matches_any_hash(presented, secrets.hashes)


def _alert_key(alert: Any) -> list[str]:
    require(isinstance(alert, dict), "each alert must be an object")
    key = [
        alert.get("fingerprint"),
        alert.get("status"),
        alert.get("startsAt"),
        alert.get("endsAt"),
    ]
    require(
        all(isinstance(part, str) for part in key),
        "each alert needs string fingerprint, status, startsAt and endsAt",
    )
    return key


def parse(request: RawRequest) -> list[InboundEvent]:
    notification = json_object(request.body)
    receiver = notification.get("receiver")
    group_key = notification.get("groupKey")
    status = notification.get("status")
    alerts = notification.get("alerts")
    require(isinstance(receiver, str), "receiver must be a string")
    require(isinstance(group_key, str), "groupKey must be a string")
    require(status in ("firing", "resolved"), "status must be 'firing' or 'resolved'")
    if not isinstance(alerts, list) or not alerts:
        raise errors.MalformedRequest("alerts must be a non-empty list")
    identity = [receiver, group_key, status, sorted(_alert_key(a) for a in alerts)]
    key = digest(identity)
    # The key is derived from the notification's identity, so that identity is also the
    # request digest: a retry whose other fields (annotations, order of alerts) differ is a
    # duplicate, never a 422 that Alertmanager would drop.
    return [InboundEvent(key, notification, key)]


def by_group(run_input: Mapping[str, Any]) -> Correlation | None:
    """A workflow's ``correlate`` for Alertmanager: notifications of one alert group (its
    ``groupKey``) go to the group's open run, as the signal ``firing`` or ``resolved`` (the
    notification's status) — so "the alert resolved" reaches the run that handles it instead
    of starting another. Events of other channels are not correlated."""
    if run_input.get("channel") != CHANNEL:
        return None
    event = run_input.get("event") or {}
    group_key, status = event.get("groupKey"), event.get("status")
    if not isinstance(group_key, str) or status not in ("firing", "resolved"):
        return None
    # A group key can be long: a longer one is stood for by its digest.
    key = group_key if 0 < len(group_key) <= 256 else f"sha256:{digest(group_key)}"
    return Correlation(key=key, signal=status)
