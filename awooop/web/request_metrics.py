"""How long the web process takes to answer, by route and status class
(``awooop_http_request_duration_seconds``).

The clock starts in the first ``before_request`` hook and stops in an ``after_request`` hook,
so error answers (turned into responses by the error handlers) are timed too. The route is
the Flask URL rule the request matched — its template, ``/v1/projects/<project_id>/runs``,
never the path — so the label's values are the application's routes plus ``unmatched``; the
status is its class (``2xx`` …). A request that never reaches ``after_request`` (the
connection dropped mid-answer) is not timed.
"""

from __future__ import annotations

import time

from flask import Flask, Response, g, request

from awooop import metrics

_STARTED = "awooop_request_started"


def install(app: Flask) -> None:
    """Time every request ``app`` answers."""
    app.before_request_funcs.setdefault(None, []).insert(0, _start)
    app.after_request(_observe)


def _start() -> None:
    setattr(g, _STARTED, time.perf_counter())


def _observe(response: Response) -> Response:
    started = getattr(g, _STARTED, None)
    if started is not None:
        rule = request.url_rule.rule if request.url_rule is not None else None
        metrics.HTTP_REQUEST_DURATION.labels(
            metrics.route_label(rule), metrics.status_class(response.status_code)
        ).observe(time.perf_counter() - started)
    return response
