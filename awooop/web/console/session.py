"""Who is signed in: the session cookie, signing in and out, and CSRF.

Sign-in: the token is checked like any API token (:func:`roles.matching_token`) and never
kept; the signed session cookie (HttpOnly, SameSite=Lax, path ``/console``, Secure behind
https) holds the project id, the credential id and its role. Every request looks the
credential up again (through the 5-second auth cache), so a revoked token ends its sessions.
Every POST carries the session's CSRF token in a hidden field, compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from flask import Flask, current_app, flash, g, redirect, request, session, url_for
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from werkzeug.wrappers import Response as HttpResponse

from awooop import errors
from awooop.config import Settings
from awooop.web import context, roles
from awooop.web.console.base import PREFIX, blueprint, page, secure

log = logging.getLogger("awooop.web.console")

# Flask's SECRET_KEY (and SECRET_KEY_FALLBACKS) are derived from AWOOOP_SECRET_KEY's keys,
# never a key itself.
_SESSION_KEY_LABEL = b"awooop ops console session cookie v1"
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


def configure(app: Flask, settings: Settings) -> None:
    """The console's session cookie on ``app``: signing keys, flags and lifetime."""
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


def new_csrf_token() -> str:
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


def safe_next(target: str | None) -> str:
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
        session["csrf"] = new_csrf_token()
    target = safe_next(request.values.get("next"))
    if request.method == "GET":
        return page("console/login.html", next=target, project_id="")
    project_id = request.form.get("project_id", "").strip()
    token = request.form.get("token", "").strip()
    if not 0 < len(project_id) <= MAX_PROJECT_ID or not 0 < len(token) <= MAX_TOKEN:
        return page(
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
        return page(
            "console/login.html",
            401,
            next=target,
            project_id=project_id,
            message="Unknown project, or a token that is not one of its active API tokens.",
        )
    if credential.role not in roles.READ:
        return page(
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
        csrf=new_csrf_token(),
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
    return secure(redirect(target, code=303))


@blueprint.post("/logout")
def logout() -> HttpResponse:
    session.clear()
    session["csrf"] = new_csrf_token()
    flash("Signed out.", "info")
    return secure(redirect(url_for(".login"), code=303))
