"""What every console page shares: the blueprint, rendering with the console's security
headers, error pages, the role check, and the names of the management operations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Blueprint, Response, current_app, g, render_template, session
from werkzeug.datastructures import MultiDict
from werkzeug.wrappers import Response as HttpResponse

from awooop import errors
from awooop.web import roles

PREFIX = "/console"
# The templates and the stylesheet live beside the other web modules (awooop/web/).
_WEB = Path(__file__).resolve().parent.parent

blueprint = Blueprint(
    "console",
    __name__,
    url_prefix=PREFIX,
    template_folder=str(_WEB / "templates"),
    static_folder=str(_WEB / "static"),
)

LABELS = {
    "pause": "Pause",
    "resume": "Resume",
    "cancel": "Cancel",
    "retry_compensation": "Retry compensation",
    "retry_resolution": "Retry resolution",
    "manual_close": "Close manually",
    "rerun": "Rerun",
}


@blueprint.context_processor
def _template_context() -> dict[str, Any]:
    return {
        "caller": g.get("caller"),
        "csrf_token": session.get("csrf", ""),
        "labels": LABELS,
    }


def page(template: str, status: int = 200, **values: Any) -> HttpResponse:
    return secure(Response(render_template(template, **values), status=status))


def secure(response: HttpResponse) -> HttpResponse:
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
        "back_label": g.get("back_label"),
        "csrf_token": session.get("csrf", "") if current_app.secret_key else "",
        "labels": LABELS,
    }
    response = Response(render_template("console/error.html", **values), status=error.http_status)
    for name, value in error.headers.items():
        response.headers[name] = value
    return secure(response)


def require(allowed: frozenset[str]) -> roles.Caller:
    """The signed-in caller, if its role is one of ``allowed``; else 403."""
    caller: roles.Caller = g.caller
    if caller.role not in allowed:
        raise errors.Forbidden(
            f"A {caller.role} token can look but not act; this needs an "
            f"{' or '.join(sorted(allowed))} token."
        )
    return caller


def given(args: MultiDict[str, str]) -> MultiDict[str, str]:
    """The query without empty fields (a submitted filter form sends them all)."""
    return MultiDict([(k, v) for k, v in args.items(multi=True) if v.strip() != ""])
