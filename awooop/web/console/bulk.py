"""Bulk actions: one action on every run the runs list's filters match, at most
:data:`BULK_LIMIT` at a time.

- ``GET /console/bulk/{action}?<the runs list's filters>`` — the confirmation: the filters
  and the exact number of runs the action would take (the list's newest first, at most
  :data:`BULK_LIMIT`), with a fresh operation id and the moment the page was made.
- ``POST /console/bulk/{action}`` — the same filters again, limited to runs created before
  that moment (a run admitted after the confirmation is never touched); each run goes
  through the action's own single-run path, so every per-run rule and audit row holds.
  The result: how many were acted upon, how many were skipped because their state did not
  allow it, and how many this same form had already done (a double submit is one effect
  per run: every run's operation id is the form's).

The whole bulk counts once against the project's management rate limit. An action is an
entry of :data:`ACTIONS`: a label, an explanation, the roles it needs, and either ``act``,
which does it to one run and says what happened, or ``act_on_all``, which takes the whole
selection in one request: a rerun, whose new runs become claimable at the deployment's
rerun rate (:mod:`awooop.engine.reruns`) and which only finished runs can have.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from flask import flash, g, redirect, request, url_for
from werkzeug.datastructures import MultiDict
from werkzeug.wrappers import Response as HttpResponse

from awooop import errors
from awooop.channels.base import digest
from awooop.domain import states
from awooop.engine import reruns
from awooop.store import queries
from awooop.web import context, management_api, params, roles, throttle
from awooop.web.console import forms
from awooop.web.console.actions import EXPLANATIONS
from awooop.web.console.base import LABELS, blueprint, given, page, require, secure
from awooop.web.console.filters import FILTERS, run_filters

BULK_LIMIT = 1_000


class Outcome(Enum):
    APPLIED = "applied"
    SKIPPED = "skipped"  # the run's state does not allow the action (or the run is gone)
    REPLAYED = "replayed"  # this form's operation id had already done it to this run


@dataclass(frozen=True)
class Counts:
    applied: int
    skipped: int
    replayed: int


@dataclass(frozen=True)
class BulkAction:
    label: str
    explanation: str
    allowed: frozenset[str]  # the roles that may do it
    # Do it to one run: (caller, run id, operation id, reason) -> what happened.
    act: Callable[[roles.Caller, uuid.UUID, str, str], Outcome] | None = None
    # Or to every selected run in one go: (caller, filters, operation id, reason).
    act_on_all: Callable[[roles.Caller, queries.RunFilters, str, str], Counts] | None = None
    # Only runs in these statuses are selected (None: any status).
    statuses: tuple[str, ...] | None = None

    def select(self, filters: queries.RunFilters) -> queries.RunFilters:
        """The filters, narrowed to the statuses this action can take."""
        if self.statuses is None:
            return filters
        asked = filters.statuses or self.statuses
        # No status both asked and takeable: a status no run has, so nothing is selected.
        chosen = tuple(s for s in asked if s in self.statuses) or ("",)
        return dataclasses.replace(filters, statuses=chosen)


def management_operation(operation: str) -> Callable[..., Outcome]:
    """One run through the same code as the single-run console action and the JSON
    endpoint (:func:`management_api.apply`); a state that does not allow it is a skip."""

    def act(caller: roles.Caller, run_id: uuid.UUID, operation_id: str, reason: str) -> Outcome:
        try:
            result = management_api.apply(
                caller,
                operation,
                run_id,
                operation_id=operation_id,
                reason=reason,
                expected_version=None,
            )
        except (errors.OperationRefused, errors.NotFound):
            return Outcome.SKIPPED
        return Outcome.REPLAYED if result.replayed else Outcome.APPLIED

    return act


def _management(operation: str) -> BulkAction:
    return BulkAction(
        label=LABELS[operation],
        explanation=EXPLANATIONS[operation],
        allowed=management_api.roles_for(operation),
        act=management_operation(operation),
    )


def _rerun_all(
    caller: roles.Caller, filters: queries.RunFilters, operation_id: str, reason: str
) -> Counts:
    """Rerun the selected finished runs in one request, paced at the deployment's rerun
    rate; the form's operation id is the request's idempotency key, so a second submit
    answers the runs the first one made."""
    done, _ = reruns.rerun_matching(
        context.engine(),
        caller.project_id,
        filters,
        key=operation_id,
        request_digest=digest({"console_bulk_rerun": operation_id}),
        actor=caller.actor,
        rate=context.settings().rerun_rate_per_second,
        limit=BULK_LIMIT,
        reason=reason,
        max_active_runs=caller.auth.limits.max_active_runs,
    )
    context.enqueue(done.due_now)
    if not done.created:
        return Counts(0, 0, len(done.runs))
    return Counts(len(done.runs), 0, 0)


RERUN = BulkAction(
    label="Rerun",
    explanation="Each finished run (completed, failed or cancelled) starts again as a new run "
    "of the same workflow and version with the same input, linked to it; the new runs become "
    "claimable a few a second (the deployment's rerun rate), not all at once.",
    allowed=roles.RERUN_MANY,
    act_on_all=_rerun_all,
    statuses=states.TERMINAL_STATUSES,
)

# URL segment -> action, in the order the runs page offers them.
ACTIONS: dict[str, BulkAction] = {
    "cancel": _management("cancel"),
    "pause": _management("pause"),
    "resume": _management("resume"),
    "rerun": RERUN,
}


def _action(segment: str) -> BulkAction:
    action = ACTIONS.get(segment)
    if action is None:
        raise errors.NotFound("No such page.")
    return action


def _filter_fields(args: MultiDict[str, str]) -> list[tuple[str, str]]:
    """The filters given, as (name, value) pairs (hidden fields and links carry them)."""
    return [(k, v) for k, v in args.items(multi=True) if k in FILTERS]


def _runs_url(fields: MultiDict[str, str]) -> str:
    """The runs list with these filters."""
    query: dict[str, Any] = {k: fields.getlist(k) for k in fields if k in FILTERS}
    return url_for(".runs", **query)


def _created_before(filters: queries.RunFilters, as_of: datetime) -> queries.RunFilters:
    """The filters, limited to runs created before ``as_of``."""
    until = filters.created_until
    return dataclasses.replace(
        filters, created_until=as_of if until is None or until > as_of else until
    )


def _selected(
    caller: roles.Caller, filters: queries.RunFilters, limit: int
) -> list[dict[str, Any]]:
    with context.engine().connect() as conn:
        return queries.list_runs(conn, caller.project_id, filters, None, limit)


@blueprint.get("/bulk/<segment>")
def bulk_confirm(segment: str) -> HttpResponse:
    action = _action(segment)
    caller = require(action.allowed)
    args = given(request.args)
    g.back = _runs_url(args)
    g.back_label = "Back to the runs"
    filters = run_filters(args)
    as_of = datetime.now(UTC)
    rows = _selected(caller, action.select(_created_before(filters, as_of)), BULK_LIMIT + 1)
    return page(
        "console/bulk.html",
        segment=segment,
        action=action,
        filters=_filter_fields(args),
        count=min(len(rows), BULK_LIMIT),
        more=len(rows) > BULK_LIMIT,
        limit=BULK_LIMIT,
        operation_id=f"bulk-{uuid.uuid4().hex}",
        as_of=as_of.isoformat(),
        runs_url=g.back,
    )


@blueprint.post("/bulk/<segment>")
def bulk_act(segment: str) -> HttpResponse:
    action = _action(segment)
    caller = require(action.allowed)
    form = request.form
    fields = MultiDict(_filter_fields(given(form)))
    runs_url = _runs_url(fields)
    g.back, g.back_label = runs_url, "Back to the runs"
    operation_id = forms.operation_id()
    try:
        as_of = params.instant(form.get("as_of", ""))
    except ValueError:
        raise errors.FormRefused() from None
    reason = forms.free_text("reason", management_api.MAX_REASON)
    filters = action.select(_created_before(run_filters(fields), as_of))
    throttle.check(caller.project_id, throttle.MANAGEMENT, caller.auth.limits.management_per_minute)
    counts = _perform(action, caller, filters, operation_id, reason)
    matched = counts.applied + counts.skipped + counts.replayed
    message = (
        f"{action.label}: {counts.applied} of {matched} matching runs acted upon; "
        f"{counts.skipped} skipped because their state did not allow it."
    )
    if counts.replayed:
        message += f" {counts.replayed} had already been done by this same form, not again."
    flash(message, "info")
    return secure(redirect(runs_url, code=303))


def _perform(
    action: BulkAction,
    caller: roles.Caller,
    filters: queries.RunFilters,
    operation_id: str,
    reason: str,
) -> Counts:
    if action.act_on_all is not None:
        return action.act_on_all(caller, filters, operation_id, reason)
    assert action.act is not None
    rows = _selected(caller, filters, BULK_LIMIT)
    outcomes = [action.act(caller, row["run_id"], operation_id, reason) for row in rows]
    return Counts(
        outcomes.count(Outcome.APPLIED),
        outcomes.count(Outcome.SKIPPED),
        outcomes.count(Outcome.REPLAYED),
    )
