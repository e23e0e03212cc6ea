"""``make bench-growth`` (bench.growth): its block of docs/benchmarks.md, which ``make bench``
must keep, and the sizes and model it reports."""

from __future__ import annotations

import json

import pytest

from bench import load, report
from bench.growth import BEGIN, BIG_BODY_MIN, END, auth_miss_share, big_body

BLOCK = f"{BEGIN}\nnew figures\n{END}\n"


def publish(path, block=BLOCK):
    report.publish(path, block, BEGIN, END, path.parent)


def test_the_old_block_is_replaced_and_the_text_around_it_kept(tmp_path):
    path = tmp_path / "benchmarks.md"
    path.write_text(
        f"# Benchmarks\n\n{report.MARKER}\nnotes\n\n{BEGIN}\nold\n{END}\n\nmore notes\n"
    )

    publish(path)

    assert path.read_text() == f"# Benchmarks\n\n{report.MARKER}\nnotes\n\n{BLOCK}\nmore notes\n"


def test_a_first_block_goes_at_the_end_below_make_bench_s_marker(tmp_path):
    # make bench rewrites the file down to its marker and keeps what lies below it
    path = tmp_path / "benchmarks.md"
    path.write_text(f"# Benchmarks\n\nfigures of make bench\n\n{report.MARKER}\nnotes\n")

    publish(path)

    text = path.read_text()
    assert text == f"# Benchmarks\n\nfigures of make bench\n\n{report.MARKER}\nnotes\n\n{BLOCK}"
    assert BLOCK in text.partition(report.MARKER)[2]


def test_make_bench_keeps_the_block_when_it_rewrites_the_file(tmp_path):
    # Given a document that make bench wrote, then make bench-growth
    path = tmp_path / "benchmarks.md"
    path.write_text(f"# Benchmarks\n\nold figures\n\n{report.MARKER}\nnotes\n")
    publish(path)

    # When make bench rewrites it
    report.write_page(path, f"# Benchmarks\n\nnew figures of make bench\n\n{report.MARKER}\n")

    # Then its page is new, and what lay below its marker is kept
    assert path.read_text() == (
        f"# Benchmarks\n\nnew figures of make bench\n\n{report.MARKER}\nnotes\n\n{BLOCK}"
    )


def test_writing_the_same_block_twice_changes_nothing(tmp_path):
    path = tmp_path / "benchmarks.md"
    path.write_text(f"# Benchmarks\n\n{report.MARKER}\n")
    publish(path)
    once = path.read_text()

    publish(path)

    assert path.read_text() == once


def test_a_document_without_make_bench_s_marker_gets_it_before_the_block(tmp_path):
    path = tmp_path / "docs" / "benchmarks.md"

    publish(path)

    assert path.read_text() == f"{report.MARKER}\n\n{BLOCK}"


@pytest.mark.parametrize("size", [64 * 1024, 1001, BIG_BODY_MIN])
def test_the_big_body_is_a_json_object_of_exactly_the_size_asked(size):
    body = big_body(size)

    assert len(body) == size
    assert json.loads(body)["summary"] == json.loads(load.BODY)["summary"]


def test_a_body_too_small_for_the_event_s_fields_is_refused():
    with pytest.raises(report.BenchError):
        big_body(BIG_BODY_MIN - 1)


def test_one_project_misses_the_auth_cache_once_per_worker_and_ttl():
    # 4 workers each read the one project every 5 s; 1,000 req/s answer 5,000 requests meanwhile
    assert auth_miss_share(1, 4, ttl=5.0, rps=1000.0) == pytest.approx(4 / 5000)


def test_with_more_projects_than_requests_per_ttl_every_request_misses():
    assert auth_miss_share(1000, 4, ttl=5.0, rps=600.0) == 1.0


def test_without_the_cache_every_request_misses():
    assert auth_miss_share(1, 4, ttl=0.0, rps=1000.0) == 1.0
