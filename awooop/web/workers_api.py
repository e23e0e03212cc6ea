"""``GET /v1/projects/{project_id}/workers``: the worker processes the system knows.

Worker processes are shared: each serves every project, so the list is the deployment's
(every row of ``awooop_worker``: a process that has held a lease, until the reaper prunes
it), and what it says of runs is the caller's project's only — ``runs_held`` counts that
project's RUNNING runs the worker holds, never another's. A host name and a pid are all it
shows of a process. ``seen_seconds_ago`` is measured by the database's clock (a live worker
beats every ``AWOOOP_WORKER_LIVENESS_INTERVAL_SECONDS``); ``judged_dead_at`` is set when the
reaper took the worker's runs. Role ``viewer`` or above. Not paged: a deployment has a
handful of workers.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from awooop.store import workers
from awooop.web import context, params, roles
from awooop.web.runs_api import jsonable

blueprint = Blueprint("workers_api", __name__)


@blueprint.get("/v1/projects/<project_id>/workers")
def list_workers(project_id: str) -> Response:
    caller = roles.authenticate(project_id, roles.READ)
    params.check_known(request.args, ())
    with context.engine().connect() as conn:
        rows = workers.list_for_project(conn, caller.project_id)
    return jsonify({"workers": [jsonable(row) for row in rows]})
