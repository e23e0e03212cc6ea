"""Rerunning finished runs over HTTP (the work is :mod:`awooop.engine.reruns`'s).

- ``POST /v1/projects/{p}/runs/{run_id}/rerun`` — one run; roles operator, admin. Body
  optional: ``{"reason": "..."}``.
- ``POST /v1/projects/{p}/runs/rerun`` — every finished run the runs list's filters match;
  role admin. Body ``{"filters": {...}, "limit": n, "rate": r, "dry_run": bool, "cursor":
  "...", "reason": "..."}``: ``filters`` are the list's query parameters by name (a value a
  string, or a list of strings for the repeatable ones), at least one; ``limit`` runs at
  most (default 100, at most 1000), newest first; the new runs become claimable at most ``rate`` per
  second (default ``AWOOOP_RERUN_RATE_PER_SECOND``, at most
  ``AWOOOP_RERUN_MAX_RATE_PER_SECOND``); ``dry_run`` answers how many runs match (and
  which) and writes nothing; ``next_cursor`` in the answer continues after the last run.

Both need an ``Idempotency-Key`` header (a dry run does not): the same key and request again
answer 200 with ``code`` ``E-IDEMPOTENT-001`` and the runs the first call made; the same key
with another request is a 422 ``E-IDEMPOTENT-002``. New runs answer 202.
"""

from __future__ import annotations

import uuid
from typing import Any

from flask import Blueprint, Response, jsonify, request
from werkzeug.datastructures import MultiDict

from awooop import bodies, errors
from awooop.channels import api as api_channel
from awooop.channels.base import digest, json_object
from awooop.engine import reruns
from awooop.store.reruns import Rerun
from awooop.web import context, params, request_body, roles, throttle
from awooop.web.runs_api import run_id_or_404

blueprint = Blueprint("reruns_api", __name__)

_REASON = bodies.Field(
    "reason",
    "string",
    f"reason must be a string of at most {reruns.MAX_REASON} characters",
    nullable=True,
    default=str,
    max_length=reruns.MAX_REASON,
    description="Why, for the runs' history.",
)
RERUN_REQUEST = bodies.Body(fields=(_REASON,), unknown_keys="unknown keys: {keys}; allowed: reason")
BULK_RERUN = bodies.Body(
    fields=(
        bodies.Field(
            "filters",
            "strings",
            "filters must be a JSON object of the runs list's filters, each a string or a "
            "list of strings",
            nullable=True,
            default=dict,
            description="The runs list's filters by name (a string, or a list of strings for "
            "status, saga_status and tag), at least one; only finished runs are matched.",
        ),
        bodies.Field(
            "limit",
            "integer",
            f"limit must be a whole number from 1 to {reruns.MAX_LIMIT}",
            default=lambda: reruns.DEFAULT_LIMIT,
            minimum=1,
            maximum=reruns.MAX_LIMIT,
            description=f"Runs at most, newest first (default {reruns.DEFAULT_LIMIT}).",
        ),
        bodies.Field(
            "rate",
            "number",
            f"rate must be a number of at least {reruns.MIN_RATE:g}",
            minimum=reruns.MIN_RATE,
            description="New runs claimable per second at most (default "
            "AWOOOP_RERUN_RATE_PER_SECOND, at most AWOOOP_RERUN_MAX_RATE_PER_SECOND).",
        ),
        bodies.Field(
            "dry_run",
            "boolean",
            "dry_run must be true or false",
            default=lambda: False,
            description="Count the matching runs and write nothing.",
        ),
        bodies.Field(
            "cursor",
            "string",
            "cursor must be a string: a runs list's next_cursor",
            nullable=True,
            description="next_cursor of an earlier answer.",
        ),
        _REASON,
    ),
    unknown_keys="unknown keys: {keys}; allowed: filters, limit, rate, dry_run, cursor, reason",
)


def _body(spec: bodies.Body, required: bool) -> dict[str, Any]:
    raw = request_body.read()
    if not raw.strip() and not required:
        return spec.parse({})
    if request.mimetype != "application/json":
        raise errors.UnsupportedMediaType()
    return spec.parse(json_object(raw))


def _key() -> str:
    return api_channel.idempotency_key(context.raw_request())


def _rerun_json(rerun: Rerun) -> dict[str, Any]:
    return {
        "run_id": str(rerun.run_id),
        "rerun_of": str(rerun.rerun_of),
        "status": rerun.status,
        "available_at": rerun.available_at.isoformat(),
    }


def rerun(caller: roles.Caller, run_id: uuid.UUID, key: str, reason: str) -> reruns.Reruns:
    """Rerun one finished run of the caller's project (counted against its management rate
    limit) and send the new run's message: the API's and the console's rerun of one run."""
    throttle.check(caller.project_id, throttle.MANAGEMENT, caller.auth.limits.management_per_minute)
    done = reruns.rerun_run(
        context.engine(),
        caller.project_id,
        run_id,
        key=key,
        request_digest=digest({"run_id": str(run_id), "reason": reason}),
        actor=caller.actor,
        reason=reason,
        max_active_runs=caller.auth.limits.max_active_runs,
    )
    context.enqueue(done.due_now)
    return done


@blueprint.post("/v1/projects/<project_id>/runs/<run_id>/rerun")
def rerun_one(project_id: str, run_id: str) -> tuple[Response, int]:
    caller = roles.authenticate(project_id, roles.RERUN)
    key = _key()
    reason = _body(RERUN_REQUEST, required=False)["reason"]
    done = rerun(caller, run_id_or_404(run_id), key, reason)
    body = _rerun_json(done.runs[0])
    if not done.created:
        body["code"] = errors.DUPLICATE_EVENT_CODE
    return jsonify(body), 202 if done.created else 200


def _filters(given: dict[str, str | list[str]]) -> MultiDict[str, str]:
    """The body's ``filters`` as the list's query parameters: at least one, so that a
    forgotten filter never reruns every finished run of the project."""
    pairs = [
        (name, v)
        for name, value in given.items()
        for v in ([value] if isinstance(value, str) else value)
    ]
    args: MultiDict[str, str] = MultiDict(pairs)
    params.check_known(args, (*params.RUN_FILTERS, *params.FIND_FILTERS), what="filter")
    if not args:
        raise errors.MalformedRequest(
            "at least one filter is required (any of the runs list's filters); a bulk rerun "
            "never matches every run by default"
        )
    return args


@blueprint.post("/v1/projects/<project_id>/runs/rerun")
def rerun_many(project_id: str) -> tuple[Response, int]:
    caller = roles.authenticate(project_id, roles.RERUN_MANY)
    body = _body(BULK_RERUN, required=True)
    dry_run = body["dry_run"]
    key = None if dry_run else _key()
    filter_args = _filters(body["filters"])
    filters = params.run_filters(filter_args)
    scope = params.list_scope("reruns", caller.project_id, filter_args)
    settings = context.settings()
    limit = body["limit"]
    rate = float(body.get("rate", settings.rerun_rate_per_second))
    most = settings.rerun_max_rate_per_second
    if rate > most:
        raise errors.MalformedRequest(f"rate must be a number from {reruns.MIN_RATE:g} to {most:g}")
    cursor = body.get("cursor")
    cursor_args: MultiDict[str, str] = MultiDict({"cursor": cursor} if cursor else {})
    after = params.run_position(params.decode_cursor(cursor_args, "reruns", scope))
    reason = body["reason"]
    engine = context.engine()
    answer: dict[str, Any] = {"dry_run": dry_run, "limit": limit, "rate": rate}
    if key is None:
        found = reruns.matching(engine, caller.project_id, filters, after=after, limit=limit)
        answer["run_ids"] = [str(row["run_id"]) for row in found.originals]
        return jsonify(_counted(answer, found, scope)), 200
    throttle.check(caller.project_id, throttle.MANAGEMENT, caller.auth.limits.management_per_minute)
    request_digest = digest(
        {
            "filters": body["filters"],
            "limit": limit,
            "rate": rate,
            "cursor": cursor,
            "reason": reason,
        }
    )
    done, found = reruns.rerun_matching(
        engine,
        caller.project_id,
        filters,
        key=key,
        request_digest=request_digest,
        actor=caller.actor,
        rate=rate,
        after=after,
        limit=limit,
        reason=reason,
        max_active_runs=caller.auth.limits.max_active_runs,
    )
    context.enqueue(done.due_now)
    answer["runs"] = [_rerun_json(r) for r in done.runs]
    if not done.created:
        answer.update(count=len(done.runs), more=False, next_cursor=None)
        answer["code"] = errors.DUPLICATE_EVENT_CODE
        return jsonify(answer), 200
    return jsonify(_counted(answer, found, scope)), 202 if done.runs else 200


def _counted(answer: dict[str, Any], found: reruns.Matching, scope: str) -> dict[str, Any]:
    """The answer with the count and the cursor after the last run: one for this endpoint,
    this project and these filters."""
    cursor = None
    if found.after is not None:
        position = {"created_at": found.after.created_at, "run_id": found.after.run_id}
        cursor = params.run_cursor("reruns", position, scope)
    return {**answer, "count": len(found.originals), "more": found.more, "next_cursor": cursor}
