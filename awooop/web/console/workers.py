"""``GET /console/workers``: the worker processes the system knows, as ``awooop workers`` and
``GET /v1/projects/{p}/workers`` show them (:func:`awooop.store.workers.list_for_project`):
host, pid, started, last beat (by the database's clock), judged dead, and how many of the
signed-in project's RUNNING runs each holds — never another project's. Any console role."""

from __future__ import annotations

from datetime import timedelta

from flask import g, request
from werkzeug.wrappers import Response as HttpResponse

from awooop.store import workers as store_workers
from awooop.web import context, params, roles
from awooop.web.console.base import blueprint, given, page


@blueprint.get("/workers")
def workers() -> HttpResponse:
    caller: roles.Caller = g.caller
    params.check_known(given(request.args), ())
    with context.read_engine().connect() as conn:
        rows = store_workers.list_for_project(conn, caller.project_id)
    for row in rows:
        row["seen_ago"] = timedelta(seconds=row["seen_seconds_ago"])
    return page(
        "console/workers.html",
        workers=rows,
        liveness=context.settings().worker_liveness_interval_seconds,
    )
