"""Credential material: random tokens, SHA-256 hashes, encryption at rest, constant-time checks.

Tokens and secrets are never logged. Secrets a provider echoes back verbatim are kept only as
SHA-256 hashes; secrets needed as HMAC keys are encrypted with Fernet (AES-128-CBC +
HMAC-SHA256, from the ``cryptography`` package) under ``AWOOOP_SECRET_KEY``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets as _stdlib_secrets
from collections.abc import Callable, Iterable, Sequence

from cryptography.fernet import Fernet, InvalidToken


def new_token(nbytes: int = 32) -> str:
    """A URL-safe random token (32 bytes -> 43 characters)."""
    return _stdlib_secrets.token_urlsafe(nbytes)


def new_encryption_key() -> str:
    return Fernet.generate_key().decode("ascii")


def sha256_hex(value: str | bytes) -> str:
    data = value.encode("utf-8") if isinstance(value, str) else value
    return hashlib.sha256(data).hexdigest()


def matches_any_hash(presented: str, stored_hashes: Iterable[str]) -> bool:
    """Constant-time check of a presented secret against every active stored hash."""
    presented_hash = sha256_hex(presented).encode("ascii")
    found = False
    for stored in stored_hashes:
        # No early exit: every candidate is compared.
        found |= hmac.compare_digest(presented_hash, stored.encode("ascii"))
    return found


def index_of_matching_hash(presented: str, stored_hashes: Sequence[str]) -> int | None:
    """Which stored hash the presented secret matches (None: none), in constant time."""
    presented_hash = sha256_hex(presented).encode("ascii")
    found: int | None = None
    for index, stored in enumerate(stored_hashes):
        # No early exit: every candidate is compared.
        if hmac.compare_digest(presented_hash, stored.encode("ascii")) and found is None:
            found = index
    return found


def hmac_sha256(key: str, body: bytes) -> bytes:
    return hmac.new(key.encode("utf-8"), body, hashlib.sha256).digest()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def any_hmac_matches(
    presented: str, body: bytes, keys: Iterable[str], encode: Callable[[bytes], str]
) -> bool:
    """Whether ``presented`` is the encoded HMAC-SHA256 of ``body`` under any of ``keys``.

    Every key is tried (no early exit) and compared in constant time.
    """
    if not presented:
        return False
    found = False
    for key in keys:
        expected = encode(hmac_sha256(key, body))
        found |= hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))
    return found


class SecretBox:
    """Encrypts and decrypts channel secrets with the deployment's key."""

    def __init__(self, key: str) -> None:
        try:
            self._fernet = Fernet(key.encode("ascii"))
        except (ValueError, TypeError) as exc:
            raise ValueError(
                "AWOOOP_SECRET_KEY must be a urlsafe-base64 32-byte key "
                "(generate one with `awooop dev key`)"
            ) from exc

    def encrypt(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode("utf-8")).decode("ascii")

    def decrypt(self, token: str) -> str | None:
        """The plaintext, or None when the value was encrypted under another key."""
        try:
            return self._fernet.decrypt(token.encode("ascii")).decode("utf-8")
        except InvalidToken:
            return None
