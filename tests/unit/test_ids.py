"""Ids: time-ordered (RFC 9562 version 7) and random (version 4), from a buffered source."""

from __future__ import annotations

import os
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


def test_a_uuid4_is_a_version_4_rfc_uuid_and_never_repeats_across_refills():
    values = [ids.uuid4() for _ in range(2000)]  # 32,000 bytes: several reads of the kernel

    assert {v.version for v in values} == {4}
    assert {v.variant for v in values} == {uuid.RFC_4122}
    assert len(set(values)) == len(values)


def test_a_uuid4_text_is_the_text_of_a_version_4_rfc_uuid_with_the_source_s_random_bits(
    monkeypatch,
):
    values = [ids.uuid4_text() for _ in range(2000)]
    parsed = [uuid.UUID(v) for v in values]

    assert [str(p) for p in parsed] == values  # the canonical form: lower case, hyphenated
    assert {p.version for p in parsed} == {4}
    assert {p.variant for p in parsed} == {uuid.RFC_4122}
    assert len(set(values)) == len(values)
    # Every bit but the six of the version and variant is the source's.
    monkeypatch.setattr(ids, "random_bytes", lambda n: b"\xff" * n)
    assert ids.uuid4_text() == "ffffffff-ffff-4fff-bfff-ffffffffffff"
    monkeypatch.setattr(ids, "random_bytes", lambda n: b"\x00" * n)
    assert ids.uuid4_text() == "00000000-0000-4000-8000-000000000000"


def test_random_bytes_hands_out_each_byte_once_and_reads_the_kernel_a_chunk_at_a_time(
    monkeypatch,
):
    chunks: list[bytes] = []
    kernel = os.urandom

    def urandom(n: int) -> bytes:
        chunks.append(kernel(n))
        return chunks[-1]

    monkeypatch.setattr(ids.os, "urandom", urandom)
    source = ids._RandomBuffer()

    taken = [source.take(10) for _ in range(1000)]  # 10,000 bytes

    assert [len(c) for c in chunks] == [4096, 4096, 4096]
    # 409 slices from each chunk, in order; the 6 bytes left at a chunk's end are dropped.
    expected = [c[i : i + 10] for c in chunks for i in range(0, 4090, 10)][:1000]
    assert taken == expected
    assert len(source.take(5000)) == 5000 and len(chunks[-1]) == 5000


def test_a_forked_child_does_not_hand_out_its_parents_bytes():
    ids.random_bytes(1)  # the parent's buffer holds unread bytes now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        os.write(write, ids.random_bytes(64))
        os._exit(0)
    os.close(write)
    child = os.read(read, 64)
    os.waitpid(pid, 0)
    os.close(read)

    assert len(child) == 64
    assert child != ids.random_bytes(64)
