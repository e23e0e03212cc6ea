"""``/healthz`` and ``/readyz`` over a real PostgreSQL and Redis, and with either one down."""

from __future__ import annotations

import dataclasses

from awooop.config import Settings
from awooop.web.app import create_app
from tests.support.processes import free_port


def _unreachable_database(settings: Settings) -> Settings:
    return dataclasses.replace(
        settings, database_url=f"postgresql+psycopg2://postgres@127.0.0.1:{free_port()}/nowhere"
    )


def _unreachable_broker(settings: Settings) -> Settings:
    return dataclasses.replace(settings, broker_url=f"redis://127.0.0.1:{free_port()}/0")


def test_healthz_answers_while_the_database_is_down(settings):
    client = create_app(_unreachable_database(settings)).test_client()

    response = client.get("/healthz")

    assert (response.status_code, response.json) == (200, {"status": "ok"})


def test_readyz_is_200_when_the_database_and_the_broker_answer(client):
    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json == {"status": "ready", "checks": {"database": "ok", "broker": "ok"}}


def test_readyz_is_503_when_the_database_is_down(settings, redis_client):
    client = create_app(_unreachable_database(settings)).test_client()

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json["error"]["code"] == "E-UNAVAILABLE-001"
    assert response.json["checks"] == {"database": "unreachable", "broker": "ok"}
    assert response.headers["Retry-After"] == "5"


def test_readyz_is_503_when_the_broker_is_down(settings, engine):
    client = create_app(_unreachable_broker(settings), engine).test_client()

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json["error"]["code"] == "E-UNAVAILABLE-001"
    assert response.json["checks"] == {"database": "ok", "broker": "unreachable"}
