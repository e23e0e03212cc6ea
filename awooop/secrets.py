"""Credential material: random tokens, SHA-256 hashes, encryption at rest, constant-time checks.

Tokens and secrets are never logged. Secrets a provider echoes back verbatim are kept only as
SHA-256 hashes; secrets needed as HMAC keys are encrypted with Fernet (AES-128-CBC +
HMAC-SHA256, from the ``cryptography`` package) under ``AWOOOP_SECRET_KEY``: the newest of
its keys encrypts, any of them decrypts (:class:`SecretBox`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets as _stdlib_secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken, MultiFernet


def new_token(nbytes: int = 32) -> str:
    """A URL-safe random token (32 bytes -> 43 characters) whose first character is not "-":
    a command line's option parser takes such a value for an option (``--token $TOKEN``
    fails with "expected one argument"), and one token in 64 would start with it."""
    while True:
        token = _stdlib_secrets.token_urlsafe(nbytes)
        if not token.startswith("-"):
            return token


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
    """Encrypts channel secrets with the deployment's newest key; decrypts with any of them.

    ``keys`` are ``Settings.secret_keys``, newest first (a single key is a list of one).
    :class:`~cryptography.fernet.MultiFernet` does the work: it encrypts with its first key
    and tries each key in order to decrypt, and its ``rotate`` re-encrypts under the first.
    """

    def __init__(self, keys: str | Sequence[str]) -> None:
        keys = [keys] if isinstance(keys, str) else list(keys)
        if not keys:
            raise ValueError("AWOOOP_SECRET_KEY is not set (generate a key with `awooop dev key`)")
        try:
            self._fernets = [Fernet(key.encode("ascii")) for key in keys]
        except (ValueError, TypeError) as exc:
            raise ValueError(
                "AWOOOP_SECRET_KEY must be urlsafe-base64 32-byte keys "
                "(generate one with `awooop dev key`)"
            ) from exc
        self._multi = MultiFernet(self._fernets)

    def encrypt(self, plaintext: str) -> str:
        return self._multi.encrypt(plaintext.encode("utf-8")).decode("ascii")

    def decrypt(self, token: str) -> str | None:
        """The plaintext, or None when the value was encrypted under none of the keys."""
        try:
            return self._multi.decrypt(token.encode("ascii")).decode("utf-8")
        except InvalidToken:
            return None

    def reseal(self, token: str) -> Resealed:
        """``token`` encrypted under the newest key: unchanged when it already is, so running
        a re-encryption twice writes nothing the second time; ``token`` None when no key
        opens it."""
        data = token.encode("ascii")
        try:
            self._fernets[0].decrypt(data)
            return Resealed(token, changed=False)
        except InvalidToken:
            pass
        try:
            return Resealed(self._multi.rotate(data).decode("ascii"), changed=True)
        except InvalidToken:
            return Resealed(None, changed=False)


@dataclass(frozen=True)
class Resealed:
    """What :meth:`SecretBox.reseal` made of one stored token."""

    token: str | None  # None: none of the keys decrypts it
    changed: bool
