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
from collections.abc import Callable

from flask import Blueprint, Response, jsonify, request

from awooop import bodies, errors
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


def _text(name: str, limit: int, description: str | None = None) -> bodies.Field:
    """An optional text of at most ``limit`` characters, not blank, stripped."""
    return bodies.Field(
        name,
        "string",
        f"{name} must be a non-empty string of at most {limit}",
        nullable=True,
        min_length=1,
        max_length=limit,
        strip=True,
        description=description,
    )


DECISION = bodies.Body(
    fields=(
        bodies.Field(
            "decision",
            "string",
            'decision must be "approve" or "reject"',
            required=True,
            choices=("approve", "reject"),
        ),
        _text("actor", 200),
        _text("comment", 2000),
        _text("step", 128, "If given, must be the step the token is bound to."),
        bodies.Field(
            "run_id",
            "uuid",
            "run_id must be a UUID",
            nullable=True,
            description="If given, must be the run the token is bound to.",
        ),
    ),
)


@blueprint.post("/v1/projects/<project_id>/approvals/<token>")
def decide(project_id: str, token: str) -> tuple[Response, int]:
    role = _caller_role(project_id)
    if request.mimetype != "application/json":
        raise errors.UnsupportedMediaType()
    body = DECISION.parse(json_object(request_body.read()))
    decision = body["decision"]
    actor, comment = body.get("actor"), body.get("comment")
    step, run_id = body.get("step"), body.get("run_id")
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
