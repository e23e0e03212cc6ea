"""``create_app()``: the WSGI application (``gunicorn 'awooop.web.app:create_app()'``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from flask import Flask, g, request
from sqlalchemy import Engine

from awooop import bootstrap, db, logs, telemetry, tracing
from awooop.config import Settings, get_settings
from awooop.ratelimit import RateLimiter
from awooop.secrets import SecretBox
from awooop.web import (
    api,
    approvals,
    console,
    errors,
    health,
    ingress,
    management_api,
    openapi,
    request_metrics,
    reruns_api,
    runs_api,
    signals_api,
    workers_api,
    workflows_api,
)
from awooop.web.auth import ProjectAuthCache
from awooop.workflows import registry

Enqueue = Callable[[list[uuid.UUID]], int]


class _App(Flask):
    """Flask asks ``inspect.iscoroutinefunction`` of every hook and of the view on every
    request (:meth:`Flask.ensure_sync`); the answer never changes for a function, so this
    asks once per function."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._as_sync: dict[Callable[..., Any], Callable[..., Any]] = {}

    def ensure_sync(self, func: Callable[..., Any]) -> Callable[..., Any]:
        try:
            return self._as_sync[func]
        except KeyError:
            as_sync = self._as_sync[func] = super().ensure_sync(func)
            return as_sync
        except TypeError:  # an unhashable callable: asked every time
            return super().ensure_sync(func)


def create_app(
    settings: Settings | None = None,
    engine: Engine | None = None,
    enqueue: Enqueue | None = None,
    notify: Enqueue | None = None,
) -> Flask:
    settings = settings or get_settings()
    logs.configure(settings.log_level)
    bootstrap.log_settings(settings, "web")
    telemetry.start(settings, "web")  # spans, when AWOOOP_TRACING is on
    registry.import_modules(settings.workflow_module_list)
    if enqueue is None:
        from awooop.tasks import handoff  # the Celery app is only needed to send messages

        enqueue = handoff.submit  # sent from a thread of the process, after the answer
    if notify is None:
        from awooop.tasks import notifications

        notify = notifications.enqueue

    app = _App("awooop")
    # '//' or '%2f' in a path is a 404 like any unknown path, not an HTML redirect.
    app.url_map.merge_slashes = False
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    engine = engine or (
        db.get_engine()
        if settings is get_settings()
        else db.make_engine(settings.database_url, settings=settings)
    )
    app.extensions["awooop"] = {
        "settings": settings,
        "engine": engine,
        # The console's lists and /metrics' gauges: a standby's, when one is configured.
        "read_engine": db.read_engine(settings, engine),
        "secret_box": SecretBox(settings.secret_keys),
        "auth_cache": ProjectAuthCache(settings.auth_cache_seconds),
        "enqueue": enqueue,
        "notify": notify,
        "rate_limiter": RateLimiter.from_url(
            settings.rate_limit_url,
            settings.rate_limit_timeout_seconds,
            settings.rate_limit_retry_seconds,
            settings.broker_sentinel_master,
        ),
        "probe_engine": db.make_probe_engine(
            settings.database_url,
            settings.readiness_timeout_seconds,
            session_options=settings.database_session_options,
        ),
    }
    app.register_blueprint(ingress.blueprint)
    app.register_blueprint(api.blueprint)
    app.register_blueprint(signals_api.blueprint)
    app.register_blueprint(approvals.blueprint)
    app.register_blueprint(runs_api.blueprint)
    app.register_blueprint(workflows_api.blueprint)
    app.register_blueprint(workers_api.blueprint)
    app.register_blueprint(management_api.blueprint)
    app.register_blueprint(reruns_api.blueprint)
    app.register_blueprint(health.blueprint)
    app.register_blueprint(openapi.blueprint)
    console.register(app, settings)
    errors.register(app)
    request_metrics.install(app)
    _bind_log_context(app)
    return app


def _bind_log_context(app: Flask) -> None:
    """Log lines written while serving a request carry its project id and trace context."""

    @app.before_request
    def _bind() -> None:
        project_id = (request.view_args or {}).get("project_id")
        traceparent = tracing.parse_traceparent(request.headers.get("traceparent"))
        if project_id is not None or traceparent is not None:
            g.awooop_log_token = logs.bind(project_id=project_id, traceparent=traceparent)

    @app.teardown_request
    def _unbind(_: BaseException | None) -> None:
        token = g.pop("awooop_log_token", None)
        if token is not None:
            logs.unbind(token)
