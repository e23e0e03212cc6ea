"""API tokens with a given role for a test project, and the headers that present them."""

from __future__ import annotations

from sqlalchemy import Engine

from awooop import secrets
from awooop.store import projects

ROLES = ("viewer", "operator", "admin", "ingest")


def add(engine: Engine, project_id: str, role: str) -> str:
    token = secrets.new_token()
    with engine.connect() as conn:
        projects.add_api_token(conn, project_id, role, secrets.sha256_hex(token))
    return token


def all_roles(engine: Engine, project_id: str) -> dict[str, str]:
    """One fresh token per role."""
    return {role: add(engine, project_id, role) for role in ROLES}


def bearer(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


def operation(token: str, **extra: str) -> dict[str, str]:
    return bearer(token, **{"Content-Type": "application/json", **extra})


def set_limits(engine: Engine, project_id: str, **limits: int | None) -> None:
    with engine.connect() as conn:
        assert projects.set_limits(conn, project_id, limits) is not None
