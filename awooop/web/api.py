"""The read API: ``GET /v1/projects/{project_id}/runs/{run_id}``."""

from __future__ import annotations

import uuid
from typing import Any

from flask import Blueprint, Response, jsonify

from awooop import errors
from awooop.channels import api as api_channel
from awooop.secrets import matches_any_hash
from awooop.store import runs
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
    auth = context.project_auth(project_id, "api")
    hashes = [c.secret_hash for c in (auth.api_tokens() if auth else []) if c.role in READ_ROLES]
    if token is None or not matches_any_hash(token, [h for h in hashes if h]):
        raise errors.Unauthenticated()
    run = None
    if parsed_id is not None:
        with context.engine().connect() as conn:
            run = runs.get_run(conn, project_id, parsed_id)
    if run is None:
        raise errors.NotFound("no such run in this project")
    return jsonify(_public(run))


def _public(run: dict[str, Any]) -> dict[str, Any]:
    out = dict(run)
    out["run_id"] = str(run["run_id"])
    for key in ("lease_until", "created_at", "updated_at", "finished_at"):
        out[key] = run[key].isoformat() if run[key] is not None else None
    return out
