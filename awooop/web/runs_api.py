"""The runs API for people: lists with filters, the audit trail, the intervention queue.

- ``GET /v1/projects/{p}/runs`` — the project's runs, newest first; filters ``status``,
  ``saga_status`` (comma-separated), ``workflow``, ``channel``, ``created_from`` /
  ``finished_from`` (inclusive), ``created_until`` / ``finished_until`` (exclusive),
  ``failure_code``, ``outbox`` (PENDING or PARKED: runs with such messages);
  ``provider_event_id`` (the runs the event started, and their reruns),
  ``idempotency_key`` (the runs an API start request or a rerun request with this key
  started), ``tag=key:value`` (repeatable: runs with all these tags); ``limit`` (1-200,
  default 50) and ``cursor``.
- ``GET /v1/projects/{p}/runs/{run_id}/events`` — the run's audit trail in ``seq`` order.
- ``GET /v1/projects/{p}/interventions`` — runs waiting for a person, oldest first.

Role ``viewer`` or above. Pages answer ``{"<items>": [...], "next_cursor": str | null}``;
pass ``next_cursor`` back as ``cursor`` for the next page (with the same filters). A cursor
is bound to its list, project and filters (:func:`awooop.web.params.list_scope`): anything
else is a 400.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from flask import Blueprint, Response, jsonify, request
from werkzeug.datastructures import MultiDict

from awooop import errors
from awooop.store import queries
from awooop.web import context, params, roles

blueprint = Blueprint("runs_api", __name__)

_LIST_PARAMETERS = (*params.RUN_FILTERS, *params.FIND_FILTERS, "limit", "cursor")


def jsonable(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its times as ISO 8601 strings and its UUIDs as strings."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, uuid.UUID):
            value = str(value)
        out[key] = value
    return out


def run_id_or_404(run_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(run_id)
    except ValueError:
        raise errors.NotFound("no such run in this project") from None


def _page(rows: list[dict[str, Any]], limit: int, cursor_of: Any) -> tuple[list[Any], Any]:
    """The first ``limit`` rows and the cursor after them (None: this was the last page).
    Callers fetch ``limit + 1`` rows: the extra one only says that there is more."""
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], cursor_of(rows[limit - 1])


def _filter_args(args: MultiDict[str, str]) -> MultiDict[str, str]:
    """The list's filters in ``args`` (not its limit or cursor): what its cursors are for."""
    return MultiDict([(name, value) for name, value in args.items(multi=True) if name in _FILTERS])


_FILTERS = frozenset((*params.RUN_FILTERS, *params.FIND_FILTERS))


@blueprint.get("/v1/projects/<project_id>/runs")
def list_runs(project_id: str) -> Response:
    caller = roles.authenticate(project_id, roles.READ)
    args = request.args
    params.check_known(args, _LIST_PARAMETERS)
    filters = params.run_filters(args)
    limit = params.limit(args)
    scope = params.list_scope("runs", caller.project_id, _filter_args(args))
    after = params.run_position(params.decode_cursor(args, "runs", scope))
    with context.engine().connect() as conn:
        rows = queries.list_runs(conn, caller.project_id, filters, after, limit + 1)
    page, cursor = _page(rows, limit, lambda row: params.run_cursor("runs", row, scope))
    return jsonify({"runs": [jsonable(r) for r in page], "next_cursor": cursor})


@blueprint.get("/v1/projects/<project_id>/interventions")
def intervention_queue(project_id: str) -> Response:
    """Runs whose saga is in MANUAL_INTERVENTION, oldest first. ``direction`` says which retry
    applies: FORWARD → retry-resolution, BACKWARD → retry-compensation."""
    caller = roles.authenticate(project_id, roles.READ)
    args = request.args
    params.check_known(args, ("limit", "cursor"))
    limit = params.limit(args)
    scope = params.list_scope("interventions", caller.project_id)
    after = params.run_position(params.decode_cursor(args, "interventions", scope))
    with context.engine().connect() as conn:
        rows = queries.intervention_queue(conn, caller.project_id, after, limit + 1)
    page, cursor = _page(rows, limit, lambda row: params.run_cursor("interventions", row, scope))
    return jsonify({"runs": [jsonable(r) for r in page], "next_cursor": cursor})


@blueprint.get("/v1/projects/<project_id>/runs/<run_id>/events")
def run_events(project_id: str, run_id: str) -> Response:
    """The run's audit trail (transitions, leases, steps, operations), oldest first."""
    caller = roles.authenticate(project_id, roles.READ)
    args = request.args
    params.check_known(args, ("limit", "cursor"))
    limit = params.limit(args)
    scope = params.events_scope(caller.project_id, run_id)
    after_seq = params.seq_position(params.decode_cursor(args, "events", scope))
    parsed_id = run_id_or_404(run_id)
    with context.engine().connect() as conn:
        rows = queries.run_events(conn, caller.project_id, parsed_id, after_seq, limit + 1)
    if rows is None:
        raise errors.NotFound("no such run in this project")
    page, cursor = _page(
        rows, limit, lambda row: params.encode_cursor("events", {"s": row["seq"]}, scope)
    )
    return jsonify({"events": [jsonable(r) for r in page], "next_cursor": cursor})
