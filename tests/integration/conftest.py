from __future__ import annotations

import base64
import json

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine

from awooop.config import Settings
from awooop.tasks import handoff
from awooop.web.app import create_app
from tests.support import tokens
from tests.support.console import login


@pytest.fixture
def role_tokens(engine: Engine, project: dict) -> dict[str, str]:
    """An API token of the test project in each role, by role."""
    return tokens.all_roles(engine, project["project_id"])


@pytest.fixture
def operator(client: FlaskClient, project: dict, role_tokens: dict[str, str]) -> FlaskClient:
    """The test client signed in to the ops console with an operator token."""
    assert login(client, project["project_id"], role_tokens["operator"]).status_code == 303
    return client


@pytest.fixture
def client(settings: Settings, engine: Engine, redis_client) -> FlaskClient:
    """The real app over the test database; messages go to the real (test) broker."""
    app = create_app(settings, engine)
    return app.test_client()


def queued_messages(redis_client) -> int:
    """Celery messages waiting in the `runs` queue of the test broker, once the app's sender
    thread has sent what it was given."""
    assert handoff.flush(timeout=10), "the run sender did not send within 10 s"
    return int(redis_client.llen("runs"))


def queued_run_ids(redis_client) -> list[str]:
    """The run each message in the test broker's `runs` queue names (its one argument), in
    queue order."""
    return [
        json.loads(base64.b64decode(json.loads(raw)["body"]))[0][0]
        for raw in redis_client.lrange("runs", 0, -1)
    ]
