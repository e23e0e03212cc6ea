"""``POST /v1/projects/{project_id}/approvals/{token}``: deciding an approval through the API.

The caller needs a project API token whose role the approval step allows (operator and
admin by default) and the approval token from the prompt. Body::

    {"decision": "approve" | "reject", "actor": "alice", "comment": "...",
     "run_id": "...", "step": "..."}          # run_id / step optional: checked if given

Answers: 200 with the decision; 404 for a token this project does not know (or bound to
another run or step); 403 E-APPROVAL-004 when the role may not decide; 410 E-APPROVAL-002
when it expired; 409 E-APPROVAL-003 when it was already decided or the run moved on.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, jsonify, request

from awooop import errors
from awooop.channels import api as api_channel
from awooop.channels.base import json_object
from awooop.engine import approvals
from awooop.web import context, request_body, roles

blueprint = Blueprint("approvals", __name__)

# 32 random bytes in base64url are 43 characters; anything else cannot be a token.
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")
_REFUSED = {
    "not_found": errors.NotFound,
    "forbidden": errors.ApprovalForbidden,
    "expired": errors.ApprovalExpired,
    "used": errors.ApprovalClosed,
    "not_waiting": errors.ApprovalClosed,
}


def take(decide: Callable[[], approvals.Decided]) -> approvals.Decided:
    """Carry out an engine decision (:func:`approvals.decide` or :func:`approvals.decide_by_id`):
    a refusal as its error (nothing changed), then the resumed run queued and the replies
    sent. This endpoint and the ops console both decide through here."""
    try:
        decided = decide()
    except approvals.DecisionRefused as refused:
        raise _REFUSED[refused.reason](refused.message) from None
    context.enqueue([decided.run_id])
    context.notify(decided.message_ids)
    return decided


def _caller_role(project_id: str) -> str:
    """The role of the presented project API token, or 401 (alike for an unknown project).
    Which roles may decide is the approval step's to say (403 E-APPROVAL-004)."""
    auth = context.project_auth(project_id, "api")
    credential = roles.matching_token(api_channel.bearer_token(context.raw_request()), auth)
    if credential is None or credential.role is None:
        raise errors.Unauthenticated()
    return credential.role


def _optional_text(body: dict[str, Any], key: str, limit: int) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise errors.MalformedRequest(f"{key} must be a non-empty string of at most {limit}")
    return value.strip()


@blueprint.post("/v1/projects/<project_id>/approvals/<token>")
def decide(project_id: str, token: str) -> tuple[Response, int]:
    role = _caller_role(project_id)
    if request.mimetype != "application/json":
        raise errors.UnsupportedMediaType()
    body = json_object(request_body.read())
    decision = body.get("decision")
    if decision not in ("approve", "reject"):
        raise errors.MalformedRequest('decision must be "approve" or "reject"')
    actor = _optional_text(body, "actor", 200)
    comment = _optional_text(body, "comment", 2000)
    step = _optional_text(body, "step", 128)
    run_id = None
    if body.get("run_id") is not None:
        try:
            run_id = uuid.UUID(str(body["run_id"]))
        except ValueError:
            raise errors.MalformedRequest("run_id must be a UUID") from None
    if not _TOKEN.match(token):
        raise errors.NotFound("no such approval in this project")
    caller = approvals.Caller(via="api", actor=actor or f"api-token:{role}", role=role)
    decided = take(
        lambda: approvals.decide(
            context.engine(), project_id, token, decision, caller, comment, run_id, step
        )
    )
    status = "approved" if decision == "approve" else "rejected"
    return jsonify({"status": status, "run_id": str(decided.run_id)}), 200
