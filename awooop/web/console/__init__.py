"""The ops console: server-rendered pages under ``/console/`` for the people who run AwoooP.

By concern: :mod:`.session` (signing in and out, the session cookie, CSRF), :mod:`.views`
(the pages), :mod:`.actions` (one run's management actions), :mod:`.approvals` (deciding approvals),
:mod:`.bulk` (an action on every run the filters match), :mod:`.filters` (the runs list's
filters), :mod:`.workers` (the worker processes), :mod:`.projects` (an admin token's projects),
:mod:`.formatting` (display helpers), :mod:`.base` (the blueprint, rendering,
error pages, the role check).
"""

from __future__ import annotations

from flask import Flask

from awooop.config import Settings
from awooop.web.console import (  # noqa: F401 (their routes)
    actions,
    approvals,
    bulk,
    formatting,
    projects,
    session,
    views,
    workers,
)
from awooop.web.console.base import PREFIX, blueprint, error_page


def register(app: Flask, settings: Settings) -> None:
    """Mount the console on ``app``: its blueprint, session cookie and error pages."""
    session.configure(app, settings)
    app.jinja_env.trim_blocks = True
    app.jinja_env.lstrip_blocks = True
    app.register_blueprint(blueprint)
    app.extensions["awooop"]["error_pages"] = ((PREFIX, error_page),)
