"""The body limit through a real HTTP server (gunicorn), whatever the framing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests as http

from tests.support import db
from tests.support import requests as channel_requests

pytestmark = pytest.mark.slow

LIMIT = 64 * 1024


def chunks(raw: bytes, size: int = 8192) -> Iterator[bytes]:
    """A generator body: requests sends it ``Transfer-Encoding: chunked``, no Content-Length."""
    for start in range(0, len(raw), size):
        yield raw[start : start + size]


@pytest.mark.parametrize("channel", ["telegram", "gitea", "api"])
def test_a_chunked_body_over_the_limit_is_refused_with_413(stack, engine, project, channel):
    stack.env["AWOOOP_MAX_BODY_BYTES"] = str(LIMIT)
    _, base = stack.web()
    # A complete event, then whitespace past the limit: valid JSON, signed over all of it.
    path, headers, raw = channel_requests.valid(channel, project)
    raw += b" " * LIMIT
    headers = channel_requests.resign(project, path, headers, raw)

    response = http.post(base + path, headers=headers, data=chunks(raw), timeout=30)

    assert response.request.headers.get("Transfer-Encoding") == "chunked"
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "E-REQUEST-002"
    assert db.count(engine, "awooop_run_state") == 0


def test_a_chunked_body_within_the_limit_is_admitted(stack, engine, project):
    stack.env["AWOOOP_MAX_BODY_BYTES"] = str(LIMIT)
    _, base = stack.web()
    path, headers, raw = channel_requests.api(project)

    response = http.post(base + path, headers=headers, data=chunks(raw, 7), timeout=30)

    assert response.request.headers.get("Transfer-Encoding") == "chunked"
    assert response.status_code == 202, response.text
    assert db.count(engine, "awooop_run_state") == 1
