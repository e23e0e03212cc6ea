"""The ops console: server-rendered pages under ``/console/`` for the people who run AwoooP.

- ``GET|POST /console/login`` — sign in with a project id and a ``viewer``, ``operator`` or
  ``admin`` API token; ``POST /console/logout``.
- ``GET /console/`` — the overview: runs by status now, runs finished per minute over the
  last three hours with their failure codes (an inline SVG chart), the intervention queue
  and the outbox backlog, each linked to the run list filtered to its runs.
- ``GET /console/runs`` — the project's runs with the runs API's filters and cursor pages.
- ``GET /console/interventions`` — runs waiting for a person (saga MANUAL_INTERVENTION).
- ``GET /console/workflows`` — workflow versions and the project's open runs on each.
- ``GET /console/runs/{run_id}`` — the run: step journal as a timeline, audit trail,
  approvals, outbox messages, and the management actions its state allows.
- ``GET /console/runs/{run_id}/{operation}`` — the confirmation page of an action;
  ``POST`` to the same address carries it out through the same code as the JSON management
  endpoints (:func:`awooop.web.management_api.perform`).

Sign-in: the token is checked like any API token (:func:`roles.matching_token`) and never
kept; the signed session cookie (HttpOnly, SameSite=Lax, path ``/console``, Secure behind
https) holds the project id, the credential id and its role. Every request looks the
credential up again (through the 5-second auth cache), so a revoked token ends its sessions.
Every POST carries the session's CSRF token in a hidden field, compared in constant time.
A confirmation page renders a fresh ``operation_id`` (a double submit is one effect) and the
run version the operator saw (a run that changed meanwhile is refused with a clear message).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    Flask,
    Response,
    current_app,
    flash,
    g,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from werkzeug.datastructures import MultiDict
from werkzeug.wrappers import Response as HttpResponse

from awooop import errors
from awooop.config import Settings
from awooop.domain import states
from awooop.models.project import RUN_CHANNEL_TYPES
from awooop.store import approvals, outbox, queries
from awooop.store import overview as store_overview
from awooop.store import runs as store_runs
from awooop.web import context, management_api, overview, params, roles, workflows_api

log = logging.getLogger("awooop.web.console")

blueprint = Blueprint(
    "console",
    __name__,
    url_prefix="/console",
    template_folder="../templates",
    static_folder="../static",
)

PREFIX = "/console"
# Flask's SECRET_KEY (and SECRET_KEY_FALLBACKS) are derived from AWOOOP_SECRET_KEY's keys,
# never a key itself.
_SESSION_KEY_LABEL = b"awooop ops console session cookie v1"
PAGE_SIZE = 50
EVENTS_PAGE_SIZE = 200
MESSAGES_SHOWN = 100
_FILTERS = params.RUN_FILTERS
# The overview: runs finished per minute over this many minutes; counts stop at the cap.
OVERVIEW_MINUTES = 180
OVERVIEW_CAP = 10_000

# URL segment -> engine operation, as in the JSON API.
OPERATIONS = management_api.OPERATIONS
LABELS = {
    "pause": "Pause",
    "resume": "Resume",
    "cancel": "Cancel",
    "retry_compensation": "Retry compensation",
    "retry_resolution": "Retry resolution",
    "manual_close": "Close manually",
}
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
}
MAX_PROJECT_ID = 64
MAX_TOKEN = 512


class ConsoleSessions(SecureCookieSessionInterface):
    """Sessions exist under the console's prefix only: the API and webhooks (the hot path)
    never build a cookie serializer."""

    def open_session(self, app: Flask, request: Any) -> SecureCookieSession | None:
        if not request.path.startswith(PREFIX):
            return self.make_null_session(app)
        return super().open_session(app, request)


def _session_key(secret_key: str) -> str:
    """The cookie signing key derived from one of AWOOOP_SECRET_KEY's keys."""
    return hmac.new(secret_key.encode(), _SESSION_KEY_LABEL, hashlib.sha256).hexdigest()


def register(app: Flask, settings: Settings) -> None:
    """Mount the console on ``app``: its blueprint, session cookie and error pages."""
    app.session_interface = ConsoleSessions()
    if settings.secret_keys:
        newest, *older = (_session_key(key) for key in settings.secret_keys)
        app.secret_key = newest
        # Flask >= 3.1 (itsdangerous): a cookie signed with a fallback key is accepted, and
        # the cookie sent back (every response refreshes a permanent session) is signed with
        # SECRET_KEY. Fallbacks are tried last first, so the list runs oldest to newest.
        app.config["SECRET_KEY_FALLBACKS"] = older[::-1]
    app.config.update(
        SESSION_COOKIE_NAME="awooop_console",
        SESSION_COOKIE_PATH=PREFIX,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.public_base_url.startswith("https://"),
        PERMANENT_SESSION_LIFETIME=timedelta(seconds=settings.console_session_seconds),
    )
    app.jinja_env.trim_blocks = True
    app.jinja_env.lstrip_blocks = True
    app.register_blueprint(blueprint)
    app.extensions["awooop"]["error_pages"] = ((PREFIX, error_page),)


# --- Templates ------------------------------------------------------------------------------


@blueprint.app_template_filter("when")
def _when(value: Any) -> str:
    """A time as ``2026-11-29 10:00:03 UTC`` (journal entries keep theirs as strings)."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value.strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value)


@blueprint.app_template_filter("duration")
def _duration(value: timedelta | None) -> str:
    """A wait as people say it: ``45 s``, ``12 min``, ``3 h 05 min``, ``2 d 4 h``."""
    if value is None:
        return ""
    seconds = max(0, int(value.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60:02d} min"
    return f"{hours // 24} d {hours % 24} h"


@blueprint.app_template_filter("pretty")
def _pretty(value: Any) -> str:
    """JSON for people (a plain string, so autoescaping applies)."""
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


@blueprint.app_template_filter("compact")
def _compact(value: Any) -> str:
    """JSON on one line (a plain string, so autoescaping applies)."""
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


@blueprint.context_processor
def _template_context() -> dict[str, Any]:
    return {
        "caller": g.get("caller"),
        "csrf_token": session.get("csrf", ""),
        "labels": LABELS,
    }


def _page(template: str, status: int = 200, **values: Any) -> HttpResponse:
    return _secure(Response(render_template(template, **values), status=status))


def _secure(response: HttpResponse) -> HttpResponse:
    """Pages hold run data and take actions: not cached, not framed, no scripts at all."""
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    )
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


def error_page(error: errors.AwoooPError) -> HttpResponse:
    """An error as a page: the message and its code, never a traceback."""
    values = {
        "error": error,
        "caller": g.get("caller"),
        "back": g.get("back"),
        "csrf_token": session.get("csrf", "") if current_app.secret_key else "",
        "labels": LABELS,
    }
    response = Response(render_template("console/error.html", **values), status=error.http_status)
    for name, value in error.headers.items():
        response.headers[name] = value
    return _secure(response)


# --- Who is signed in -----------------------------------------------------------------------


def _new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def _check_csrf() -> None:
    expected = session.get("csrf")
    presented = request.form.get("csrf_token", "")
    if not isinstance(expected, str) or not expected:
        raise errors.FormRefused()
    if not hmac.compare_digest(expected.encode(), presented.encode()):
        raise errors.FormRefused()


def _signed_in() -> roles.Caller | None:
    """The session's credential, if it is still an active viewer/operator/admin token."""
    project_id = session.get("project_id")
    credential_id = session.get("credential_id")
    if not isinstance(project_id, str) or not isinstance(credential_id, str):
        return None
    auth = context.project_auth(project_id, "api")
    credential = None
    if auth is not None:
        credential = next((c for c in auth.api_tokens() if c.credential_id == credential_id), None)
    if auth is None or credential is None or credential.role not in roles.READ:
        session.clear()
        flash("Your session has ended: its token was revoked. Sign in again.", "error")
        return None
    return roles.Caller(auth=auth, credential_id=credential_id, role=credential.role)


@blueprint.before_request
def _before() -> HttpResponse | None:
    if not current_app.secret_key:
        raise errors.ServiceUnavailable("the console needs AWOOOP_SECRET_KEY to be set")
    if request.method == "POST":
        _check_csrf()
    if request.endpoint in ("console.login", "console.static"):
        return None
    caller = _signed_in()
    if caller is None:
        if request.method == "GET":
            target = request.full_path.rstrip("?")
            return redirect(url_for(".login", next=target), code=303)
        raise errors.Unauthenticated("Sign in to the console first.")
    g.caller = caller
    return None


def _require(allowed: frozenset[str]) -> roles.Caller:
    caller: roles.Caller = g.caller
    if caller.role not in allowed:
        raise errors.Forbidden(
            f"A {caller.role} token can look but not act; this needs an "
            f"{' or '.join(sorted(allowed))} token."
        )
    return caller


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a console page of this site, nothing else."""
    default = url_for(".home")
    if not target or "\\" in target or not target.isprintable():
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith(PREFIX + "/"):
        return default
    return target


@blueprint.route("/login", methods=["GET", "POST"])
def login() -> HttpResponse:
    if "csrf" not in session:
        session["csrf"] = _new_csrf_token()
    target = _safe_next(request.values.get("next"))
    if request.method == "GET":
        return _page("console/login.html", next=target, project_id="")
    project_id = request.form.get("project_id", "").strip()
    token = request.form.get("token", "").strip()
    if not 0 < len(project_id) <= MAX_PROJECT_ID or not 0 < len(token) <= MAX_TOKEN:
        return _page(
            "console/login.html",
            400,
            next=target,
            project_id=project_id[:MAX_PROJECT_ID],
            message="Enter a project id and an API token.",
        )
    auth = context.project_auth(project_id, "api")
    credential = roles.matching_token(token, auth)
    if credential is None or credential.role is None:
        log.info("console sign-in refused", extra={"action": "console_login_refused"})
        return _page(
            "console/login.html",
            401,
            next=target,
            project_id=project_id,
            message="Unknown project, or a token that is not one of its active API tokens.",
        )
    if credential.role not in roles.READ:
        return _page(
            "console/login.html",
            403,
            next=target,
            project_id=project_id,
            message=f"A token with role {credential.role!r} cannot use the console; "
            "use a viewer, operator or admin token.",
        )
    session.clear()  # a new session: nothing from before the sign-in carries over
    session.permanent = True
    session.update(
        project_id=project_id,
        credential_id=credential.credential_id,
        role=credential.role,
        csrf=_new_csrf_token(),
    )
    log.info(
        "console sign-in",
        extra={
            "action": "console_login",
            "project_id": project_id,
            "credential_id": credential.credential_id,
            "role": credential.role,
        },
    )
    return _secure(redirect(target, code=303))


@blueprint.post("/logout")
def logout() -> HttpResponse:
    session.clear()
    session["csrf"] = _new_csrf_token()
    flash("Signed out.", "info")
    return _secure(redirect(url_for(".login"), code=303))


@blueprint.get("/")
def home() -> HttpResponse:
    """The overview: runs by status now, runs finished per minute and their failure codes,
    the intervention queue and the outbox backlog, each linked to the runs it counts."""
    caller: roles.Caller = g.caller
    params.check_known(_given(request.args), ())
    project_id = caller.project_id
    with context.engine().connect() as conn:
        active = store_overview.active_counts(conn, project_id, OVERVIEW_CAP)
        window = store_overview.finished(conn, project_id, OVERVIEW_MINUTES)
        queue = store_overview.interventions(conn, project_id, OVERVIEW_CAP)
        backlog = store_overview.outbox_backlog(conn, project_id, OVERVIEW_CAP)

    def runs_url(**query: Any) -> str:
        return url_for(".runs", **query)

    values = overview.page(active, window, queue, backlog, OVERVIEW_CAP, runs_url)
    return _page("console/overview.html", **values)


# --- Lists ----------------------------------------------------------------------------------


def _given(args: MultiDict[str, str]) -> MultiDict[str, str]:
    """The query without empty fields (a submitted filter form sends them all)."""
    return MultiDict([(k, v) for k, v in args.items(multi=True) if v.strip() != ""])


def _time(args: MultiDict[str, str], name: str) -> datetime | None:
    """An ISO 8601 time; without an offset (a ``datetime-local`` field) it is UTC."""
    raw = params.single(args, name)
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise params.bad(f"{name} must be a time like 2026-11-29T10:00 (UTC)") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _run_filters(args: MultiDict[str, str]) -> queries.RunFilters:
    params.check_known(args, (*_FILTERS, "cursor"))
    return queries.RunFilters(
        statuses=params.choices(args, "status", states.RUN_STATUSES),
        saga_statuses=params.choices(args, "saga_status", states.SAGA_STATUSES),
        workflow=params.text_value(args, "workflow"),
        channel=params.choice(args, "channel", RUN_CHANNEL_TYPES),
        created_from=_time(args, "created_from"),
        created_until=_time(args, "created_until"),
        finished_from=_time(args, "finished_from"),
        finished_until=_time(args, "finished_until"),
        failure_code=params.text_value(args, "failure_code", queries.MAX_FAILURE_CODE),
        outbox=params.choice(args, "outbox", queries.OUTBOX_FILTER_STATUSES),
    )


@blueprint.get("/runs")
def runs() -> HttpResponse:
    caller: roles.Caller = g.caller
    args = _given(request.args)
    form = {name: args.get(name, "") for name in _FILTERS}
    choices: dict[str, Any] = {
        "statuses": states.RUN_STATUSES,
        "saga_statuses": states.SAGA_STATUSES,
        "channels": RUN_CHANNEL_TYPES,
        "outbox_statuses": queries.OUTBOX_FILTER_STATUSES,
    }
    try:
        filters = _run_filters(args)
        after = params.run_position(params.decode_cursor(args, "runs"))
    except errors.MalformedRequest as bad:
        return _page("console/runs.html", 400, runs=[], form=form, message=bad.message, **choices)
    with context.engine().connect() as conn:
        rows = queries.list_runs(conn, caller.project_id, filters, after, PAGE_SIZE + 1)
    kept: dict[str, Any] = {k: args.getlist(k) for k in args if k != "cursor"}
    next_url = None
    if len(rows) > PAGE_SIZE:
        rows = rows[:PAGE_SIZE]
        next_url = url_for(".runs", **kept, cursor=params.run_cursor("runs", rows[-1]))
    return _page(
        "console/runs.html",
        runs=rows,
        form=form,
        next_url=next_url,
        paged="cursor" in args,
        first_url=url_for(".runs", **kept),
        **choices,
    )


@blueprint.get("/interventions")
def interventions() -> HttpResponse:
    caller: roles.Caller = g.caller
    args = _given(request.args)
    params.check_known(args, ("cursor",))
    after = params.run_position(params.decode_cursor(args, "interventions"))
    with context.engine().connect() as conn:
        rows = queries.intervention_queue(conn, caller.project_id, after, PAGE_SIZE + 1)
    next_url = None
    if len(rows) > PAGE_SIZE:
        rows = rows[:PAGE_SIZE]
        next_url = url_for(".interventions", cursor=params.run_cursor("interventions", rows[-1]))
    return _page(
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
    params.check_known(_given(request.args), ())
    return _page(
        "console/workflows.html",
        workflows=workflows_api.project_versions(caller.project_id),
        unfinished=",".join(states.UNFINISHED_STATUSES),
    )


# --- One run --------------------------------------------------------------------------------


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
    return offered


_JOURNAL_COLUMNS = ("recorded_at", "phase", "step", "status", "decision", "attempt", "error")


def timeline(journal: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step journal as rows: when, phase, step, outcome, attempt, error, and the rest of
    the entry (output, plan, ids) for a closer look."""
    rows = []
    for entry in journal:
        rest = {k: v for k, v in entry.items() if k not in _JOURNAL_COLUMNS}
        rows.append(
            {
                "at": entry.get("recorded_at"),
                "phase": entry.get("phase", ""),
                "step": entry.get("step", ""),
                "outcome": entry.get("status") or entry.get("decision") or "",
                "attempt": entry.get("attempt", ""),
                "error": entry.get("error") or "",
                "rest": rest,
            }
        )
    return rows


def _no_such_run() -> errors.NotFound:
    return errors.NotFound("No such run in this project.")


def run_id_or_404(run_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(run_id)
    except ValueError:
        raise _no_such_run() from None


def _load_run(caller: roles.Caller, run_id: str) -> tuple[uuid.UUID, dict[str, Any]]:
    parsed = run_id_or_404(run_id)
    with context.engine().connect() as conn:
        run = store_runs.get_run(conn, caller.project_id, parsed)
    if run is None:
        raise _no_such_run()
    return parsed, run


@blueprint.get("/runs/<run_id>")
def run_detail(run_id: str) -> HttpResponse:
    caller: roles.Caller = g.caller
    args = _given(request.args)
    params.check_known(args, ("cursor",))
    after_seq = params.seq_position(params.decode_cursor(args, "events"))
    parsed = run_id_or_404(run_id)
    with context.engine().connect() as conn:
        run = store_runs.get_run(conn, caller.project_id, parsed)
        if run is None:
            raise _no_such_run()
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
        cursor = params.encode_cursor("events", {"s": events[-1]["seq"]})
        next_events_url = url_for(".run_detail", run_id=str(parsed), cursor=cursor)
    return _page(
        "console/run.html",
        run=run,
        timeline=timeline(run["saga_steps"] or []),
        events=events,
        next_events_url=next_events_url,
        approvals=run_approvals,
        messages=messages,
        offered=[(op, _segment(op)) for op in offered_operations(run, caller)],
    )


def _segment(operation: str) -> str:
    return next(s for s, op in OPERATIONS.items() if op == operation)


def _operation(segment: str) -> str:
    operation = OPERATIONS.get(segment)
    if operation is None:
        raise errors.NotFound("No such page.")
    return operation


def _version(raw: str | None, name: str) -> int | None:
    if raw is None or raw == "":
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise errors.MalformedRequest(f"{name} must be a run version (a whole number)")
    return int(raw)


@blueprint.get("/runs/<run_id>/<segment>")
def confirm(run_id: str, segment: str) -> HttpResponse:
    """Ask before acting, showing the run as it is now. The form carries a new operation id
    (submitting it twice is one effect) and the version shown here: if the run changes
    before the operator confirms, nothing is done. ``?version=`` is the version the run
    page showed; a difference is pointed out."""
    operation = _operation(segment)
    caller = _require(management_api.roles_for(operation))
    if operation == "manual_close" and not context.settings().manual_close_enabled:
        raise errors.ManualCloseDisabled()
    parsed, run = _load_run(caller, run_id)
    g.back = url_for(".run_detail", run_id=str(parsed))
    seen = _version(request.args.get("version"), "version")
    return _page(
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
    caller = _require(management_api.roles_for(operation))
    parsed = run_id_or_404(run_id)
    g.back = url_for(".run_detail", run_id=str(parsed))
    form = request.form
    operation_id = form.get("operation_id", "")
    if not 0 < len(operation_id) <= management_api.MAX_OPERATION_ID:
        raise errors.FormRefused()
    expected_version = _version(form.get("expected_version"), "expected_version")
    reason = form.get("reason", "").strip()
    if len(reason) > management_api.MAX_REASON:
        raise errors.MalformedRequest(
            f"The reason is too long: at most {management_api.MAX_REASON} characters."
        )
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
        raise _no_such_run() from None
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
    return _secure(redirect(url_for(".run_detail", run_id=str(parsed)), code=303))
