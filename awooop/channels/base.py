"""What every channel module shares: the raw request, the parsed event, digests."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from awooop import errors


@dataclass(frozen=True)
class RawRequest:
    """The parts of an HTTP request a channel may look at (no Flask objects below web/)."""

    headers: Mapping[str, str]  # case-insensitive: werkzeug Headers in production
    body: bytes
    query: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ChannelSecrets:
    """The project's active secrets for one channel (several during a rotation).

    ``hashes``: SHA-256 of secrets the provider echoes back (compare a hash).
    ``hmac_keys``: a callable giving the decrypted HMAC keys, decrypted only when needed.
    """

    hashes: tuple[str, ...] = ()
    hmac_keys: Callable[[], list[str]] = field(default=lambda: [])


@dataclass(frozen=True)
class InboundEvent:
    provider_event_id: str
    payload: Any
    # SHA-256 of the canonical request: same key, different body -> E-IDEMPOTENT-002.
    request_digest: str
    # Channel facts that are not in the payload (e.g. the Gitea event type header).
    meta: dict[str, Any] = field(default_factory=dict)


class ChannelModule(Protocol):
    CHANNEL: str

    def authenticate(self, request: RawRequest, secrets: ChannelSecrets) -> bool: ...

    def parse(self, request: RawRequest) -> list[InboundEvent]: ...


MAX_EVENT_ID_LENGTH = 256


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:32]}")
    return value


def _not_json(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _storable_text(text: str) -> bool:
    """PostgreSQL text and jsonb cannot hold U+0000, and UTF-8 cannot encode a lone
    surrogate (``"\\ud800"`` is valid JSON but no character)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _storable(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not _storable_text(item):
                return False
        elif isinstance(item, dict):
            for key, child in item.items():
                if not _storable_text(key):
                    return False
                pending.append(child)
        elif isinstance(item, list):
            pending.extend(item)
    return True


def json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 that says what is wrong.

    Refused besides malformed JSON: what PostgreSQL could not store — ``NaN`` and
    ``Infinity`` (not JSON, though Python reads them), numbers beyond a double's range,
    ``\\u0000`` and unpaired surrogates in strings or keys.
    """
    try:
        value = json.loads(body, parse_float=_finite, parse_constant=_not_json)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: deep nesting
        raise errors.MalformedRequest("request body is not valid JSON") from None
    if not isinstance(value, dict):
        raise errors.MalformedRequest("request body must be a JSON object")
    if not _storable(value):
        raise errors.MalformedRequest(
            "request body strings must not contain \\u0000 or unpaired surrogates"
        )
    return value


def require(condition: bool, message: str) -> None:
    if not condition:
        raise errors.MalformedRequest(message)


def event_id(value: str) -> str:
    require(
        0 < len(value) <= MAX_EVENT_ID_LENGTH,
        f"event id must be 1 to {MAX_EVENT_ID_LENGTH} characters",
    )
    return value
