"""Signing outbound webhooks with the Standard Webhooks scheme (https://www.standardwebhooks.com),
so a receiver can verify them with an existing library (``standardwebhooks`` on PyPI, and its
ports to other languages).

Every delivery carries three headers:

- ``webhook-id``: the outbox message id — the same on every retry of one message, so
  receivers drop repeats by it;
- ``webhook-timestamp``: the attempt's time, whole seconds since the epoch (database clock),
  new on every retry — receivers refuse a timestamp outside their tolerance (the libraries'
  default is five minutes either way), so a captured delivery cannot be replayed later;
- ``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``, one per
  active signing secret, space-separated (a receiver accepts any one: secrets rotate with no
  downtime).

A signing secret is ``whsec_`` followed by the base64 of 24 to 64 random bytes; the HMAC key
is those bytes. A secret stored before this scheme (any other string) keeps working: its HMAC
key is the string's UTF-8 bytes (the receiver passes those bytes to the library).

The legacy ``X-AwoooP-Signature`` header (``sha256=<hex HMAC-SHA256 of the body>``, keyed by
the newest secret as a string) and ``X-AwoooP-Delivery`` are still sent: deprecated since
0.1.0, removed no earlier than 0.3.0 (docs/webhooks.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets as _stdlib_secrets

from awooop import secrets as crypto

PREFIX = "whsec_"
MIN_KEY_BYTES = 24
MAX_KEY_BYTES = 64
NEW_KEY_BYTES = 32


class BadSecret(ValueError):
    """A ``whsec_`` secret whose rest is not the base64 of 24 to 64 bytes."""


def new_secret() -> str:
    """A fresh signing secret in the scheme's format: ``whsec_<base64 of 32 random bytes>``."""
    return PREFIX + base64.b64encode(_stdlib_secrets.token_bytes(NEW_KEY_BYTES)).decode("ascii")


def key_of(secret: str) -> bytes:
    """The HMAC key of a stored secret: the decoded bytes of a ``whsec_`` secret, else (a
    secret from before this scheme) the string's UTF-8 bytes. Raises :class:`BadSecret`."""
    if not secret.startswith(PREFIX):
        return secret.encode("utf-8")
    try:
        key = base64.b64decode(secret[len(PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise BadSecret("a whsec_ secret must be whsec_ and standard base64") from None
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise BadSecret(
            f"a whsec_ secret must hold {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes, not {len(key)}"
        )
    return key


def signature(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256 of "{webhook_id}.{timestamp}.{body}">``."""
    signed = b"%s.%d.%s" % (webhook_id.encode("ascii"), timestamp, body)
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def headers(webhook_id: str, timestamp: int, body: bytes, secrets: list[str]) -> dict[str, str]:
    """The Standard Webhooks headers, signed with every secret (newest first), plus the
    legacy ``X-AwoooP-Signature`` / ``X-AwoooP-Delivery`` (deprecated; newest secret only)."""
    if "." in webhook_id or not webhook_id.isascii():
        raise ValueError("a webhook id is ASCII without '.' (it is part of the signed text)")
    signatures = " ".join(signature(key_of(s), webhook_id, timestamp, body) for s in secrets)
    legacy = crypto.hmac_sha256(secrets[0], body).hex()
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signatures,
        "X-AwoooP-Signature": f"sha256={legacy}",
        "X-AwoooP-Delivery": webhook_id,
    }
