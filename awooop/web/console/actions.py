"""One run's management actions: the buttons its state allows, the confirmation page and
the POST that carries the action out through the same code as the JSON management
endpoints (:func:`awooop.web.management_api.perform`), or for a finished run's rerun as
``POST …/runs/{run_id}/rerun`` does (:func:`awooop.web.reruns_api.rerun`).

A confirmation page renders a fresh ``operation_id`` (a double submit is one effect) and the
run version the operator saw (a run that changed meanwhile is refused with a clear message).
"""

from __future__ import annotations

import uuid
from typing import Any

from flask import flash, g, redirect, request, url_for
from werkzeug.wrappers import Response as HttpResponse

from awooop import errors
from awooop.domain import states
from awooop.domain.numbers import whole_number
from awooop.store import runs as store_runs
from awooop.web import context, management_api, reruns_api, roles
from awooop.web.console import forms
from awooop.web.console.base import LABELS, blueprint, page, require, secure

# URL segment -> engine operation, as in the JSON API.
OPERATIONS = management_api.OPERATIONS
# A finished run's rerun: its own URL segment, and not a management operation.
RERUN = "rerun"
EXPLANATIONS = {
    "pause": "The run takes no automatic action until resumed: claims skip it, its timers "
    "wait, and a worker holding it stops at the next step boundary.",
    "resume": "The run becomes active again and its waiting timers are re-armed.",
    "cancel": "The saga turns back at the next step boundary, compensates what it did, and "
    "ends CANCELLED. A step whose outcome is in doubt is settled first (its resolver, its "
    "tool result, or you), so only what happened is undone.",
    "retry_compensation": "The compensation's retry budget is reset and the rollback "
    "carries on from the step that stopped it.",
    "retry_resolution": "The step that stopped the run is resolved again: its resolver "
    "polls start again, or a halted step runs again.",
    "manual_close": "The run ends CANCELLED / MANUALLY_CLOSED at once. Nothing is "
    "compensated: you take responsibility for what it did.",
    RERUN: "A new run of the same workflow and version starts with this run's input, linked "
    "to it. This run stays as it is; both pages link to each other.",
}


def offered_operations(run: dict[str, Any], caller: roles.Caller) -> list[str]:
    """The operations to offer as buttons for the run's state and the caller's role. Only a
    hint: the engine checks every precondition again and refuses the rest (409)."""
    if caller.role not in roles.OPERATE:
        return []
    status, saga = run["status"], run["saga_status"]
    finished = status in states.TERMINAL_STATUSES
    stuck = saga == "MANUAL_INTERVENTION" and status == states.WAITING_APPROVAL
    offered = []
    if run["control_state"] == "ACTIVE" and not finished:
        offered.append("pause")
    if run["control_state"] == "PAUSED":
        offered.append("resume")
    if not finished and saga in ("RUNNING", "WAITING_RESOLUTION"):
        offered.append("cancel")
    if stuck and run["direction"] == "BACKWARD":
        offered.append("retry_compensation")
    if stuck and run["direction"] == "FORWARD":
        offered.append("retry_resolution")
    if stuck and caller.role in roles.ADMINISTER and context.settings().manual_close_enabled:
        offered.append("manual_close")
    if finished and caller.role in roles.RERUN:
        offered.append(RERUN)
    return offered


def no_such_run() -> errors.NotFound:
    return errors.NotFound("No such run in this project.")


def run_id_or_404(run_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(run_id)
    except ValueError:
        raise no_such_run() from None


def _load_run(caller: roles.Caller, run_id: str) -> tuple[uuid.UUID, dict[str, Any]]:
    parsed = run_id_or_404(run_id)
    with context.engine().connect() as conn:
        run = store_runs.get_run(conn, caller.project_id, parsed)
    if run is None:
        raise no_such_run()
    return parsed, run


def segment_of(operation: str) -> str:
    if operation == RERUN:
        return RERUN
    return next(s for s, op in OPERATIONS.items() if op == operation)


def _operation(segment: str) -> str:
    operation = RERUN if segment == RERUN else OPERATIONS.get(segment)
    if operation is None:
        raise errors.NotFound("No such page.")
    return operation


def _roles(operation: str) -> frozenset[str]:
    return roles.RERUN if operation == RERUN else management_api.roles_for(operation)


def _version(raw: str | None, name: str) -> int | None:
    if raw is None or raw == "":
        return None
    version = whole_number(raw)
    if version is None or version < 0:
        raise errors.MalformedRequest(f"{name} must be a run version (a whole number)")
    return version


@blueprint.get("/runs/<run_id>/<segment>")
def confirm(run_id: str, segment: str) -> HttpResponse:
    """Ask before acting, showing the run as it is now. The form carries a new operation id
    (submitting it twice is one effect) and the version shown here: if the run changes
    before the operator confirms, nothing is done. ``?version=`` is the version the run
    page showed; a difference is pointed out."""
    operation = _operation(segment)
    caller = require(_roles(operation))
    if operation == "manual_close" and not context.settings().manual_close_enabled:
        raise errors.ManualCloseDisabled()
    parsed, run = _load_run(caller, run_id)
    g.back = url_for(".run_detail", run_id=str(parsed))
    seen = _version(request.args.get("version"), "version")
    return page(
        "console/confirm.html",
        run=run,
        operation=operation,
        segment=segment,
        explanation=EXPLANATIONS[operation],
        operation_id=uuid.uuid4().hex,
        seen_version=seen,
        changed=seen is not None and seen != run["version"],
    )


@blueprint.post("/runs/<run_id>/<segment>")
def act(run_id: str, segment: str) -> HttpResponse:
    operation = _operation(segment)
    caller = require(_roles(operation))
    parsed = run_id_or_404(run_id)
    g.back = url_for(".run_detail", run_id=str(parsed))
    operation_id = forms.operation_id()
    expected_version = _version(request.form.get("expected_version"), "expected_version")
    reason = forms.free_text("reason", management_api.MAX_REASON)
    if operation == RERUN:
        return _rerun(caller, parsed, operation_id, reason)
    try:
        result = management_api.perform(
            caller,
            operation,
            parsed,
            operation_id=operation_id,
            reason=reason,
            expected_version=expected_version,
        )
    except errors.NotFound:
        raise no_such_run() from None
    except errors.VersionMismatch:
        _, run = _load_run(caller, run_id)
        raise errors.RunChanged(
            f"The run changed since you looked at it (you saw version {expected_version}; "
            f"it is now at version {run['version']}: {run['status']} / {run['saga_status']}"
            f" / {run['control_state']}). Nothing was done. Review the run and try again."
        ) from None
    if result.replayed:
        flash("This form was already submitted: the operation was done once, not again.", "info")
    else:
        flash(
            f"{LABELS[operation]}: done. The run is now {result.status} / "
            f"{result.saga_status} / {result.control_state} (version {result.version}).",
            "info",
        )
    return secure(redirect(url_for(".run_detail", run_id=str(parsed)), code=303))


def _rerun(caller: roles.Caller, run_id: uuid.UUID, operation_id: str, reason: str) -> HttpResponse:
    """Rerun the finished run as the API does; the form's operation id is the request's
    idempotency key, so a second submit answers the run the first one made. Then the new
    run's page."""
    try:
        done = reruns_api.rerun(caller, run_id, operation_id, reason)
    except errors.NotFound:
        raise no_such_run() from None
    new = done.runs[0]
    if done.created:
        flash(f"Rerun: started as this run, a rerun of {str(run_id)[:8]}.", "info")
    else:
        flash("This form was already submitted: the run was rerun once, as this run.", "info")
    return secure(redirect(url_for(".run_detail", run_id=str(new.run_id)), code=303))
