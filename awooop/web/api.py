"""``GET /v1/projects/{project_id}/runs/{run_id}`` (the run with its step journal) and
``POST …/runs/{run_id}/tool-results``.

The run's ``version`` is also its ``ETag``: send it back as ``If-Match`` with a management
operation to act only if nothing changed since you looked.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from awooop import errors
from awooop.channels.base import json_object
from awooop.engine import tools
from awooop.store import runs
from awooop.web import context, request_body, roles
from awooop.web.runs_api import jsonable, run_id_or_404

blueprint = Blueprint("api", __name__)


@blueprint.get("/v1/projects/<project_id>/runs/<run_id>")
def get_run(project_id: str, run_id: str) -> Response:
    """The run: both status axes, input, output, failure, lease, and ``saga_steps`` — the step
    journal, one entry per recorded step attempt in order."""
    caller = roles.authenticate(project_id, roles.READ)
    parsed_id = run_id_or_404(run_id)
    with context.engine().connect() as conn:
        run = runs.get_run(conn, caller.project_id, parsed_id)
    if run is None:
        raise errors.NotFound("no such run in this project")
    response = jsonify(jsonable(run))
    response.set_etag(str(run["version"]))
    return response


@blueprint.post("/v1/projects/<project_id>/runs/<run_id>/tool-results")
def tool_result(project_id: str, run_id: str) -> tuple[Response, int]:
    """An asynchronous tool call's result, deduplicated by its event id."""
    roles.authenticate(project_id, roles.ADMIT)
    if request.mimetype != "application/json":
        raise errors.UnsupportedMediaType()
    body = json_object(request_body.read())
    parsed_id = run_id_or_404(run_id)
    outcome = tools.deliver_result(
        context.engine(),
        project_id,
        parsed_id,
        event_id=body.get("event_id"),
        step=body.get("step"),
        status=body.get("status"),
        output=body.get("output"),
        error=body.get("error"),
    )
    delivery = outcome.delivery
    if delivery.duplicate:
        return jsonify({"status": "duplicate", "code": errors.DUPLICATE_EVENT_CODE}), 200
    if not delivery.accepted:
        late: dict[str, Any] = {"status": "late", "run_status": delivery.run_status}
        if outcome.compensation_run_id is not None:
            context.enqueue([outcome.compensation_run_id])
            late["compensation_run_id"] = str(outcome.compensation_run_id)
        return jsonify(late), 200
    context.enqueue([parsed_id])
    return jsonify({"status": "accepted"}), 202
