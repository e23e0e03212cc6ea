"""The console's pages: the overview, the run list, the intervention queue, the workflows
and one run's page.

- ``GET /console/`` — the overview: runs by status now, runs finished per minute over the
  last three hours with their failure codes (an inline SVG chart), the intervention queue
  and the outbox backlog, each linked to the run list filtered to its runs.
- ``GET /console/runs`` — the project's runs with the runs API's filters and cursor pages.
- ``GET /console/interventions`` — runs waiting for a person (saga MANUAL_INTERVENTION).
- ``GET /console/workflows`` — workflow versions and the project's open runs on each.
- ``GET /console/runs/{run_id}`` — the run: step journal as a timeline, audit trail,
  approvals, outbox messages, and the management actions its state allows.
"""

from __future__ import annotations

from typing import Any

from flask import g, request, url_for
from werkzeug.datastructures import MultiDict
from werkzeug.wrappers import Response as HttpResponse

from awooop import errors
from awooop.domain import states
from awooop.models.project import RUN_CHANNEL_TYPES
from awooop.store import approvals, outbox, queries
from awooop.store import overview as store_overview
from awooop.store import runs as store_runs
from awooop.web import context, overview, params, roles, workflows_api
from awooop.web.console import bulk
from awooop.web.console.actions import no_such_run, offered_operations, run_id_or_404, segment_of
from awooop.web.console.base import blueprint, given, page
from awooop.web.console.filters import FILTERS, run_filters
from awooop.web.console.formatting import timeline

PAGE_SIZE = 50
EVENTS_PAGE_SIZE = 200
MESSAGES_SHOWN = 100
# The overview: runs finished per minute over this many minutes; counts stop at the cap.
OVERVIEW_MINUTES = 180
OVERVIEW_CAP = 10_000


@blueprint.get("/")
def home() -> HttpResponse:
    """The overview: runs by status now, runs finished per minute and their failure codes,
    the intervention queue and the outbox backlog, each linked to the runs it counts."""
    caller: roles.Caller = g.caller
    params.check_known(given(request.args), ())
    project_id = caller.project_id
    with context.read_engine().connect() as conn:
        active = store_overview.active_counts(conn, project_id, OVERVIEW_CAP)
        window = store_overview.finished(conn, project_id, OVERVIEW_MINUTES)
        queue = store_overview.interventions(conn, project_id, OVERVIEW_CAP)
        backlog = store_overview.outbox_backlog(conn, project_id, OVERVIEW_CAP)

    def runs_url(**query: Any) -> str:
        return url_for(".runs", **query)

    values = overview.page(active, window, queue, backlog, OVERVIEW_CAP, runs_url)
    return page("console/overview.html", **values)


# --- Lists ----------------------------------------------------------------------------------


@blueprint.get("/runs")
def runs() -> HttpResponse:
    caller: roles.Caller = g.caller
    args = given(request.args)
    form = {name: args.get(name, "") for name in FILTERS}
    choices: dict[str, Any] = {
        "statuses": states.RUN_STATUSES,
        "saga_statuses": states.SAGA_STATUSES,
        "channels": RUN_CHANNEL_TYPES,
        "outbox_statuses": queries.OUTBOX_FILTER_STATUSES,
    }
    # The filter form sends every field, the empty ones too: an empty field filters nothing,
    # so it does not bind the cursor either.
    given_filters = MultiDict(
        [(k, v) for k, v in args.items(multi=True) if k != "cursor" and v != ""]
    )
    scope = params.list_scope("runs", caller.project_id, given_filters)
    try:
        filters = run_filters(args)
        after = params.run_position(params.decode_cursor(args, "runs", scope))
    except errors.MalformedRequest as bad:
        return page("console/runs.html", 400, runs=[], form=form, message=bad.message, **choices)
    with context.read_engine().connect() as conn:
        rows = queries.list_runs(conn, caller.project_id, filters, after, PAGE_SIZE + 1)
    kept: dict[str, Any] = {k: args.getlist(k) for k in args if k != "cursor"}
    next_url = None
    if len(rows) > PAGE_SIZE:
        rows = rows[:PAGE_SIZE]
        next_url = url_for(".runs", **kept, cursor=params.run_cursor("runs", rows[-1], scope))
    offered = [(s, a) for s, a in bulk.ACTIONS.items() if caller.role in a.allowed]
    return page(
        "console/runs.html",
        runs=rows,
        form=form,
        next_url=next_url,
        paged="cursor" in args,
        first_url=url_for(".runs", **kept),
        bulk_actions=offered,
        bulk_limit=bulk.BULK_LIMIT,
        filter_query=kept,
        **choices,
    )


@blueprint.get("/interventions")
def interventions() -> HttpResponse:
    caller: roles.Caller = g.caller
    args = given(request.args)
    params.check_known(args, ("cursor",))
    scope = params.list_scope("interventions", caller.project_id)
    after = params.run_position(params.decode_cursor(args, "interventions", scope))
    with context.read_engine().connect() as conn:
        rows = queries.intervention_queue(conn, caller.project_id, after, PAGE_SIZE + 1)
    next_url = None
    if len(rows) > PAGE_SIZE:
        rows = rows[:PAGE_SIZE]
        cursor = params.run_cursor("interventions", rows[-1], scope)
        next_url = url_for(".interventions", cursor=cursor)
    return page(
        "console/interventions.html",
        runs=rows,
        next_url=next_url,
        paged="cursor" in args,
        first_url=url_for(".interventions"),
    )


@blueprint.get("/workflows")
def workflows() -> HttpResponse:
    """Workflow versions and the project's open runs on each (retire one at 0 open runs)."""
    caller: roles.Caller = g.caller
    params.check_known(given(request.args), ())
    return page(
        "console/workflows.html",
        workflows=workflows_api.project_versions(caller.project_id),
        unfinished=",".join(states.UNFINISHED_STATUSES),
    )


# --- One run -------------------------------------------------------------------------------


@blueprint.get("/runs/<run_id>")
def run_detail(run_id: str) -> HttpResponse:
    caller: roles.Caller = g.caller
    args = given(request.args)
    params.check_known(args, ("cursor",))
    scope = params.events_scope(caller.project_id, run_id)
    after_seq = params.seq_position(params.decode_cursor(args, "events", scope))
    parsed = run_id_or_404(run_id)
    with context.engine().connect() as conn:
        run = store_runs.get_run(conn, caller.project_id, parsed)
        if run is None:
            raise no_such_run()
        events = queries.run_events(
            conn, caller.project_id, parsed, after_seq, EVENTS_PAGE_SIZE + 1
        )
        run_approvals = approvals.list_for_run(conn, caller.project_id, parsed)
        messages = outbox.list_messages(
            conn, run_id=parsed, limit=MESSAGES_SHOWN, project_id=caller.project_id
        )
    events = events or []
    next_events_url = None
    if len(events) > EVENTS_PAGE_SIZE:
        events = events[:EVENTS_PAGE_SIZE]
        cursor = params.encode_cursor("events", {"s": events[-1]["seq"]}, scope)
        next_events_url = url_for(".run_detail", run_id=str(parsed), cursor=cursor)
    return page(
        "console/run.html",
        run=run,
        timeline=timeline(run["saga_steps"] or []),
        events=events,
        next_events_url=next_events_url,
        approvals=run_approvals,
        messages=messages,
        offered=[(op, segment_of(op)) for op in offered_operations(run, caller)],
    )
