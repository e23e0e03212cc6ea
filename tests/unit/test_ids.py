"""Time-ordered row ids (RFC 9562 version 7)."""

from __future__ import annotations

import time
import uuid

from awooop import ids


def test_a_uuid7_is_a_version_7_rfc_uuid_carrying_the_time_in_ms():
    before = time.time_ns() // 1_000_000
    value = ids.uuid7()
    after = time.time_ns() // 1_000_000

    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert before <= value.int >> 80 <= after


def test_uuid7s_of_later_milliseconds_sort_after_earlier_ones_and_never_repeat():
    first = [ids.uuid7() for _ in range(1000)]
    time.sleep(0.002)
    later = [ids.uuid7() for _ in range(1000)]

    assert max(first) < min(later)
    assert len(set(first + later)) == 2000
