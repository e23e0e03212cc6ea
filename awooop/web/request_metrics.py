"""What the web process answers, counted and timed: ``awooop_http_responses_total`` by Flask
endpoint and status code, and ``awooop_http_request_duration_seconds`` by route and status
class.

The clock starts in the first ``before_request`` hook and stops in an ``after_request`` hook,
so error answers (turned into responses by the error handlers) are counted and timed too. The
route is the Flask URL rule the request matched — its template,
``/v1/projects/<project_id>/runs``, never the path — so the label's values are the
application's routes plus ``unmatched``; the status is its class (``2xx`` …). A request that
never reaches ``after_request`` (the connection dropped mid-answer) is neither.

Each label combination's child metric is looked up once per process and kept: the labels
come from the application's endpoints and status codes, a bounded set.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Flask, Response, g, request

from awooop import metrics

_STARTED = "awooop_request_started"

# (endpoint, route, status code) → (the responses counter's child, the duration's child)
_children: dict[tuple[str | None, str | None, int], tuple[Any, Any]] = {}


def install(app: Flask) -> None:
    """Count and time every request ``app`` answers."""
    app.before_request_funcs.setdefault(None, []).insert(0, _start)
    app.after_request(_observe)


def _start() -> None:
    setattr(g, _STARTED, time.perf_counter())


def _observe(response: Response) -> Response:
    started = getattr(g, _STARTED, None)
    rule = request.url_rule
    key = (request.endpoint, rule.rule if rule is not None else None, response.status_code)
    try:
        answered, duration = _children[key]
    except KeyError:
        answered, duration = _children[key] = _labelled(*key)
    answered.inc()
    if started is not None:
        duration.observe(time.perf_counter() - started)
    return response


def _labelled(endpoint: str | None, rule: str | None, code: int) -> tuple[Any, Any]:
    return (
        metrics.HTTP_RESPONSES.labels(endpoint or metrics.UNMATCHED_ROUTE, str(code)),
        metrics.HTTP_REQUEST_DURATION.labels(metrics.route_label(rule), metrics.status_class(code)),
    )
