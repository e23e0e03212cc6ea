"""Deciding approvals from the console.

- ``GET /console/approvals`` — the project's approvals that can be decided now (pending,
  unexpired, the run still waiting at the step), oldest first, each with an approve/reject
  form.
- ``POST /console/approvals/{approval_id}`` — ``decision`` (approve | reject) and an
  optional ``comment``: the decision through the same engine step and the same finishing
  code as ``POST /v1/projects/{p}/approvals/{token}``
  (:func:`awooop.engine.approvals.decide_by_id`, :func:`awooop.web.approvals.take`).

The signed-in token stands in for the approval's token: its role must be one the approval
step allows (operator and admin by default, as in the API; else 403 ``E-APPROVAL-004``).
The audit row and the journal name the credential (``api-token:<id>``) and ``via console``.
A decision already taken, or a run that moved on, is a 409 with nothing changed.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from flask import flash, g, redirect, request, url_for
from werkzeug.wrappers import Response as HttpResponse

from awooop import errors
from awooop.engine import approvals as engine_approvals
from awooop.store import approvals as store_approvals
from awooop.web import approvals as approvals_api
from awooop.web import context, params, roles
from awooop.web.console import forms
from awooop.web.console.base import blueprint, given, page, secure
from awooop.web.console.session import safe_next

PAGE_SIZE = 50
MAX_COMMENT = 2000
DECISIONS = {"approve": "Approved", "reject": "Rejected"}


def _position(data: dict[str, Any] | None) -> tuple[datetime, uuid.UUID] | None:
    if data is None:
        return None
    try:
        return params.instant(data["t"]), uuid.UUID(data["a"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise params.bad("cursor is not one this list returned; start again without it") from None


@blueprint.get("/approvals")
def approvals_list() -> HttpResponse:
    caller: roles.Caller = g.caller
    args = given(request.args)
    params.check_known(args, ("cursor",))
    scope = params.list_scope("approvals", caller.project_id)
    after = _position(params.decode_cursor(args, "approvals", scope))
    with context.read_engine().connect() as conn:
        rows = store_approvals.pending(conn, caller.project_id, after, PAGE_SIZE + 1)
    next_url = None
    if len(rows) > PAGE_SIZE:
        rows = rows[:PAGE_SIZE]
        last = {"t": rows[-1]["created_at"].isoformat(), "a": str(rows[-1]["approval_id"])}
        cursor = params.encode_cursor("approvals", last, scope)
        next_url = url_for(".approvals_list", cursor=cursor)
    return page(
        "console/approvals.html",
        approvals=rows,
        next_url=next_url,
        paged="cursor" in args,
        first_url=url_for(".approvals_list"),
    )


def _approval_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise errors.NotFound("No such approval in this project.") from None


@blueprint.post("/approvals/<approval_id>")
def decide(approval_id: str) -> HttpResponse:
    caller: roles.Caller = g.caller
    parsed = _approval_id(approval_id)
    target = request.form.get("next")
    back = safe_next(target) if target else url_for(".approvals_list")
    g.back, g.back_label = back, "Back"
    decision = request.form.get("decision", "")
    if decision not in DECISIONS:
        raise errors.MalformedRequest('The decision must be "approve" or "reject".')
    comment = forms.free_text("comment", MAX_COMMENT)
    decider = engine_approvals.Caller(via="console", actor=caller.actor, role=caller.role)
    decided = approvals_api.take(
        lambda: engine_approvals.decide_by_id(
            context.engine(), caller.project_id, parsed, decision, decider, comment or None
        )
    )
    flash(
        f"{DECISIONS[decision]}: {decided.action} on run {str(decided.run_id)[:8]}. "
        "The run resumes with the next free worker.",
        "info",
    )
    return secure(redirect(back, code=303))
