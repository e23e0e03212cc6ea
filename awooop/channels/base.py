"""What every channel module shares: the raw request, the parsed event, digests."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from awooop import errors


@dataclass(frozen=True)
class RawRequest:
    """The parts of an HTTP request a channel may look at (no Flask objects below web/)."""

    headers: Mapping[str, str]  # case-insensitive: werkzeug Headers in production
    body: bytes
    # Every value of each query parameter, in order: a parameter given twice is seen as such.
    query: Mapping[str, Sequence[str]] = field(default_factory=dict)


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


def run_input(channel: str, event: InboundEvent, config: dict[str, Any]) -> dict[str, Any]:
    """A run's input: the event as admitted, and the project's configuration as it was then."""
    return {
        "channel": channel,
        "provider_event_id": event.provider_event_id,
        "event": event.payload,
        "meta": event.meta,
        "project": config,
    }


class ChannelModule(Protocol):
    CHANNEL: str

    def authenticate(self, request: RawRequest, secrets: ChannelSecrets) -> bool: ...

    def parse(self, request: RawRequest) -> list[InboundEvent]: ...


MAX_EVENT_ID_LENGTH = 256
# How deep a request body's JSON may nest (the body's own object is one level). Python's
# parser reads about 1,000 levels, and a run whose input is that deep cannot be decoded by
# the worker (psycopg2 parses JSONB with the same recursive parser, deeper in a stack):
# refused at the door with a 400 instead. Real webhook payloads nest fewer than 10 levels.
MAX_JSON_DEPTH = 64


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


# Made once: ``json.loads`` with these options would build a decoder for every request.
_DECODER = json.JSONDecoder(parse_float=_finite, parse_constant=_not_json)


def storable_text(text: str) -> bool:
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


_UNSTORABLE = "request body strings must not contain \\u0000 or unpaired surrogates"
_TOO_DEEP = f"request body must not nest deeper than {MAX_JSON_DEPTH} levels of objects and arrays"


def _check_value(value: Any) -> None:
    """Refuse what PostgreSQL cannot store or the worker cannot decode: unstorable strings
    and keys, nesting deeper than :data:`MAX_JSON_DEPTH`. One walk, no recursion."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_JSON_DEPTH:
            raise errors.MalformedRequest(_TOO_DEEP)
        children = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in children:
            if isinstance(key, str) and not storable_text(key):
                raise errors.MalformedRequest(_UNSTORABLE)
            if isinstance(child, str):
                if not storable_text(child):
                    raise errors.MalformedRequest(_UNSTORABLE)
            elif isinstance(child, dict | list):
                pending.append((child, depth + 1))


def json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 that says what is wrong.

    Refused besides malformed JSON: what PostgreSQL could not store — ``NaN`` and
    ``Infinity`` (not JSON, though Python reads them), numbers beyond a double's range,
    ``\\u0000`` and unpaired surrogates in strings or keys — and nesting deeper than
    :data:`MAX_JSON_DEPTH`, which the worker could not decode.
    """
    try:
        # Read as json.loads reads bytes: UTF-8, -16 or -32, lone surrogates kept (and
        # refused below).
        text = (
            body
            if isinstance(body, str)
            else body.decode(json.detect_encoding(body), "surrogatepass")
        )
        value = _DECODER.decode(text)
    except RecursionError:  # far deeper than MAX_JSON_DEPTH
        raise errors.MalformedRequest(_TOO_DEEP) from None
    except (ValueError, UnicodeDecodeError):
        raise errors.MalformedRequest("request body is not valid JSON") from None
    if not isinstance(value, dict):
        raise errors.MalformedRequest("request body must be a JSON object")
    _check_value(value)
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
