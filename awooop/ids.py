"""Ids: time-ordered UUIDs (RFC 9562 version 7) for rows that keep an index small in memory,
and random ones (version 4), both from a buffered cryptographic source.

A random (version 4) id sends every insert to a random leaf of its primary-key index: with a
week of dedupe rows (10,000,000 in the retention benchmark) that index outgrows the buffer
cache, and each admission reads (and, after a checkpoint, logs a full page image of) a leaf
page nobody else needs. A version 7 id starts with the time in milliseconds, so new rows go
to the right edge of the index, which stays in memory; 74 random bits keep ids unique.

Used for dedupe rows, which nobody sees. Run ids stay random: people tell runs apart by the
first characters of their ids (the console shows eight), which a time prefix would make
alike for every run of the same minute.

The time comes from this process's clock: it only orders index entries, nothing relies on
it (the database's clock decides leases, timers and retention). Python 3.14's
``uuid.uuid7`` can replace this function.

Random bits come from :func:`random_bytes`: the kernel's generator read 4 KiB at a time. Each
``os.urandom`` is a system call that gives up the GIL; on a web worker with many request
threads each of those is a wait to take the GIL back, and an admission used five (its run
id, its dedupe id and the two ids of the run's message).
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_MS_MASK = (1 << 48) - 1
_RAND_B_MASK = (1 << 62) - 1


# How much of the kernel's randomness one read takes.
_CHUNK = 4096


class _RandomBuffer:
    """``os.urandom`` read a chunk at a time and handed out in slices, each byte once. A
    forked child starts empty (it must not hand out its parent's bytes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffer = b""
        self._offset = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            end = self._offset + n
            if end > len(self._buffer):
                self._buffer, self._offset, end = os.urandom(max(_CHUNK, n)), 0, n
            piece = self._buffer[self._offset : end]
            self._offset = end
            return piece

    def forget(self) -> None:
        self._lock = threading.Lock()
        self._buffer, self._offset = b"", 0


_random = _RandomBuffer()
os.register_at_fork(after_in_child=_random.forget)


def random_bytes(n: int) -> bytes:
    """``n`` bytes from the kernel's cryptographic generator (as ``os.urandom``)."""
    return _random.take(n)


def uuid4() -> uuid.UUID:
    """A random (version 4) UUID, as ``uuid.uuid4``."""
    return uuid.UUID(bytes=random_bytes(16), version=4)


def uuid4_text() -> str:
    """``str(uuid4())`` without the UUID object, which costs three times what the text does
    (a run message writes two of these)."""
    raw = bytearray(random_bytes(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # variant 10 (RFC 4122)
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def uuid7() -> uuid.UUID:
    """48 bits of Unix time in ms, version 7, 12 random bits, variant 10, 62 random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(random_bytes(10), "big")
    value = (ms & _MS_MASK) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & _RAND_B_MASK
    return uuid.UUID(int=value)
