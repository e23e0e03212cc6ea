"""The read API: ``GET /v1/projects/{project_id}/runs/{run_id}``."""

from __future__ import annotations

import uuid
from typing import Any

from flask import Blueprint, Response, jsonify

from awooop import errors
from awooop.channels import api as api_channel
from awooop.secrets import matches_any_hash
from awooop.store import projects, runs
from awooop.web import context

blueprint = Blueprint("api", __name__)

READ_ROLES = frozenset({"viewer", "operator", "admin"})


@blueprint.get("/v1/projects/<project_id>/runs/<run_id>")
def get_run(project_id: str, run_id: str) -> Response:
    token = api_channel.bearer_token(context.raw_request())
    try:
        parsed_id = uuid.UUID(run_id)
    except ValueError:
        parsed_id = None
    with context.engine().connect() as conn:
        auth = projects.load_auth(conn, project_id, "api")
        hashes = (
            [c.secret_hash for c in auth.api_tokens() if c.role in READ_ROLES and c.secret_hash]
            if auth
            else []
        )
        if token is None or not matches_any_hash(token, hashes):
            raise errors.Unauthenticated()
        run = runs.get_run(conn, project_id, parsed_id) if parsed_id else None
    if run is None:
        raise errors.NotFound("no such run in this project")
    return jsonify(_public(run))


def _public(run: dict[str, Any]) -> dict[str, Any]:
    out = dict(run)
    out["run_id"] = str(run["run_id"])
    for key in ("lease_until", "created_at", "updated_at", "finished_at"):
        out[key] = run[key].isoformat() if run[key] is not None else None
    return out
