"""Management operations over HTTP: ``POST /v1/projects/{p}/runs/{run_id}/{operation}`` for
pause, resume, cancel, retry-compensation, retry-resolution and manual-close.

Body ``{"operation_id": "...", "reason": "..."}``: ``operation_id`` (1-128 characters) is
required and makes the call idempotent — the same id again answers 200 with
``"replayed": true`` and changes nothing. ``If-Match: "<version>"`` (the run's ETag) refuses
the operation with 412 ``E-OPERATION-002`` if the run changed. The caller's API token is the
actor in the audit row, with the reason. Role operator or admin; manual-close needs admin
and ``AWOOOP_MANUAL_CLOSE_ENABLED=1``. A run not in a state for the operation: 409
``E-OPERATION-001``. The view is thin: :func:`awooop.engine.management.operate` does the work.
"""

from __future__ import annotations

import uuid
from typing import Any

from flask import Blueprint, Response, jsonify, request

from awooop import bodies, errors
from awooop.channels.base import json_object
from awooop.domain.numbers import whole_number
from awooop.engine import management
from awooop.store.operations import OperationResult
from awooop.web import context, request_body, roles, throttle
from awooop.web.runs_api import run_id_or_404

blueprint = Blueprint("management_api", __name__)

# URL segment -> engine operation
OPERATIONS = {
    "pause": "pause",
    "resume": "resume",
    "cancel": "cancel",
    "retry-compensation": "retry_compensation",
    "retry-resolution": "retry_resolution",
    "manual-close": "manual_close",
}
MAX_OPERATION_ID = 128
MAX_REASON = 1000
OPERATION = bodies.Body(
    fields=(
        bodies.Field(
            "operation_id",
            "string",
            f"operation_id is required: a string of 1 to {MAX_OPERATION_ID} characters, "
            "the same for every retry of this request",
            required=True,
            min_length=1,
            max_length=MAX_OPERATION_ID,
            description="Makes the call idempotent: the same id again changes nothing.",
            error=errors.InvalidOperation,
        ),
        bodies.Field(
            "reason",
            "string",
            f"reason must be a string of at most {MAX_REASON} characters",
            nullable=True,
            default=str,
            max_length=MAX_REASON,
            description="For the audit row.",
        ),
    ),
)


def roles_for(operation: str) -> frozenset[str]:
    return roles.ADMINISTER if operation == "manual_close" else roles.OPERATE


def _body() -> tuple[str, str]:
    if request.mimetype != "application/json":
        raise errors.UnsupportedMediaType()
    body = OPERATION.parse(json_object(request_body.read()))
    return body["operation_id"], body["reason"]


# A version no run has (versions start at 1): what a weak entity-tag in If-Match expects.
NEVER_MATCHES = -1


def _expected_version() -> int | None:
    """The version in ``If-Match`` (``"7"`` or ``7``); None without one or ``*``. A weak
    entity-tag (``W/"7"``) never matches If-Match (RFC 9110, 13.1.1): it expects
    :data:`NEVER_MATCHES`, so the operation is answered as for a version that changed."""
    raw = request.headers.get("If-Match")
    if raw is None or raw.strip() == "*":
        return None
    stripped = raw.strip()
    value = stripped.removeprefix("W/").strip('"')
    version = whole_number(value)
    if version is None or version < 0:
        raise errors.MalformedRequest('If-Match must be the run\'s version as an ETag, e.g. "7"')
    return NEVER_MATCHES if stripped.startswith("W/") else version


def perform(
    caller: roles.Caller,
    operation: str,
    run_id: uuid.UUID,
    *,
    operation_id: str,
    reason: str,
    expected_version: int | None,
) -> OperationResult:
    """One management operation by ``caller``, whose role was checked: the project's rate
    limit, the engine operation, and the nudge for a run that became claimable. The JSON
    endpoints and the console both act through here."""
    throttle.check(caller.project_id, throttle.MANAGEMENT, caller.auth.limits.management_per_minute)
    return apply(
        caller,
        operation,
        run_id,
        operation_id=operation_id,
        reason=reason,
        expected_version=expected_version,
    )


def apply(
    caller: roles.Caller,
    operation: str,
    run_id: uuid.UUID,
    *,
    operation_id: str,
    reason: str,
    expected_version: int | None,
) -> OperationResult:
    """:func:`perform` without the rate limit: the engine operation and the nudge. The
    console's bulk actions count once against the limit and act on each run through here."""
    result = management.operate(
        context.engine(),
        context.settings(),
        operation,
        caller.project_id,
        run_id,
        operation_id=operation_id,
        actor=caller.actor,
        reason=reason,
        expected_version=expected_version,
    )
    if result.applied and operation in management.NUDGING:
        context.enqueue([run_id])
    return result


def operate(project_id: str, run_id: str, operation: str) -> Response:
    caller = roles.authenticate(project_id, roles_for(operation))
    operation_id, reason = _body()
    expected_version = _expected_version()
    parsed_id = run_id_or_404(run_id)
    try:
        result = perform(
            caller,
            operation,
            parsed_id,
            operation_id=operation_id,
            reason=reason,
            expected_version=expected_version,
        )
    except errors.VersionMismatch:
        if expected_version != NEVER_MATCHES:
            raise
        raise errors.VersionMismatch(
            'a weak entity-tag (W/"…") never matches If-Match; send the run\'s version as '
            'a strong one, e.g. "7"'
        ) from None
    body: dict[str, Any] = {
        "run_id": str(parsed_id),
        "operation": operation,
        "operation_id": operation_id,
        "applied": result.applied,
        "replayed": result.replayed,
        "status": result.status,
        "saga_status": result.saga_status,
        "control_state": result.control_state,
        "version": result.version,
    }
    response = jsonify(body)
    response.set_etag(str(result.version))
    return response


for _segment, _operation in OPERATIONS.items():
    blueprint.add_url_rule(
        f"/v1/projects/<project_id>/runs/<run_id>/{_segment}",
        endpoint=_operation,
        view_func=operate,
        methods=["POST"],
        defaults={"operation": _operation},
    )
