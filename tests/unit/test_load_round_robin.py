"""``bench.load.RoundRobin`` spreads a load's requests over several projects (make bench-growth)."""

from __future__ import annotations

import pytest

from bench.load import LoadError, Requests, RoundRobin, unique_keys


def project_requests(project_id: str, limit: int | None = None) -> Requests:
    return Requests(
        "POST",
        f"/v1/projects/{project_id}/runs",
        {"Authorization": f"Bearer token-of-{project_id}"},
        b"{}",
        key_header="Idempotency-Key",
        keys=unique_keys(project_id),
        limit=limit,
    )


def request_line(request: bytes) -> str:
    return request.split(b"\r\n", 1)[0].decode()


def header(request: bytes, name: str) -> str:
    for line in request.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        key, _, value = line.decode().partition(": ")
        if key == name:
            return value
    raise AssertionError(f"no {name} header in {request!r}")


def test_consecutive_requests_go_to_each_project_in_turn():
    source = RoundRobin([project_requests(p) for p in ("p0", "p1", "p2")])

    lines = [request_line(source.next() or b"") for _ in range(7)]

    assert lines == [
        f"POST /v1/projects/{p}/runs HTTP/1.1" for p in ("p0", "p1", "p2", "p0", "p1", "p2", "p0")
    ]


def test_each_request_carries_its_projects_token_and_a_key_of_its_own():
    source = RoundRobin([project_requests(p) for p in ("p0", "p1")])

    requests = [source.next() or b"" for _ in range(4)]

    assert [header(r, "Authorization") for r in requests] == [
        "Bearer token-of-p0",
        "Bearer token-of-p1",
        "Bearer token-of-p0",
        "Bearer token-of-p1",
    ]
    assert [header(r, "Idempotency-Key") for r in requests] == ["p0-0", "p1-0", "p0-1", "p1-1"]


def test_the_limit_caps_the_total_and_issued_counts_what_was_given_out():
    source = RoundRobin([project_requests(p) for p in ("p0", "p1", "p2")], limit=4)

    given = [source.next() for _ in range(6)]

    assert [r is not None for r in given] == [True] * 4 + [False] * 2
    assert source.issued == 4


def test_an_exhausted_project_is_skipped_and_the_end_comes_when_all_are():
    source = RoundRobin([project_requests("p0", limit=1), project_requests("p1", limit=3)])

    lines = []
    while (request := source.next()) is not None:
        lines.append(request_line(request))

    assert lines == [
        "POST /v1/projects/p0/runs HTTP/1.1",
        "POST /v1/projects/p1/runs HTTP/1.1",
        "POST /v1/projects/p1/runs HTTP/1.1",
        "POST /v1/projects/p1/runs HTTP/1.1",
    ]
    assert source.issued == 4


def test_no_projects_is_refused():
    with pytest.raises(LoadError):
        RoundRobin([])
