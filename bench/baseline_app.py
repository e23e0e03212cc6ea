"""The raw baseline for the admission benchmark: plain Flask, AwoooP's rows minus one.

``gunicorn -c gunicorn.conf.py 'bench.baseline_app:create_app()'`` — the same gunicorn
settings as the real app. ``POST /v1/projects/<project_id>/runs`` does what AwoooP's
admission does minus authentication, validation, routing, the run's first history row and
the Celery message format: one transaction inserting the dedupe row (``ON CONFLICT DO
NOTHING``) and, if it was new, the run row; commit; one Redis ``LPUSH`` of the run id; a 202
JSON answer (200 for a duplicate).
psycopg2 with a thread-safe pool and redis-py, no ORM. The project row must exist.
"""

from __future__ import annotations

import hashlib
import uuid

import psycopg2
import redis
from flask import Flask, Response, jsonify, request
from psycopg2.pool import ThreadedConnectionPool

from awooop.config import Settings

# The Redis list the baseline pushes run ids to (the benchmark deletes it afterwards).
RUN_LIST = "awooop:bench:baseline-runs"

_INSERT_DEDUPE = """
INSERT INTO awooop_channel_event_dedupe
    (project_id, channel_type, provider_event_id, run_id, request_digest)
VALUES (%s, 'api', %s, %s::uuid, %s)
ON CONFLICT (project_id, channel_type, provider_event_id) DO NOTHING
RETURNING run_id
"""

_INSERT_RUN = """
INSERT INTO awooop_run_state
    (run_id, project_id, channel_type, workflow_name, workflow_version, workflow_digest, input)
VALUES (%s::uuid, %s, 'api', 'noop-3', 1, 'bench-baseline', %s::jsonb)
"""


def _dsn(url: str) -> str:
    return url.replace("postgresql+psycopg2://", "postgresql://", 1)


def create_app() -> Flask:
    settings = Settings.from_env(required=("database_url", "broker_url"))
    # One connection per gunicorn thread, all kept open (psycopg2's pool closes returned
    # connections beyond ``minconn``, so minconn = maxconn).
    size = settings.web_threads
    pool = ThreadedConnectionPool(
        size,
        size,
        _dsn(settings.database_url),
        application_name="awooop-bench-baseline",
    )
    broker = redis.Redis.from_url(settings.broker_url)
    app = Flask("awooop_bench_baseline")

    @app.post("/v1/projects/<project_id>/runs")
    def admit(project_id: str) -> tuple[Response, int]:
        body = request.get_data() or b"{}"
        key = request.headers.get("Idempotency-Key") or uuid.uuid4().hex
        run_id = str(uuid.uuid4())
        conn = pool.getconn()
        try:
            with conn, conn.cursor() as cur:  # commit on success, rollback on error
                cur.execute(
                    _INSERT_DEDUPE, (project_id, key, run_id, hashlib.sha256(body).hexdigest())
                )
                created = cur.fetchone() is not None
                if created:
                    cur.execute(_INSERT_RUN, (run_id, project_id, body.decode("utf-8")))
        except psycopg2.Error:
            pool.putconn(conn, close=True)
            return jsonify({"error": "database"}), 503
        pool.putconn(conn)
        if not created:
            return jsonify({"status": "duplicate"}), 200
        broker.lpush(RUN_LIST, run_id)
        return jsonify({"run_id": run_id, "status": "PENDING"}), 202

    return app
