"""``/healthz``, ``/readyz`` and ``/metrics``: what load balancers and Prometheus ask.

* ``/healthz`` — the process is up and serving; it checks nothing else (a liveness probe
  must not fail because the database is down: restarting the web process would not help).
* ``/readyz`` — the database and the broker answer, each within
  ``AWOOOP_READINESS_TIMEOUT_SECONDS``; otherwise 503 ``E-UNAVAILABLE-001`` with which one
  failed, so a load balancer stops sending events this process could not admit.
* ``/metrics`` — Prometheus exposition (see :mod:`awooop.metrics`). Every answer of the web
  process is counted and timed (:mod:`awooop.web.request_metrics`).

None of them needs credentials, and none of them says anything about a project or a run.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint, Response, jsonify
from redis.backoff import NoBackoff
from redis.retry import Retry

from awooop import errors, metrics, redis_client
from awooop.store import monitoring
from awooop.web import context

log = logging.getLogger("awooop.web.health")

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz() -> Response:
    return jsonify({"status": "ok"})


@blueprint.get("/readyz")
def readyz() -> tuple[Response, int]:
    settings = context.settings()
    checks = {
        "database": _check("database", _database_answers),
        "broker": _check(
            "broker",
            lambda: _broker_answers(settings.broker_url, settings.broker_sentinel_master),
        ),
    }
    failed = [name for name, state in checks.items() if state != "ok"]
    if not failed:
        return jsonify({"status": "ready", "checks": checks}), 200
    error = errors.ServiceUnavailable(f"not ready: {' and '.join(failed)} unreachable")
    body: dict[str, Any] = {"error": {"code": error.code, "message": error.message}}
    response = jsonify({**body, "checks": checks})
    response.headers.update(error.headers)
    return response, error.http_status


@blueprint.get("/metrics")
def prometheus_metrics() -> Response:
    body = metrics.render(context.read_engine(), context.settings().metrics_query_timeout_seconds)
    return Response(body, content_type=metrics.CONTENT_TYPE)


def _check(name: str, probe: Any) -> str:
    try:
        probe()
    except Exception as exc:
        # The exception's class only: a driver's message could quote a URL.
        log.warning(
            "readiness check failed",
            extra={"action": "readiness_failed", "dependency": name, "error": type(exc).__name__},
        )
        return "unreachable"
    return "ok"


def _database_answers() -> None:
    with context.probe_engine().connect() as conn:
        monitoring.ping(conn)


def _broker_answers(url: str, master_name: str) -> None:
    timeout = context.settings().readiness_timeout_seconds
    if redis_client.is_redis_url(url):  # a sentinel:// URL: the master its sentinels name
        client = redis_client.for_url(
            url,
            master_name,
            socket_connect_timeout=timeout,
            socket_timeout=timeout,
            retry=Retry(NoBackoff(), 0),  # one try: a readiness answer must be quick
        )
        try:
            client.ping()
        finally:
            client.close()
        return
    from kombu import Connection

    with Connection(url, connect_timeout=timeout) as conn:
        conn.connect()
