"""Row ids that keep an index small in memory: time-ordered UUIDs (RFC 9562 version 7).

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
"""

from __future__ import annotations

import os
import time
import uuid

_MS_MASK = (1 << 48) - 1
_RAND_B_MASK = (1 << 62) - 1


def uuid7() -> uuid.UUID:
    """48 bits of Unix time in ms, version 7, 12 random bits, variant 10, 62 random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & _MS_MASK) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & _RAND_B_MASK
    return uuid.UUID(int=value)
