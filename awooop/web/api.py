"""The read API: ``GET /v1/projects/{project_id}/runs/{run_id}``."""

from __future__ import annotations

import uuid
from typing import Any

from flask import Blueprint, Response, jsonify, request

from awooop import errors
from awooop.channels import api as api_channel
from awooop.channels.base import json_object
from awooop.engine import tools
from awooop.secrets import matches_any_hash
from awooop.store import runs
from awooop.web import context
from awooop.web.ingress import ADMIT_ROLES

blueprint = Blueprint("api", __name__)

READ_ROLES = frozenset({"viewer", "operator", "admin"})


def _authenticate(project_id: str, roles: frozenset[str]) -> None:
    """A Bearer API token of this project with one of ``roles``, or 401 (alike for an unknown
    project)."""
    token = api_channel.bearer_token(context.raw_request())
    auth = context.project_auth(project_id, "api")
    hashes = [c.secret_hash for c in (auth.api_tokens() if auth else []) if c.role in roles]
    if token is None or not matches_any_hash(token, [h for h in hashes if h]):
        raise errors.Unauthenticated()


@blueprint.get("/v1/projects/<project_id>/runs/<run_id>")
def get_run(project_id: str, run_id: str) -> Response:
    _authenticate(project_id, READ_ROLES)
    try:
        parsed_id = uuid.UUID(run_id)
    except ValueError:
        parsed_id = None
    run = None
    if parsed_id is not None:
        with context.engine().connect() as conn:
            run = runs.get_run(conn, project_id, parsed_id)
    if run is None:
        raise errors.NotFound("no such run in this project")
    return jsonify(_public(run))


@blueprint.post("/v1/projects/<project_id>/runs/<run_id>/tool-results")
def tool_result(project_id: str, run_id: str) -> tuple[Response, int]:
    """An asynchronous tool call's result, deduplicated by its event id."""
    _authenticate(project_id, ADMIT_ROLES)
    if request.mimetype != "application/json":
        raise errors.UnsupportedMediaType()
    body = json_object(request.get_data(cache=True))
    try:
        parsed_id = uuid.UUID(run_id)
    except ValueError:
        raise errors.NotFound("no such run in this project") from None
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


def _public(run: dict[str, Any]) -> dict[str, Any]:
    out = dict(run)
    out["run_id"] = str(run["run_id"])
    for key in ("lease_until", "created_at", "updated_at", "finished_at"):
        out[key] = run[key].isoformat() if run[key] is not None else None
    return out
