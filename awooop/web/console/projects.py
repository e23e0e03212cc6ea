"""The projects an admin token may see, for a session signed in with it.

A token belongs to one project; the same token may be registered as an admin token in
several (``awooop project token P --role admin --stdin``). An admin session then sees:

- ``GET /console/projects`` — each project where its token is an active admin token, with
  its runs by status (each counted up to :data:`COUNT_CAP`), linking into that project's
  pages.
- ``POST /console/projects/{project_id}/enter`` — the session moves to that project, as
  that project's admin credential (revoking it there ends the session there), and goes
  to ``next`` (a console page).

Anyone else — a viewer or operator session, or an admin token registered in one project
only — sees its own project and no other: the page is a 403 for non-admins, and entering
a project the token is not an admin of is a 404, alike whether it exists or not.
"""

from __future__ import annotations

import logging

from flask import redirect, request, session
from werkzeug.wrappers import Response as HttpResponse

from awooop import errors
from awooop.domain import states
from awooop.store import overview as store_overview
from awooop.store import projects as store_projects
from awooop.web import context, params, roles
from awooop.web.console.base import blueprint, given, page, require, secure
from awooop.web.console.session import safe_next

log = logging.getLogger("awooop.web.console")

COUNT_CAP = 10_000


@blueprint.get("/projects")
def projects() -> HttpResponse:
    caller = require(roles.ADMINISTER)
    params.check_known(given(request.args), ())
    with context.engine().connect() as conn:
        rows = store_projects.admin_projects(conn, caller.credential_id)
        for row in rows:
            row["counts"] = store_overview.status_counts(conn, row["project_id"], COUNT_CAP)
    return page(
        "console/projects.html",
        projects=rows,
        statuses=states.RUN_STATUSES,
        cap=COUNT_CAP,
    )


@blueprint.post("/projects/<project_id>/enter")
def enter_project(project_id: str) -> HttpResponse:
    caller = require(roles.ADMINISTER)
    target = safe_next(request.form.get("next"))
    with context.engine().connect() as conn:
        mine = store_projects.admin_projects(conn, caller.credential_id)
    found = next((p for p in mine if p["project_id"] == project_id), None)
    if found is None:
        raise errors.NotFound("No such project among those your token administers.")
    session.update(
        project_id=found["project_id"], credential_id=found["credential_id"], role="admin"
    )
    log.info(
        "console project entered",
        extra={
            "action": "console_project_entered",
            "project_id": found["project_id"],
            "credential_id": found["credential_id"],
            "from_project_id": caller.project_id,
        },
    )
    return secure(redirect(target, code=303))
